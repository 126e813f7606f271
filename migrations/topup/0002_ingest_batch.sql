-- topup-webhook at speed (issue 10, "Speed"): concurrent notifications share one statement and
-- one commit (topup.ingest_batch), and no writer's transaction sends a NOTIFY any more.

-- 1. The outbox's NOTIFY trigger goes. A transaction that has sent a NOTIFY takes PostgreSQL's
--    one notify-queue lock at commit and holds it until its commit is flushed: every writer of
--    the outbox committed one after the other, whatever else they shared (the trigger alone cost
--    a third of topup-webhook's throughput). The relay is now woken after the commit, by the
--    writer itself (core.outbox.RelayHint: directly when this process's relay leads, else one
--    pg_notify('topup_outbox') sent outside any writer's transaction, coalesced); its poll is
--    still the safety net, so a hint that is lost only delays.
DROP TRIGGER outbox_notify ON topup.outbox;
DROP FUNCTION topup.outbox_notify();

-- 2. Many notifications in one statement (one round trip, one transaction, one commit): each
--    item exactly as topup.ingest handles one (inbox, payment, outbox), in the order given, so
--    two items of one payment or one event id in a batch end as they would one after the other
--    (the second sees the first's rows: one transaction). One answer per item, in order. The
--    payloads come as JSON text, cast here: a text jsonb cannot hold fails the statement, and
--    the caller then sends each item alone (store.py), so that one bad item cannot fail its
--    neighbours. The exchange is the service's, one for all.
CREATE FUNCTION topup.ingest_batch(
    p_providers text[], p_event_ids text[], p_event_types text[], p_routes text[], p_payloads text[],
    p_payment_ids text[], p_provider_payment_ids text[], p_wallets text[], p_references text[],
    p_amounts_minor bigint[], p_currencies text[], p_message_ids text[], p_exchange text,
    p_request_ids text[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_event_ids), 0);
    answers text[] := array_fill(NULL::text, ARRAY[n]);
BEGIN
    IF n > 1000 THEN
        RAISE EXCEPTION 'a batch holds at most 1000 notifications, not %', n
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF coalesce(cardinality(p_providers), 0) <> n OR coalesce(cardinality(p_event_types), 0) <> n
       OR coalesce(cardinality(p_routes), 0) <> n OR coalesce(cardinality(p_payloads), 0) <> n
       OR coalesce(cardinality(p_payment_ids), 0) <> n
       OR coalesce(cardinality(p_provider_payment_ids), 0) <> n
       OR coalesce(cardinality(p_wallets), 0) <> n OR coalesce(cardinality(p_references), 0) <> n
       OR coalesce(cardinality(p_amounts_minor), 0) <> n OR coalesce(cardinality(p_currencies), 0) <> n
       OR coalesce(cardinality(p_message_ids), 0) <> n OR coalesce(cardinality(p_request_ids), 0) <> n
    THEN
        RAISE EXCEPTION 'topup.ingest_batch: the arrays differ in length' USING ERRCODE = 'array_subscript_error';
    END IF;
    FOR i IN 1 .. n LOOP
        answers[i] := topup.ingest(
            p_providers[i], p_event_ids[i], p_event_types[i], p_routes[i], p_payloads[i]::jsonb,
            p_payment_ids[i], p_provider_payment_ids[i], p_wallets[i], p_references[i],
            p_amounts_minor[i], p_currencies[i], p_message_ids[i], p_exchange, p_request_ids[i]);
    END LOOP;
    RETURN answers;
END $$;

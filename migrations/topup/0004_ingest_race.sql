-- Two ingests of one payment at the same moment (issue 21: right after a PostgreSQL restart,
-- stripe-fake retried a card payment's two notifications at once, and topup-webhook answered
-- 500). A payment row has two unique constraints: payments_pkey (its id, derived from the
-- provider and the provider's payment id) and payments_one_per_provider_payment. The INSERTs
-- named only the first as ON CONFLICT's arbiter. Two inserts that both pass the arbiter's check
-- before either has written its index entry then meet on the other constraint, which is checked
-- as a plain insert: the loser waited for the winner's commit and failed with 23505 instead of
-- doing nothing. With no conflict target every unique constraint is an arbiter: the loser's
-- speculative insertion is undone and tried again, waits for the winner, and does nothing, and
-- the notification is answered as the repeat it is ('reported', as when it comes later).
-- tests/topup_webhook/test_races.py forces that interleaving.
--
-- The two functions as in 0003_ingest_set_based.sql but for their payments INSERT.

-- topup.ingest
CREATE OR REPLACE FUNCTION topup.ingest(
    p_provider text, p_event_id text, p_event_type text, p_route text, p_payload jsonb,
    p_payment_id text, p_provider_payment_id text, p_wallet text, p_reference text,
    p_amount_minor bigint, p_currency text, p_message_id text, p_exchange text, p_request_id text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_inbox bigint;
    v_payment topup.payments;
BEGIN
    INSERT INTO topup.inbox (provider, event_id, event_type, route, payload, payment_id, processed_at)
    VALUES (p_provider, p_event_id, p_event_type, p_route, p_payload, p_payment_id, now())
    ON CONFLICT ON CONSTRAINT inbox_event_seen DO NOTHING
    RETURNING id INTO v_inbox;
    IF v_inbox IS NULL THEN
        RETURN 'duplicate';
    END IF;
    IF p_payment_id IS NULL THEN
        RETURN 'stored';
    END IF;

    INSERT INTO topup.payments (id, provider, provider_payment_id, wallet, reference, amount_minor,
                                currency, reported_by, routes)
    VALUES (p_payment_id, p_provider, p_provider_payment_id, p_wallet, p_reference, p_amount_minor,
            p_currency, ARRAY[p_event_id], ARRAY[p_route])
    ON CONFLICT DO NOTHING  -- every unique constraint an arbiter (0004)
    RETURNING * INTO v_payment;
    IF v_payment.id IS NOT NULL THEN
        INSERT INTO topup.outbox (message_id, exchange, routing_key, message_type, headers, body)
        VALUES (p_message_id, p_exchange, coalesce(v_payment.wallet, v_payment.id), 'TopupRecorded',
                topup.recorded_headers(v_payment, p_request_id), topup.recorded_body(v_payment, p_route));
        RETURN 'recorded';
    END IF;

    -- Recorded before (by another notification, route, or a concurrent one that committed
    -- first: ON CONFLICT waited for it, on either constraint). Only the two lists grow; a
    -- record of this provider payment under another id is a defect (report_payment raises).
    RETURN topup.report_payment(p_payment_id, p_provider, p_provider_payment_id, p_event_id, p_route,
                                p_amount_minor, p_currency);
END $$;

-- topup.ingest_batch
CREATE OR REPLACE FUNCTION topup.ingest_batch(
    p_providers text[], p_event_ids text[], p_event_types text[], p_routes text[], p_payloads text[],
    p_payment_ids text[], p_provider_payment_ids text[], p_wallets text[], p_references text[],
    p_amounts_minor bigint[], p_currencies text[], p_message_ids text[], p_exchange text,
    p_request_ids text[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_event_ids), 0);
    answers text[];
    apart boolean;
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
    IF n = 0 THEN
        RETURN '{}';
    END IF;

    SELECT count(DISTINCT (p_providers[i], p_event_ids[i])) = n
           AND count(DISTINCT p_payment_ids[i]) = count(p_payment_ids[i])
      INTO apart
      FROM generate_subscripts(p_event_ids, 1) AS i;

    IF NOT apart THEN
        -- Items that must see each other's rows: one after the other, as topup.ingest does.
        answers := array_fill(NULL::text, ARRAY[n]);
        FOR i IN 1 .. n LOOP
            answers[i] := topup.ingest(
                p_providers[i], p_event_ids[i], p_event_types[i], p_routes[i], p_payloads[i]::jsonb,
                p_payment_ids[i], p_provider_payment_ids[i], p_wallets[i], p_references[i],
                p_amounts_minor[i], p_currencies[i], p_message_ids[i], p_exchange, p_request_ids[i]);
        END LOOP;
        RETURN answers;
    END IF;

    -- Every item its own event and payment: each INSERT takes the whole batch, in item order
    -- (the order topup.ingest would take their locks in). A data-modifying WITH runs whether
    -- or not the final SELECT reads it. 'later': a payment recorded before, reported below.
    WITH inbox AS (
        INSERT INTO topup.inbox (provider, event_id, event_type, route, payload, payment_id, processed_at)
        SELECT p_providers[i], p_event_ids[i], p_event_types[i], p_routes[i], p_payloads[i]::jsonb,
               p_payment_ids[i], now()
          FROM generate_subscripts(p_event_ids, 1) AS i
         ORDER BY i
        ON CONFLICT ON CONSTRAINT inbox_event_seen DO NOTHING
        RETURNING provider, event_id
    ), fresh AS (
        SELECT i FROM generate_subscripts(p_event_ids, 1) AS i
          JOIN inbox ON inbox.provider = p_providers[i] AND inbox.event_id = p_event_ids[i]
    ), recorded AS (
        INSERT INTO topup.payments (id, provider, provider_payment_id, wallet, reference, amount_minor,
                                    currency, reported_by, routes)
        SELECT p_payment_ids[i], p_providers[i], p_provider_payment_ids[i], p_wallets[i], p_references[i],
               p_amounts_minor[i], p_currencies[i], ARRAY[p_event_ids[i]], ARRAY[p_routes[i]]
          FROM fresh
         WHERE p_payment_ids[i] IS NOT NULL
         ORDER BY i
        ON CONFLICT DO NOTHING  -- every unique constraint an arbiter (0004)
        RETURNING *
    ), announced AS (
        INSERT INTO topup.outbox (message_id, exchange, routing_key, message_type, headers, body)
        SELECT p_message_ids[f.i], p_exchange, coalesce(r.wallet, r.id), 'TopupRecorded',
               topup.recorded_headers(r, p_request_ids[f.i]), topup.recorded_body(r, p_routes[f.i])
          FROM recorded r JOIN fresh f ON p_payment_ids[f.i] = r.id
         ORDER BY f.i
    )
    SELECT array_agg(CASE WHEN f.i IS NULL THEN 'duplicate'
                          WHEN p_payment_ids[s.i] IS NULL THEN 'stored'
                          WHEN r.id IS NOT NULL THEN 'recorded'
                          ELSE 'later' END ORDER BY s.i)
      INTO answers
      FROM generate_subscripts(p_event_ids, 1) AS s(i)
      LEFT JOIN fresh f ON f.i = s.i
      LEFT JOIN recorded r ON f.i IS NOT NULL AND r.id = p_payment_ids[s.i];

    FOR i IN 1 .. n LOOP
        IF answers[i] = 'later' THEN
            answers[i] := topup.report_payment(p_payment_ids[i], p_providers[i], p_provider_payment_ids[i],
                                               p_event_ids[i], p_routes[i], p_amounts_minor[i], p_currencies[i]);
        END IF;
    END LOOP;
    RETURN answers;
END $$;

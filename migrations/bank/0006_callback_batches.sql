-- bank-webhook at speed (issue 26): concurrent callbacks share one statement and one commit
-- (bank.receive_callbacks, through core/coalesce.py), and every transaction that takes more than
-- one transfer's lock takes them in one order.

-- 1. The references' locks (bank.lock_reference's keys), each once, in ascending key order. A
--    transaction that needs several takes them all here first: two such transactions (a batch
--    of callbacks, a batch of bank-adapter's records) then wait for one another only one way,
--    never each for the other (no deadlock). The order is the keys', not the references': two
--    references whose keys collide are one lock, which an order by reference could take in
--    another place than the other transaction does.
CREATE FUNCTION bank.lock_references(p_bank_references text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
BEGIN
    FOR k IN
        SELECT DISTINCT hashtextextended('bank-transfer:' || r, 0)
          FROM unnest(p_bank_references) AS r
         WHERE r IS NOT NULL
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(k);
    END LOOP;
END $$;

-- 2. Many callbacks in one transaction: the locks first (above), then each callback exactly as
--    bank.receive_callback keeps one (inbox, outcome, announcement), in the order given, so two
--    callbacks of one webhook id or one transfer end as they would one after the other (the
--    second sees the first's rows). One answer per callback, in order. The bodies come as JSON
--    text, cast here: a text jsonb cannot hold fails the statement, and the caller then sends
--    each alone (store.py), so that one bad callback cannot fail its neighbours.
CREATE FUNCTION bank.receive_callbacks(
    p_webhook_ids text[], p_types text[], p_bank_references text[], p_bodies text[], p_reasons text[],
    p_message_ids text[], p_exchange text
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_webhook_ids), 0);
    answers text[] := array_fill(NULL::text, ARRAY[n]);
BEGIN
    IF n > 1000 THEN
        RAISE EXCEPTION 'a batch holds at most 1000 callbacks, not %', n
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF coalesce(cardinality(p_types), 0) <> n OR coalesce(cardinality(p_bank_references), 0) <> n
       OR coalesce(cardinality(p_bodies), 0) <> n OR coalesce(cardinality(p_reasons), 0) <> n
       OR coalesce(cardinality(p_message_ids), 0) <> n
    THEN
        RAISE EXCEPTION 'bank.receive_callbacks: the arrays differ in length'
            USING ERRCODE = 'array_subscript_error';
    END IF;
    PERFORM bank.lock_references(p_bank_references);
    FOR i IN 1 .. n LOOP
        answers[i] := bank.receive_callback(p_webhook_ids[i], p_types[i], p_bank_references[i],
                                            p_bodies[i]::jsonb, p_reasons[i], p_message_ids[i], p_exchange);
    END LOOP;
    RETURN answers;
END $$;

-- 3. bank-adapter's batch of new transfers, each recorded as bank.record_transfer records one,
--    in the order given (the answers in that order), its references' locks taken first in the
--    order above: a batch of callbacks holding one of them and waiting for another of them
--    would otherwise deadlock with it.
CREATE FUNCTION bank.record_transfers(
    p_command_ids text[], p_saga_ids text[], p_amounts_minor bigint[], p_currencies text[],
    p_destination_ibans text[], p_bank_references text[], p_refusals text[], p_message_ids text[],
    p_exchange text, p_trace_headers jsonb[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_command_ids), 0);
    answers text[] := array_fill(NULL::text, ARRAY[n]);
BEGIN
    IF n > 1000 THEN
        RAISE EXCEPTION 'a batch holds at most 1000 transfers, not %', n
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF coalesce(cardinality(p_saga_ids), 0) <> n OR coalesce(cardinality(p_amounts_minor), 0) <> n
       OR coalesce(cardinality(p_currencies), 0) <> n OR coalesce(cardinality(p_destination_ibans), 0) <> n
       OR coalesce(cardinality(p_bank_references), 0) <> n OR coalesce(cardinality(p_refusals), 0) <> n
       OR coalesce(cardinality(p_message_ids), 0) <> n OR coalesce(cardinality(p_trace_headers), 0) <> n
    THEN
        RAISE EXCEPTION 'bank.record_transfers: the arrays differ in length'
            USING ERRCODE = 'array_subscript_error';
    END IF;
    PERFORM bank.lock_references(p_bank_references);
    FOR i IN 1 .. n LOOP
        answers[i] := bank.record_transfer(p_command_ids[i], p_saga_ids[i], p_amounts_minor[i], p_currencies[i],
                                           p_destination_ibans[i], p_bank_references[i], p_refusals[i],
                                           p_message_ids[i], p_exchange, p_trace_headers[i]);
    END LOOP;
    RETURN answers;
END $$;

-- withdrawal-orchestrator in fewer round trips (the saga's benchmark is CPU-bound: each
-- statement costs both the service and the server a round trip's work). Nothing here changes
-- what is written: the same UPDATE and INSERTs, through the same guard and history triggers,
-- as the application role itself (SECURITY INVOKER, as the service's writes always were: these
-- functions may do nothing the role could not do statement by statement; grants.sql).

-- 1. Changes of state, in the arrays' order, in one statement: a batch of results (several
--    sagas, and a saga twice: debited then bank_transfer_pending) is one round trip. One
--    UPDATE per element, not one set-based UPDATE: a statement cannot change one row twice,
--    and each change must pass the guard trigger and leave its history row in its turn. The
--    columns a step learns are kept when the step learns nothing (NULL). The changed rows are
--    answered in order; a saga not found is left out (the caller holds every row it names
--    locked, so one missing is a defect it reports).
CREATE FUNCTION withdrawal.move_sagas(
    p_ids text[], p_states text[], p_actors text[], p_fees bigint[], p_debit_transaction_ids text[],
    p_bank_references text[], p_reasons text[], p_reason_details text[], p_reviewers text[],
    p_commands text[]
) RETURNS SETOF withdrawal.sagas LANGUAGE plpgsql AS $$
DECLARE
    n CONSTANT integer := coalesce(cardinality(p_ids), 0);
    v_saga withdrawal.sagas;
BEGIN
    IF coalesce(cardinality(p_states), 0) <> n OR coalesce(cardinality(p_actors), 0) <> n
       OR coalesce(cardinality(p_fees), 0) <> n OR coalesce(cardinality(p_debit_transaction_ids), 0) <> n
       OR coalesce(cardinality(p_bank_references), 0) <> n OR coalesce(cardinality(p_reasons), 0) <> n
       OR coalesce(cardinality(p_reason_details), 0) <> n OR coalesce(cardinality(p_reviewers), 0) <> n
       OR coalesce(cardinality(p_commands), 0) <> n THEN
        RAISE EXCEPTION 'withdrawal.move_sagas needs arrays of one length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1 .. n LOOP
        UPDATE withdrawal.sagas
           SET state = p_states[i], state_actor = p_actors[i], state_changed_at = now(),
               fee_minor = coalesce(p_fees[i], fee_minor),
               debit_transaction_id = coalesce(p_debit_transaction_ids[i], debit_transaction_id),
               bank_reference = coalesce(p_bank_references[i], bank_reference),
               reason = coalesce(p_reasons[i], reason),
               reason_detail = coalesce(p_reason_details[i], reason_detail),
               reviewed_by = coalesce(p_reviewers[i], reviewed_by),
               last_command = p_commands[i]::jsonb,
               last_published_at = now()
         WHERE id = p_ids[i]
        RETURNING * INTO v_saga;
        IF FOUND THEN
            RETURN NEXT v_saga;
        END IF;
    END LOOP;
END $$;

-- 2. A timestamp as Python's datetime.isoformat() writes an aware UTC one (the service's view
--    of a saga, service.view): 2026-12-01T10:00:00.123456+00:00, the fraction left out when it
--    is zero. The answer of a request stored below must be the very answer given.
CREATE FUNCTION withdrawal.iso_utc(p timestamptz) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || CASE WHEN date_part('microseconds', p AT TIME ZONE 'UTC')::bigint % 1000000 = 0 THEN ''
                   ELSE to_char(p AT TIME ZONE 'UTC', '.US') END
           || '+00:00'
$$;

-- 3. POST /v1/withdrawals in one statement (run alone, in autocommit: its own transaction, no
--    BEGIN or COMMIT round trips). Try, never wait, for the caller's key: not locked, nothing
--    else is done (409, its first request is still running). The lock is a transaction's, so it
--    is held until this statement commits, after the answer is stored. Then, in a statement of
--    its own (under READ COMMITTED a new snapshot: it sees an answer committed by the holder
--    just before this took the lock), the stored answer if any (a replay, or 422 for another
--    request). Else the saga (initiated), its first command into the outbox (the row as
--    core.outbox.enqueue writes it: its columns are the caller's, core.outbox.outbox_row) and
--    the answer under the key: p_answer is the answer but for the saga's two timestamps, which
--    only the insert knows.
CREATE FUNCTION withdrawal.request(
    p_scope text, p_key text, p_lock_key bigint, p_request_hash bytea,
    p_saga_id text, p_wallet text, p_amount_minor bigint, p_currency text, p_destination_iban text,
    p_issuer text, p_subject text, p_actor text, p_command text, p_answer text,
    p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers text,
    p_body text,
    OUT locked boolean, OUT stored_hash bytea, OUT stored_status smallint, OUT stored_body text,
    OUT saga withdrawal.sagas
) LANGUAGE plpgsql AS $$
BEGIN
    locked := pg_try_advisory_xact_lock(p_lock_key);
    IF NOT locked THEN
        RETURN;
    END IF;
    SELECT k.request_hash, k.status, k.body::text INTO stored_hash, stored_status, stored_body
      FROM withdrawal.idempotency_keys k
     WHERE k.scope = p_scope AND k.key = p_key;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO withdrawal.sagas (id, wallet, amount_minor, currency, destination_iban, requested_by_issuer,
                                  requested_by_subject, state, state_actor, last_command)
    VALUES (p_saga_id, p_wallet, p_amount_minor, p_currency, p_destination_iban, p_issuer, p_subject,
            'initiated', p_actor, p_command::jsonb)
    RETURNING * INTO saga;
    INSERT INTO withdrawal.outbox (message_id, exchange, routing_key, message_type, headers, body)
    VALUES (p_message_id, p_exchange, p_routing_key, p_message_type, p_headers::jsonb, p_body::jsonb);
    INSERT INTO withdrawal.idempotency_keys (scope, key, request_hash, status, body, saga_id)
    VALUES (p_scope, p_key, p_request_hash, 202,
            p_answer::jsonb || jsonb_build_object('created_at', withdrawal.iso_utc(saga.created_at),
                                                  'state_changed_at', withdrawal.iso_utc(saga.state_changed_at)),
            saga.id);
END $$;

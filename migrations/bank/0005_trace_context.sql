-- Traces (core/tracing.py, docs/operations.md "Traces"): the trace context of the command a
-- transfer was asked for (its W3C traceparent and tracestate), kept on the transfer, so that the
-- announcement of its outcome continues the withdrawal's trace whenever and by whomever it is
-- made: the bank's refusal, its callback (bank-webhook, a request of the bank's own), the
-- reconciliation, a republish. '{}' with tracing off: the announcements are what they were.
ALTER TABLE bank.transfers ADD COLUMN trace_headers jsonb NOT NULL DEFAULT '{}',
    ADD CONSTRAINT transfers_trace_headers_small CHECK (
        jsonb_typeof(trace_headers) = 'object' AND length(trace_headers::text) <= 1024);

CREATE OR REPLACE FUNCTION bank.announce(p_transfer bank.transfers, p_message_id text, p_exchange text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_type text := CASE p_transfer.state WHEN 'succeeded' THEN 'BankTransferSucceeded'
                                         WHEN 'failed' THEN 'BankTransferFailed' END;
BEGIN
    IF v_type IS NULL THEN
        RAISE EXCEPTION 'transfer % has no outcome to announce', p_transfer.command_id;
    END IF;
    INSERT INTO bank.outbox (message_id, exchange, routing_key, message_type, headers, body)
    VALUES (
        p_message_id, p_exchange, v_type, v_type,
        -- the correlation id travels in the headers document (core.outbox.CORRELATION_ID_KEY)
        -- and, with tracing on, the context of the command the transfer was asked for
        p_transfer.trace_headers || jsonb_build_object('x-hiwallet-correlation-id', p_transfer.saga_id),
        CASE v_type
            WHEN 'BankTransferSucceeded' THEN jsonb_build_object(
                'command_id', p_transfer.command_id, 'saga_id', p_transfer.saga_id,
                'bank_reference', p_transfer.bank_reference)
            ELSE jsonb_build_object(
                'command_id', p_transfer.command_id, 'saga_id', p_transfer.saga_id,
                'bank_reference', p_transfer.bank_reference,
                'reason', coalesce(p_transfer.reason, 'failed'))
        END);
END $$;

-- bank-adapter passes the context (p_trace_headers) with the transfer it records.
DROP FUNCTION bank.record_transfer(text, text, bigint, text, text, text, text, text, text);

CREATE FUNCTION bank.record_transfer(
    p_command_id text, p_saga_id text, p_amount_minor bigint, p_currency text, p_destination_iban text,
    p_bank_reference text, p_refusal text, p_message_id text, p_exchange text,
    p_trace_headers jsonb DEFAULT '{}'
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_transfer bank.transfers;
    v_early bank.inbox;
BEGIN
    IF p_bank_reference IS NULL THEN
        INSERT INTO bank.transfers (command_id, saga_id, amount_minor, currency, destination_iban, state,
                                    reason, outcome_at, outcome_source, trace_headers)
        VALUES (p_command_id, p_saga_id, p_amount_minor, p_currency, p_destination_iban, 'failed',
                left(coalesce(p_refusal, 'refused by the bank'), 500), now(), 'bank',
                coalesce(p_trace_headers, '{}'))
        ON CONFLICT ON CONSTRAINT transfers_pkey DO NOTHING
        RETURNING * INTO v_transfer;
        IF v_transfer.command_id IS NULL THEN
            RETURN 'exists';
        END IF;
        PERFORM bank.announce(v_transfer, p_message_id, p_exchange);
        RETURN 'failed';
    END IF;

    -- One at a time per reference with bank.receive_callback: a callback committed after this
    -- transaction's look at the inbox below, whose own look found no transfer yet, would be
    -- applied by neither (READ COMMITTED). The lock is held to the commit.
    PERFORM bank.lock_reference(p_bank_reference);
    INSERT INTO bank.transfers (command_id, saga_id, amount_minor, currency, destination_iban, state,
                                bank_reference, trace_headers)
    VALUES (p_command_id, p_saga_id, p_amount_minor, p_currency, p_destination_iban, 'pending',
            p_bank_reference, coalesce(p_trace_headers, '{}'))
    ON CONFLICT ON CONSTRAINT transfers_pkey DO NOTHING
    RETURNING * INTO v_transfer;
    IF v_transfer.command_id IS NULL THEN
        RETURN 'exists';
    END IF;

    -- The earliest outcome the bank sent for it (a transfer has one outcome; a second,
    -- different one would be the bank's defect: the first stands, as for callbacks in order).
    SELECT * INTO v_early FROM bank.inbox
     WHERE bank_reference = p_bank_reference AND applied_at IS NULL
       AND type IN ('transfer.succeeded', 'transfer.failed')
     ORDER BY id LIMIT 1;
    IF v_early.id IS NULL THEN
        RETURN 'pending';
    END IF;
    PERFORM bank.apply_outcome(p_bank_reference, v_early.type = 'transfer.succeeded',
                               v_early.body #>> '{data,failure_reason}', 'callback', p_message_id,
                               p_exchange);
    UPDATE bank.inbox SET applied_at = now()
     WHERE bank_reference = p_bank_reference AND applied_at IS NULL
       AND type IN ('transfer.succeeded', 'transfer.failed');
    RETURN CASE WHEN v_early.type = 'transfer.succeeded' THEN 'succeeded' ELSE 'failed' END;
END $$;

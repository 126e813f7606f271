-- bank-adapter and bank-webhook (issue 11, the withdrawal saga's bank side): the transfers we
-- asked the bank for (bank.transfers, one row per StartBankTransfer command, ever), what the
-- bank told us about them (bank.inbox, one row per verified callback), what is to be announced
-- (bank.outbox: BankTransferSucceeded / BankTransferFailed to hiwallet.withdrawals) and what
-- bank-adapter's consumer has handled (bank.processed_events).
--
-- The services write transfers, inbox and outbox only through the functions below (grants.sql:
-- SECURITY DEFINER; the application role has no INSERT or UPDATE on those tables). A transfer's
-- outcome is recorded at most once, and its announcement is written only together with it: a
-- compromised service cannot announce a BankTransferSucceeded (which settles a withdrawal) or a
-- BankTransferFailed (which refunds one) without a transfer record behind it, nor change the
-- outcome of a transfer once recorded.

CREATE SCHEMA IF NOT EXISTS bank;

-- One row per transfer we asked the bank for, under the StartBankTransfer's command id (the
-- bank's Idempotency-Key too): the saga's "stored response" of its bank step. Written once the
-- bank accepted the request (pending, with its reference), or refused it outright (failed,
-- source 'bank', no reference); its outcome recorded once (succeeded | failed), by the bank's
-- callback, the reconciliation or the bank's refusal.
CREATE TABLE bank.transfers (
    command_id       text        NOT NULL,
    saga_id          text        NOT NULL,
    amount_minor     bigint      NOT NULL,
    currency         text        NOT NULL,
    destination_iban text        NOT NULL,
    state            text        NOT NULL,
    -- the bank's id of the transfer ("trf_…"); NULL only for a request the bank refused
    bank_reference   text,
    -- why it failed (the bank's failure reason, or its refusal of the request)
    reason           text,
    requested_at     timestamptz NOT NULL DEFAULT now(),
    outcome_at       timestamptz,
    outcome_source   text,
    CONSTRAINT transfers_pkey PRIMARY KEY (command_id),
    CONSTRAINT transfers_bank_reference_unique UNIQUE (bank_reference),
    CONSTRAINT transfers_state_known CHECK (state IN ('pending', 'succeeded', 'failed')),
    CONSTRAINT transfers_source_known CHECK (
        outcome_source IS NULL OR outcome_source IN ('callback', 'reconciliation', 'bank')),
    -- an outcome is whole (when, by what) exactly when the transfer is no longer pending
    CONSTRAINT transfers_outcome_whole CHECK (
        (state = 'pending') = (outcome_at IS NULL) AND (outcome_at IS NULL) = (outcome_source IS NULL)),
    -- only a request the bank refused has no reference
    CONSTRAINT transfers_reference_known CHECK (
        bank_reference IS NOT NULL OR (state = 'failed' AND outcome_source = 'bank')),
    CONSTRAINT transfers_amount_positive CHECK (amount_minor > 0 AND amount_minor <= 1000000000000000),
    CONSTRAINT transfers_currency_code CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT transfers_iban_format CHECK (destination_iban ~ '^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$'),
    CONSTRAINT transfers_ids_length CHECK (
        length(command_id) BETWEEN 1 AND 200 AND length(saga_id) BETWEEN 1 AND 200
        AND (bank_reference IS NULL OR length(bank_reference) BETWEEN 1 AND 200)),
    CONSTRAINT transfers_reason_length CHECK (reason IS NULL OR length(reason) <= 500)
);
-- The reconciliation reads the oldest pending transfers; nothing else is pending for long.
CREATE INDEX transfers_pending ON bank.transfers (requested_at) WHERE state = 'pending';

-- Every verified callback of the bank, as it was sent (a repeat of one webhook id stores
-- nothing new). applied_at: when its outcome was recorded on the transfer it names (or found
-- the outcome recorded already); NULL while no transfer with its reference is known (the
-- callback came before bank-adapter recorded the transfer: bank.record_transfer applies it).
CREATE TABLE bank.inbox (
    id             bigint      GENERATED ALWAYS AS IDENTITY,
    webhook_id     text        NOT NULL,
    type           text        NOT NULL,
    bank_reference text,
    received_at    timestamptz NOT NULL DEFAULT now(),
    body           jsonb       NOT NULL,
    applied_at     timestamptz,
    CONSTRAINT inbox_pkey PRIMARY KEY (id),
    CONSTRAINT inbox_webhook_seen UNIQUE (webhook_id),
    CONSTRAINT inbox_webhook_id_length CHECK (length(webhook_id) BETWEEN 1 AND 255),
    CONSTRAINT inbox_type_length CHECK (length(type) BETWEEN 1 AND 255),
    CONSTRAINT inbox_reference_length CHECK (bank_reference IS NULL OR length(bank_reference) BETWEEN 1 AND 200)
);
CREATE INDEX inbox_unapplied ON bank.inbox (bank_reference) WHERE applied_at IS NULL;

-- The transactional outbox, as core/outbox.py's outbox_table_sql("bank.outbox", "bank_outbox")
-- makes it; its relay runs in bank-adapter. With the NOTIFY trigger: bank-webhook (no relay,
-- no broker) wakes bank-adapter's relay by it, and a few transfers a second is far below the
-- rate at which the trigger's commit lock costs anything (docs/spine.md).
CREATE TABLE bank.outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   text        NOT NULL CONSTRAINT outbox_message_id_unique UNIQUE,
    exchange     text        NOT NULL,
    routing_key  text        NOT NULL,
    message_type text        NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    body         jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz
);
CREATE INDEX outbox_unsent ON bank.outbox (id) WHERE sent_at IS NULL;

CREATE FUNCTION bank.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bank_outbox', '');
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_notify AFTER INSERT ON bank.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION bank.outbox_notify();

-- The relay may delete what it sent (core.outbox.purge_sent), never a message still to be sent:
-- that would be a withdrawal that never settles or is never refunded.
CREATE FUNCTION bank.outbox_keeps_unsent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON bank.outbox
    FOR EACH ROW EXECUTE FUNCTION bank.outbox_keeps_unsent();

-- What bank-adapter's consumer handled (core/consumer.py), in the transaction of its effect.
CREATE TABLE bank.processed_events (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id)
);

-- The outcome of a transfer as the message that announces it, built from the row alone (so a
-- caller cannot make it say anything the record does not): BankTransferSucceeded or
-- BankTransferFailed (core/withdrawals.py's models), to p_exchange with the type as routing key
-- and the saga as correlation id. Internal: not granted to anyone.
CREATE FUNCTION bank.announce(p_transfer bank.transfers, p_message_id text, p_exchange text)
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
        jsonb_build_object('x-hiwallet-correlation-id', p_transfer.saga_id),
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

-- A transaction-level lock on one bank reference (an advisory lock: the transfer's row may not
-- exist yet). Internal.
CREATE FUNCTION bank.lock_reference(p_bank_reference text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('bank-transfer:' || p_bank_reference, 0))
$$;

-- The outcome of the pending transfer with this reference, once: 'recorded' (and announced, in
-- this transaction), 'already' (its outcome was recorded before: nothing changes, nothing is
-- announced again), 'unknown' (no transfer has this reference). Internal: the granted functions
-- below call it.
CREATE FUNCTION bank.apply_outcome(
    p_bank_reference text, p_succeeded boolean, p_reason text, p_source text, p_message_id text,
    p_exchange text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_transfer bank.transfers;
BEGIN
    UPDATE bank.transfers
       SET state = CASE WHEN p_succeeded THEN 'succeeded' ELSE 'failed' END,
           reason = CASE WHEN p_succeeded THEN NULL ELSE left(coalesce(p_reason, 'failed'), 500) END,
           outcome_at = now(),
           outcome_source = p_source
     WHERE bank_reference = p_bank_reference AND state = 'pending'
    RETURNING * INTO v_transfer;
    IF v_transfer.command_id IS NOT NULL THEN
        PERFORM bank.announce(v_transfer, p_message_id, p_exchange);
        RETURN 'recorded';
    END IF;
    IF EXISTS (SELECT 1 FROM bank.transfers WHERE bank_reference = p_bank_reference) THEN
        RETURN 'already';
    END IF;
    RETURN 'unknown';
END $$;

-- bank-adapter, after the bank accepted a transfer (its reference) or refused the request
-- (p_bank_reference NULL, p_refusal the reason): the transfer recorded, pending or failed
-- (source 'bank', announced). 'exists' when the command's transfer was recorded before (a
-- concurrent delivery of the same command: nothing changes). A callback that came before this
-- (bank.inbox, unapplied, with this reference) is applied now, in this transaction:
-- 'succeeded' | 'failed' then; else 'pending'.
CREATE FUNCTION bank.record_transfer(
    p_command_id text, p_saga_id text, p_amount_minor bigint, p_currency text, p_destination_iban text,
    p_bank_reference text, p_refusal text, p_message_id text, p_exchange text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_transfer bank.transfers;
    v_early bank.inbox;
BEGIN
    IF p_bank_reference IS NULL THEN
        INSERT INTO bank.transfers (command_id, saga_id, amount_minor, currency, destination_iban, state,
                                    reason, outcome_at, outcome_source)
        VALUES (p_command_id, p_saga_id, p_amount_minor, p_currency, p_destination_iban, 'failed',
                left(coalesce(p_refusal, 'refused by the bank'), 500), now(), 'bank')
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
                                bank_reference)
    VALUES (p_command_id, p_saga_id, p_amount_minor, p_currency, p_destination_iban, 'pending',
            p_bank_reference)
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

-- bank-webhook, one verified callback, in one statement (one transaction): stored in the inbox
-- unless its webhook id was seen before ('duplicate', nothing else). A transfer outcome
-- (transfer.succeeded | transfer.failed naming a reference) is recorded on the transfer and
-- announced ('recorded'), or found recorded before ('already'), or kept for the transfer
-- bank-adapter has not recorded yet ('unknown': bank.record_transfer applies it). Any other
-- type is kept only ('stored').
CREATE FUNCTION bank.receive_callback(
    p_webhook_id text, p_type text, p_bank_reference text, p_body jsonb, p_reason text,
    p_message_id text, p_exchange text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_inbox bigint;
    v_outcome text;
BEGIN
    IF p_bank_reference IS NOT NULL THEN
        PERFORM bank.lock_reference(p_bank_reference);  -- as bank.record_transfer, which see
    END IF;
    INSERT INTO bank.inbox (webhook_id, type, bank_reference, body)
    VALUES (p_webhook_id, p_type, p_bank_reference, p_body)
    ON CONFLICT ON CONSTRAINT inbox_webhook_seen DO NOTHING
    RETURNING id INTO v_inbox;
    IF v_inbox IS NULL THEN
        RETURN 'duplicate';
    END IF;
    IF p_type NOT IN ('transfer.succeeded', 'transfer.failed') OR p_bank_reference IS NULL THEN
        UPDATE bank.inbox SET applied_at = now() WHERE id = v_inbox;
        RETURN 'stored';
    END IF;
    v_outcome := bank.apply_outcome(p_bank_reference, p_type = 'transfer.succeeded', p_reason, 'callback',
                                    p_message_id, p_exchange);
    IF v_outcome <> 'unknown' THEN
        UPDATE bank.inbox SET applied_at = now() WHERE id = v_inbox;
    END IF;
    RETURN v_outcome;
END $$;

-- The reconciliation: the final status the bank's API gave for a pending transfer, recorded as
-- a callback's would be (source 'reconciliation'): 'recorded' | 'already' | 'unknown'.
CREATE FUNCTION bank.reconcile_transfer(
    p_bank_reference text, p_succeeded boolean, p_reason text, p_message_id text, p_exchange text
) RETURNS text LANGUAGE sql AS $$
    SELECT bank.apply_outcome(p_bank_reference, p_succeeded, p_reason, 'reconciliation', p_message_id,
                              p_exchange)
$$;

-- A StartBankTransfer published again (the stuck saga scan: same command id, new message id)
-- whose transfer has an outcome: that outcome announced again, under a new message id, the
-- same body. False when the transfer has no outcome (pending, or unknown).
CREATE FUNCTION bank.republish_outcome(p_command_id text, p_message_id text, p_exchange text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_transfer bank.transfers;
BEGIN
    SELECT * INTO v_transfer FROM bank.transfers WHERE command_id = p_command_id AND state <> 'pending';
    IF v_transfer.command_id IS NULL THEN
        RETURN false;
    END IF;
    PERFORM bank.announce(v_transfer, p_message_id, p_exchange);
    RETURN true;
END $$;

-- withdrawal-orchestrator (issue 11, CONTRACT-11 part A): the withdrawal saga's own database.
--
-- withdrawal.sagas holds one row per withdrawal and its state; withdrawal.transitions is the
-- saga's history, one row per change of state, written by the database itself (a trigger on
-- sagas), so no state changes without its row. The allowed changes are data
-- (withdrawal.allowed_transitions, docs/withdrawals.md's diagram): a change not listed there is
-- refused by the guard trigger, whatever the service asks. withdrawal.outbox takes only the
-- command the saga's current state calls for, with the saga's own wallet, amount and IBAN
-- (a guard trigger): a compromised service cannot send a debit, a bank transfer or a refund the
-- saga does not stand behind.

CREATE SCHEMA IF NOT EXISTS withdrawal;

-- The states, and which may follow which (the saga's diagram made data).
CREATE TABLE withdrawal.allowed_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    CONSTRAINT allowed_transitions_pkey PRIMARY KEY (from_state, to_state)
);
INSERT INTO withdrawal.allowed_transitions (from_state, to_state) VALUES
    ('initiated', 'debited'),
    ('initiated', 'rejected'),
    ('debited', 'under_review'),
    ('debited', 'bank_transfer_pending'),
    ('under_review', 'bank_transfer_pending'),
    ('under_review', 'cancelling'),
    ('bank_transfer_pending', 'settling'),
    ('bank_transfer_pending', 'compensating'),
    ('settling', 'completed'),
    ('compensating', 'failed'),
    ('cancelling', 'cancelled');

CREATE TABLE withdrawal.sagas (
    -- UUIDv7: time-ordered, so the newest-first listing walks the primary key's order
    id                   text        NOT NULL,
    wallet               text        NOT NULL,
    amount_minor         bigint      NOT NULL,
    currency             text        NOT NULL,
    destination_iban     text        NOT NULL,
    requested_by_issuer  text        NOT NULL,
    requested_by_subject text        NOT NULL,
    state                text        NOT NULL DEFAULT 'initiated',
    -- who caused the current state: "customer:<subject>", "system", a member of staff
    state_actor          text        NOT NULL,
    fee_minor            bigint,
    debit_transaction_id text,
    bank_reference       text,
    -- why it was rejected or failed (wallet-consumer's reason, the bank's); shown to the customer
    reason               text,
    reason_detail        text,
    reviewed_by          text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    state_changed_at     timestamptz NOT NULL DEFAULT now(),
    -- the command this state waits on ({type, body}), published again by the stuck saga scan
    -- with the same command_id; NULL in a state that waits on nobody (under review, terminal)
    last_command         jsonb,
    -- when last_command was last published (first time or again)
    last_published_at    timestamptz NOT NULL DEFAULT now(),
    republished          integer     NOT NULL DEFAULT 0,
    CONSTRAINT sagas_pkey PRIMARY KEY (id),
    CONSTRAINT sagas_state_known CHECK (state IN (
        'initiated', 'debited', 'rejected', 'under_review', 'bank_transfer_pending', 'settling',
        'completed', 'compensating', 'failed', 'cancelling', 'cancelled')),
    CONSTRAINT sagas_amount_positive CHECK (amount_minor > 0 AND amount_minor <= 1000000000000000),
    CONSTRAINT sagas_fee_not_negative CHECK (fee_minor IS NULL OR fee_minor >= 0),
    CONSTRAINT sagas_currency_code CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT sagas_iban_shape CHECK (destination_iban ~ '^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$'),
    CONSTRAINT sagas_wallet_length CHECK (length(wallet) BETWEEN 1 AND 200),
    CONSTRAINT sagas_requester_length CHECK (
        length(requested_by_issuer) BETWEEN 1 AND 500 AND length(requested_by_subject) BETWEEN 1 AND 255),
    CONSTRAINT sagas_actor_length CHECK (length(state_actor) BETWEEN 1 AND 200),
    CONSTRAINT sagas_reason_length CHECK (
        (reason IS NULL OR length(reason) <= 500) AND (reason_detail IS NULL OR length(reason_detail) <= 500)),
    CONSTRAINT sagas_republished_not_negative CHECK (republished >= 0),
    CONSTRAINT sagas_command_shape CHECK (
        last_command IS NULL OR (jsonb_typeof(last_command -> 'type') = 'string'
                                 AND jsonb_typeof(last_command -> 'body') = 'object'))
);
-- A wallet's withdrawals, newest first (GET /v1/withdrawals?wallet=…, the cursor is the id).
CREATE INDEX sagas_wallet ON withdrawal.sagas (wallet, id DESC);
-- The stuck saga scan: only the states that wait on a command, oldest publish first.
CREATE INDEX sagas_waiting ON withdrawal.sagas (last_published_at)
    WHERE state IN ('initiated', 'bank_transfer_pending', 'settling', 'compensating', 'cancelling');
-- The review queue (hiwallet withdrawals review).
CREATE INDEX sagas_under_review ON withdrawal.sagas (id) WHERE state = 'under_review';

-- The saga's history: append-only, written only by the trigger below.
CREATE TABLE withdrawal.transitions (
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    saga_id    text        NOT NULL,
    -- NULL: the saga's creation (its first state)
    from_state text,
    to_state   text        NOT NULL,
    actor      text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT transitions_pkey PRIMARY KEY (id),
    CONSTRAINT transitions_saga_fkey FOREIGN KEY (saga_id) REFERENCES withdrawal.sagas (id),
    CONSTRAINT transitions_allowed_fkey FOREIGN KEY (from_state, to_state)
        REFERENCES withdrawal.allowed_transitions (from_state, to_state),
    CONSTRAINT transitions_created_initiated CHECK (from_state IS NOT NULL OR to_state = 'initiated')
);
CREATE INDEX transitions_saga ON withdrawal.transitions (saga_id, id);

-- A saga starts initiated; afterwards what was asked never changes, and its state only moves
-- along allowed_transitions. Every change of state (and the creation) leaves its history row.
CREATE FUNCTION withdrawal.sagas_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'initiated' THEN
            RAISE EXCEPTION 'a withdrawal saga starts initiated, not %', NEW.state
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF (NEW.id, NEW.wallet, NEW.amount_minor, NEW.currency, NEW.destination_iban,
        NEW.requested_by_issuer, NEW.requested_by_subject, NEW.created_at)
       IS DISTINCT FROM
       (OLD.id, OLD.wallet, OLD.amount_minor, OLD.currency, OLD.destination_iban,
        OLD.requested_by_issuer, OLD.requested_by_subject, OLD.created_at) THEN
        RAISE EXCEPTION 'what a withdrawal asked for never changes (saga %)', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT EXISTS (
        SELECT 1 FROM withdrawal.allowed_transitions
         WHERE from_state = OLD.state AND to_state = NEW.state) THEN
        RAISE EXCEPTION 'a withdrawal saga does not go from % to % (saga %)', OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER sagas_guard BEFORE INSERT OR UPDATE ON withdrawal.sagas
    FOR EACH ROW EXECUTE FUNCTION withdrawal.sagas_guard();

-- SECURITY DEFINER (grants.sql): the application role has no INSERT on transitions, so the
-- history is written here and nowhere else.
CREATE FUNCTION withdrawal.sagas_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO withdrawal.transitions (saga_id, from_state, to_state, actor, at)
        VALUES (NEW.id, NULL, NEW.state, NEW.state_actor, NEW.state_changed_at);
    ELSIF NEW.state IS DISTINCT FROM OLD.state THEN
        INSERT INTO withdrawal.transitions (saga_id, from_state, to_state, actor, at)
        VALUES (NEW.id, OLD.state, NEW.state, NEW.state_actor, NEW.state_changed_at);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER sagas_history AFTER INSERT OR UPDATE ON withdrawal.sagas
    FOR EACH ROW EXECUTE FUNCTION withdrawal.sagas_history();

-- The first answer to POST /v1/withdrawals per (caller, Idempotency-Key), as wallet-api keeps
-- its own: the same request again gets it back, another request with the key 422.
CREATE TABLE withdrawal.idempotency_keys (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    request_hash bytea       NOT NULL,
    status       smallint    NOT NULL,
    body         jsonb       NOT NULL,
    saga_id      text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idempotency_keys_saga_fkey FOREIGN KEY (saga_id) REFERENCES withdrawal.sagas (id)
);
CREATE INDEX idempotency_keys_created ON withdrawal.idempotency_keys (created_at);

-- The transactional outbox (core.outbox.outbox_table_sql("withdrawal.outbox",
-- "withdrawal_outbox", notify_trigger=False)): the service wakes its relay after each commit
-- (core.outbox.RelayHint); the relay's poll is the safety net.
CREATE TABLE withdrawal.outbox (
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
CREATE INDEX outbox_unsent ON withdrawal.outbox (id) WHERE sent_at IS NULL;

-- A command only as the saga's state calls for it (the state it waits in: written after the
-- state changed, in the same transaction), with the saga's own amount, wallet and IBAN, and
-- under the type's own routing key.
CREATE FUNCTION withdrawal.outbox_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s withdrawal.sagas;
    expected text[];
BEGIN
    SELECT * INTO s FROM withdrawal.sagas WHERE id = NEW.body ->> 'saga_id';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'an outbox message names no saga' USING ERRCODE = 'insufficient_privilege';
    END IF;
    expected := CASE NEW.message_type
        WHEN 'DebitForWithdrawal' THEN ARRAY['initiated']
        WHEN 'StartBankTransfer' THEN ARRAY['bank_transfer_pending']
        WHEN 'SettleWithdrawal' THEN ARRAY['settling']
        WHEN 'RefundWithdrawal' THEN ARRAY['compensating', 'cancelling']
        ELSE NULL END;
    IF expected IS NULL OR NOT s.state = ANY (expected) OR NEW.routing_key <> NEW.message_type
       OR (NEW.body -> 'amount_minor' IS NOT NULL AND (NEW.body ->> 'amount_minor')::numeric <> s.amount_minor)
       OR (NEW.body -> 'currency' IS NOT NULL AND NEW.body ->> 'currency' <> s.currency)
       OR (NEW.body -> 'wallet' IS NOT NULL AND NEW.body ->> 'wallet' <> s.wallet)
       OR (NEW.body -> 'destination_iban' IS NOT NULL AND NEW.body ->> 'destination_iban' <> s.destination_iban)
       OR (NEW.body -> 'debit_transaction_id' IS NOT NULL
           AND NEW.body ->> 'debit_transaction_id' IS DISTINCT FROM s.debit_transaction_id) THEN
        RAISE EXCEPTION 'an outbox message the saga does not call for (% in state %)', NEW.message_type, s.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER outbox_guard BEFORE INSERT ON withdrawal.outbox
    FOR EACH ROW EXECUTE FUNCTION withdrawal.outbox_guard();

-- The relay may delete what it sent (core.outbox.purge_sent), never a command still to be sent.
CREATE FUNCTION withdrawal.outbox_keeps_unsent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON withdrawal.outbox
    FOR EACH ROW EXECUTE FUNCTION withdrawal.outbox_keeps_unsent();

-- What the results consumer has processed (core.consumer.processed_events_sql).
CREATE TABLE withdrawal.processed_events (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id)
);

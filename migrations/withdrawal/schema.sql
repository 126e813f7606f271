-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: withdrawal; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA withdrawal;

-- Name: outbox_guard(); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.outbox_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- Name: outbox_keeps_unsent(); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.outbox_keeps_unsent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

-- Name: sagas_guard(); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.sagas_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- Name: sagas_history(); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.sagas_history() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'withdrawal', 'pg_temp'
    AS $$
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

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: allowed_transitions; Type: TABLE; Schema: withdrawal; Owner: -

CREATE TABLE withdrawal.allowed_transitions (
    from_state text NOT NULL,
    to_state text NOT NULL
);

-- Name: idempotency_keys; Type: TABLE; Schema: withdrawal; Owner: -

CREATE TABLE withdrawal.idempotency_keys (
    scope text NOT NULL,
    key text NOT NULL,
    request_hash bytea NOT NULL,
    status smallint NOT NULL,
    body jsonb NOT NULL,
    saga_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: outbox; Type: TABLE; Schema: withdrawal; Owner: -

CREATE TABLE withdrawal.outbox (
    id bigint NOT NULL,
    message_id text NOT NULL,
    exchange text NOT NULL,
    routing_key text NOT NULL,
    message_type text NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone
);

-- Name: outbox_id_seq; Type: SEQUENCE; Schema: withdrawal; Owner: -

ALTER TABLE withdrawal.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME withdrawal.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: processed_events; Type: TABLE; Schema: withdrawal; Owner: -

CREATE TABLE withdrawal.processed_events (
    consumer text NOT NULL,
    message_id text NOT NULL,
    processed_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome jsonb DEFAULT '{}'::jsonb NOT NULL
);

-- Name: sagas; Type: TABLE; Schema: withdrawal; Owner: -

CREATE TABLE withdrawal.sagas (
    id text NOT NULL,
    wallet text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    destination_iban text NOT NULL,
    requested_by_issuer text NOT NULL,
    requested_by_subject text NOT NULL,
    state text DEFAULT 'initiated'::text NOT NULL,
    state_actor text NOT NULL,
    fee_minor bigint,
    debit_transaction_id text,
    bank_reference text,
    reason text,
    reason_detail text,
    reviewed_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    state_changed_at timestamp with time zone DEFAULT now() NOT NULL,
    last_command jsonb,
    last_published_at timestamp with time zone DEFAULT now() NOT NULL,
    republished integer DEFAULT 0 NOT NULL,
    CONSTRAINT sagas_actor_length CHECK (((length(state_actor) >= 1) AND (length(state_actor) <= 200))),
    CONSTRAINT sagas_amount_positive CHECK (((amount_minor > 0) AND (amount_minor <= '1000000000000000'::bigint))),
    CONSTRAINT sagas_command_shape CHECK (((last_command IS NULL) OR ((jsonb_typeof((last_command -> 'type'::text)) = 'string'::text) AND (jsonb_typeof((last_command -> 'body'::text)) = 'object'::text)))),
    CONSTRAINT sagas_currency_code CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT sagas_fee_not_negative CHECK (((fee_minor IS NULL) OR (fee_minor >= 0))),
    CONSTRAINT sagas_iban_shape CHECK ((destination_iban ~ '^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$'::text)),
    CONSTRAINT sagas_reason_length CHECK ((((reason IS NULL) OR (length(reason) <= 500)) AND ((reason_detail IS NULL) OR (length(reason_detail) <= 500)))),
    CONSTRAINT sagas_republished_not_negative CHECK ((republished >= 0)),
    CONSTRAINT sagas_requester_length CHECK ((((length(requested_by_issuer) >= 1) AND (length(requested_by_issuer) <= 500)) AND ((length(requested_by_subject) >= 1) AND (length(requested_by_subject) <= 255)))),
    CONSTRAINT sagas_state_known CHECK ((state = ANY (ARRAY['initiated'::text, 'debited'::text, 'rejected'::text, 'under_review'::text, 'bank_transfer_pending'::text, 'settling'::text, 'completed'::text, 'compensating'::text, 'failed'::text, 'cancelling'::text, 'cancelled'::text]))),
    CONSTRAINT sagas_wallet_length CHECK (((length(wallet) >= 1) AND (length(wallet) <= 200)))
);

-- Name: transitions; Type: TABLE; Schema: withdrawal; Owner: -

CREATE TABLE withdrawal.transitions (
    id bigint NOT NULL,
    saga_id text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    actor text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT transitions_created_initiated CHECK (((from_state IS NOT NULL) OR (to_state = 'initiated'::text)))
);

-- Name: transitions_id_seq; Type: SEQUENCE; Schema: withdrawal; Owner: -

ALTER TABLE withdrawal.transitions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME withdrawal.transitions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: allowed_transitions allowed_transitions_pkey; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.allowed_transitions
    ADD CONSTRAINT allowed_transitions_pkey PRIMARY KEY (from_state, to_state);

-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key);

-- Name: outbox outbox_message_id_unique; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.outbox
    ADD CONSTRAINT outbox_message_id_unique UNIQUE (message_id);

-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);

-- Name: processed_events processed_events_pkey; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.processed_events
    ADD CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id);

-- Name: sagas sagas_pkey; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.sagas
    ADD CONSTRAINT sagas_pkey PRIMARY KEY (id);

-- Name: transitions transitions_pkey; Type: CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.transitions
    ADD CONSTRAINT transitions_pkey PRIMARY KEY (id);

-- Name: idempotency_keys_created; Type: INDEX; Schema: withdrawal; Owner: -

CREATE INDEX idempotency_keys_created ON withdrawal.idempotency_keys USING btree (created_at);

-- Name: outbox_unsent; Type: INDEX; Schema: withdrawal; Owner: -

CREATE INDEX outbox_unsent ON withdrawal.outbox USING btree (id) WHERE (sent_at IS NULL);

-- Name: sagas_under_review; Type: INDEX; Schema: withdrawal; Owner: -

CREATE INDEX sagas_under_review ON withdrawal.sagas USING btree (id) WHERE (state = 'under_review'::text);

-- Name: sagas_waiting; Type: INDEX; Schema: withdrawal; Owner: -

CREATE INDEX sagas_waiting ON withdrawal.sagas USING btree (last_published_at) WHERE (state = ANY (ARRAY['initiated'::text, 'bank_transfer_pending'::text, 'settling'::text, 'compensating'::text, 'cancelling'::text]));

-- Name: sagas_wallet; Type: INDEX; Schema: withdrawal; Owner: -

CREATE INDEX sagas_wallet ON withdrawal.sagas USING btree (wallet, id DESC);

-- Name: transitions_saga; Type: INDEX; Schema: withdrawal; Owner: -

CREATE INDEX transitions_saga ON withdrawal.transitions USING btree (saga_id, id);

-- Name: outbox outbox_guard; Type: TRIGGER; Schema: withdrawal; Owner: -

CREATE TRIGGER outbox_guard BEFORE INSERT ON withdrawal.outbox FOR EACH ROW EXECUTE FUNCTION withdrawal.outbox_guard();

-- Name: outbox outbox_keeps_unsent; Type: TRIGGER; Schema: withdrawal; Owner: -

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON withdrawal.outbox FOR EACH ROW EXECUTE FUNCTION withdrawal.outbox_keeps_unsent();

-- Name: sagas sagas_guard; Type: TRIGGER; Schema: withdrawal; Owner: -

CREATE TRIGGER sagas_guard BEFORE INSERT OR UPDATE ON withdrawal.sagas FOR EACH ROW EXECUTE FUNCTION withdrawal.sagas_guard();

-- Name: sagas sagas_history; Type: TRIGGER; Schema: withdrawal; Owner: -

CREATE TRIGGER sagas_history AFTER INSERT OR UPDATE ON withdrawal.sagas FOR EACH ROW EXECUTE FUNCTION withdrawal.sagas_history();

-- Name: idempotency_keys idempotency_keys_saga_fkey; Type: FK CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.idempotency_keys
    ADD CONSTRAINT idempotency_keys_saga_fkey FOREIGN KEY (saga_id) REFERENCES withdrawal.sagas(id);

-- Name: transitions transitions_allowed_fkey; Type: FK CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.transitions
    ADD CONSTRAINT transitions_allowed_fkey FOREIGN KEY (from_state, to_state) REFERENCES withdrawal.allowed_transitions(from_state, to_state);

-- Name: transitions transitions_saga_fkey; Type: FK CONSTRAINT; Schema: withdrawal; Owner: -

ALTER TABLE ONLY withdrawal.transitions
    ADD CONSTRAINT transitions_saga_fkey FOREIGN KEY (saga_id) REFERENCES withdrawal.sagas(id);

-- Name: SCHEMA withdrawal; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA withdrawal TO hiwallet_withdrawal_app;
GRANT USAGE ON SCHEMA withdrawal TO hiwallet_withdrawal_readonly;

-- Name: FUNCTION outbox_guard(); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.outbox_guard() FROM PUBLIC;

-- Name: FUNCTION outbox_keeps_unsent(); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.outbox_keeps_unsent() FROM PUBLIC;

-- Name: FUNCTION sagas_guard(); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.sagas_guard() FROM PUBLIC;

-- Name: FUNCTION sagas_history(); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.sagas_history() FROM PUBLIC;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_withdrawal_readonly;

-- Name: TABLE allowed_transitions; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT ON TABLE withdrawal.allowed_transitions TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.allowed_transitions TO hiwallet_withdrawal_readonly;

-- Name: TABLE idempotency_keys; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE withdrawal.idempotency_keys TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.idempotency_keys TO hiwallet_withdrawal_readonly;

-- Name: TABLE outbox; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE withdrawal.outbox TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.outbox TO hiwallet_withdrawal_readonly;

-- Name: COLUMN outbox.sent_at; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(sent_at) ON TABLE withdrawal.outbox TO hiwallet_withdrawal_app;

-- Name: TABLE processed_events; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT,INSERT ON TABLE withdrawal.processed_events TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.processed_events TO hiwallet_withdrawal_readonly;

-- Name: COLUMN processed_events.outcome; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(outcome) ON TABLE withdrawal.processed_events TO hiwallet_withdrawal_app;

-- Name: TABLE sagas; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT,INSERT ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.sagas TO hiwallet_withdrawal_readonly;

-- Name: COLUMN sagas.state; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(state) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.state_actor; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(state_actor) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.fee_minor; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(fee_minor) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.debit_transaction_id; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(debit_transaction_id) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.bank_reference; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(bank_reference) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.reason; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(reason) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.reason_detail; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(reason_detail) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.reviewed_by; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(reviewed_by) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.state_changed_at; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(state_changed_at) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.last_command; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(last_command) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.last_published_at; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(last_published_at) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: COLUMN sagas.republished; Type: ACL; Schema: withdrawal; Owner: -

GRANT UPDATE(republished) ON TABLE withdrawal.sagas TO hiwallet_withdrawal_app;

-- Name: TABLE transitions; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT ON TABLE withdrawal.transitions TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.transitions TO hiwallet_withdrawal_readonly;

-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: withdrawal; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA withdrawal;

-- Name: iso_utc(timestamp with time zone); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.iso_utc(p timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'withdrawal', 'pg_temp'
    AS $$
    SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || CASE WHEN date_part('microseconds', p AT TIME ZONE 'UTC')::bigint % 1000000 = 0 THEN ''
                   ELSE to_char(p AT TIME ZONE 'UTC', '.US') END
           || '+00:00'
$$;

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

-- Name: move_sagas(text[], text[], text[], bigint[], text[], text[], text[], text[], text[], text[]); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.move_sagas(p_ids text[], p_states text[], p_actors text[], p_fees bigint[], p_debit_transaction_ids text[], p_bank_references text[], p_reasons text[], p_reason_details text[], p_reviewers text[], p_commands text[]) RETURNS SETOF withdrawal.sagas
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'withdrawal', 'pg_temp'
    AS $$
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

-- Name: request(text, text, bigint, bytea, text, text, bigint, text, text, text, text, text, text, text, text, text, text, text, text, text); Type: FUNCTION; Schema: withdrawal; Owner: -

CREATE FUNCTION withdrawal.request(p_scope text, p_key text, p_lock_key bigint, p_request_hash bytea, p_saga_id text, p_wallet text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_issuer text, p_subject text, p_actor text, p_command text, p_answer text, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers text, p_body text, OUT locked boolean, OUT stored_hash bytea, OUT stored_status smallint, OUT stored_body text, OUT saga withdrawal.sagas) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'withdrawal', 'pg_temp'
    AS $$
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

-- Name: FUNCTION iso_utc(p timestamp with time zone); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.iso_utc(p timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION withdrawal.iso_utc(p timestamp with time zone) TO hiwallet_withdrawal_app;

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

-- Name: FUNCTION move_sagas(p_ids text[], p_states text[], p_actors text[], p_fees bigint[], p_debit_transaction_ids text[], p_bank_references text[], p_reasons text[], p_reason_details text[], p_reviewers text[], p_commands text[]); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.move_sagas(p_ids text[], p_states text[], p_actors text[], p_fees bigint[], p_debit_transaction_ids text[], p_bank_references text[], p_reasons text[], p_reason_details text[], p_reviewers text[], p_commands text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION withdrawal.move_sagas(p_ids text[], p_states text[], p_actors text[], p_fees bigint[], p_debit_transaction_ids text[], p_bank_references text[], p_reasons text[], p_reason_details text[], p_reviewers text[], p_commands text[]) TO hiwallet_withdrawal_app;

-- Name: FUNCTION outbox_guard(); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.outbox_guard() FROM PUBLIC;

-- Name: FUNCTION outbox_keeps_unsent(); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.outbox_keeps_unsent() FROM PUBLIC;

-- Name: FUNCTION request(p_scope text, p_key text, p_lock_key bigint, p_request_hash bytea, p_saga_id text, p_wallet text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_issuer text, p_subject text, p_actor text, p_command text, p_answer text, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers text, p_body text, OUT locked boolean, OUT stored_hash bytea, OUT stored_status smallint, OUT stored_body text, OUT saga withdrawal.sagas); Type: ACL; Schema: withdrawal; Owner: -

REVOKE ALL ON FUNCTION withdrawal.request(p_scope text, p_key text, p_lock_key bigint, p_request_hash bytea, p_saga_id text, p_wallet text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_issuer text, p_subject text, p_actor text, p_command text, p_answer text, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers text, p_body text, OUT locked boolean, OUT stored_hash bytea, OUT stored_status smallint, OUT stored_body text, OUT saga withdrawal.sagas) FROM PUBLIC;
GRANT ALL ON FUNCTION withdrawal.request(p_scope text, p_key text, p_lock_key bigint, p_request_hash bytea, p_saga_id text, p_wallet text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_issuer text, p_subject text, p_actor text, p_command text, p_answer text, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers text, p_body text, OUT locked boolean, OUT stored_hash bytea, OUT stored_status smallint, OUT stored_body text, OUT saga withdrawal.sagas) TO hiwallet_withdrawal_app;

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

-- Name: TABLE transitions; Type: ACL; Schema: withdrawal; Owner: -

GRANT SELECT ON TABLE withdrawal.transitions TO hiwallet_withdrawal_app;
GRANT SELECT ON TABLE withdrawal.transitions TO hiwallet_withdrawal_readonly;

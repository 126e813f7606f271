-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: bank; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA bank;

-- Name: transfers; Type: TABLE; Schema: bank; Owner: -

CREATE TABLE bank.transfers (
    command_id text NOT NULL,
    saga_id text NOT NULL,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    destination_iban text NOT NULL,
    state text NOT NULL,
    bank_reference text,
    reason text,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome_at timestamp with time zone,
    outcome_source text,
    trace_headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT transfers_amount_positive CHECK (((amount_minor > 0) AND (amount_minor <= '1000000000000000'::bigint))),
    CONSTRAINT transfers_currency_code CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT transfers_iban_format CHECK ((destination_iban ~ '^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$'::text)),
    CONSTRAINT transfers_ids_length CHECK ((((length(command_id) >= 1) AND (length(command_id) <= 200)) AND ((length(saga_id) >= 1) AND (length(saga_id) <= 200)) AND ((bank_reference IS NULL) OR ((length(bank_reference) >= 1) AND (length(bank_reference) <= 200))))),
    CONSTRAINT transfers_outcome_whole CHECK ((((state = 'pending'::text) = (outcome_at IS NULL)) AND ((outcome_at IS NULL) = (outcome_source IS NULL)))),
    CONSTRAINT transfers_reason_length CHECK (((reason IS NULL) OR (length(reason) <= 500))),
    CONSTRAINT transfers_reference_known CHECK (((bank_reference IS NOT NULL) OR ((state = 'failed'::text) AND (outcome_source = 'bank'::text)))),
    CONSTRAINT transfers_source_known CHECK (((outcome_source IS NULL) OR (outcome_source = ANY (ARRAY['callback'::text, 'reconciliation'::text, 'bank'::text])))),
    CONSTRAINT transfers_state_known CHECK ((state = ANY (ARRAY['pending'::text, 'succeeded'::text, 'failed'::text]))),
    CONSTRAINT transfers_trace_headers_small CHECK (((jsonb_typeof(trace_headers) = 'object'::text) AND (length((trace_headers)::text) <= 1024)))
);

-- Name: announce(bank.transfers, text, text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.announce(p_transfer bank.transfers, p_message_id text, p_exchange text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: apply_outcome(text, boolean, text, text, text, text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.apply_outcome(p_bank_reference text, p_succeeded boolean, p_reason text, p_source text, p_message_id text, p_exchange text) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: lock_reference(text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.lock_reference(p_bank_reference text) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('bank-transfer:' || p_bank_reference, 0))
$$;

-- Name: lock_references(text[]); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.lock_references(p_bank_references text[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: outbox_keeps_unsent(); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.outbox_keeps_unsent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

-- Name: purge_inbox(interval, integer); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.purge_inbox(p_older_than interval, p_batch integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
    WITH gone AS (
        DELETE FROM bank.inbox
         WHERE id IN (SELECT id FROM bank.inbox
                       WHERE applied_at IS NOT NULL
                         AND received_at < now() - greatest(p_older_than, interval '1 day')
                       ORDER BY id
                       LIMIT least(greatest(p_batch, 0), 10000)
                         FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

-- Name: receive_callback(text, text, text, jsonb, text, text, text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.receive_callback(p_webhook_id text, p_type text, p_bank_reference text, p_body jsonb, p_reason text, p_message_id text, p_exchange text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: receive_callbacks(text[], text[], text[], text[], text[], text[], text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.receive_callbacks(p_webhook_ids text[], p_types text[], p_bank_references text[], p_bodies text[], p_reasons text[], p_message_ids text[], p_exchange text) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: reconcile_transfer(text, boolean, text, text, text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.reconcile_transfer(p_bank_reference text, p_succeeded boolean, p_reason text, p_message_id text, p_exchange text) RETURNS text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
    SELECT bank.apply_outcome(p_bank_reference, p_succeeded, p_reason, 'reconciliation', p_message_id,
                              p_exchange)
$$;

-- Name: record_statement(date, text, bigint, integer, text, text, text, text, jsonb, jsonb); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.record_statement(p_day date, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO bank.statements (day, message_id, currency, amount_minor, lines)
    VALUES (p_day, p_message_id, p_currency, p_amount_minor, p_lines)
    ON CONFLICT ON CONSTRAINT statements_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO bank.outbox (message_id, exchange, routing_key, message_type, headers, body)
    VALUES (p_message_id, p_exchange, p_routing_key, p_message_type, p_headers, p_body);
    RETURN true;
END $$;

-- Name: record_transfer(text, text, bigint, text, text, text, text, text, text, jsonb); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.record_transfer(p_command_id text, p_saga_id text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_bank_reference text, p_refusal text, p_message_id text, p_exchange text, p_trace_headers jsonb DEFAULT '{}'::jsonb) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: record_transfers(text[], text[], bigint[], text[], text[], text[], text[], text[], text, jsonb[]); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.record_transfers(p_command_ids text[], p_saga_ids text[], p_amounts_minor bigint[], p_currencies text[], p_destination_ibans text[], p_bank_references text[], p_refusals text[], p_message_ids text[], p_exchange text, p_trace_headers jsonb[]) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: republish_outcome(text, text, text); Type: FUNCTION; Schema: bank; Owner: -

CREATE FUNCTION bank.republish_outcome(p_command_id text, p_message_id text, p_exchange text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'bank', 'pg_temp'
    AS $$
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

-- Name: inbox; Type: TABLE; Schema: bank; Owner: -

CREATE TABLE bank.inbox (
    id bigint NOT NULL,
    webhook_id text NOT NULL,
    type text NOT NULL,
    bank_reference text,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    body jsonb NOT NULL,
    applied_at timestamp with time zone,
    CONSTRAINT inbox_reference_length CHECK (((bank_reference IS NULL) OR ((length(bank_reference) >= 1) AND (length(bank_reference) <= 200)))),
    CONSTRAINT inbox_type_length CHECK (((length(type) >= 1) AND (length(type) <= 255))),
    CONSTRAINT inbox_webhook_id_length CHECK (((length(webhook_id) >= 1) AND (length(webhook_id) <= 255)))
);

-- Name: inbox_id_seq; Type: SEQUENCE; Schema: bank; Owner: -

ALTER TABLE bank.inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bank.inbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: outbox; Type: TABLE; Schema: bank; Owner: -

CREATE TABLE bank.outbox (
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

-- Name: outbox_id_seq; Type: SEQUENCE; Schema: bank; Owner: -

ALTER TABLE bank.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bank.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: processed_events; Type: TABLE; Schema: bank; Owner: -

CREATE TABLE bank.processed_events (
    consumer text NOT NULL,
    message_id text NOT NULL,
    processed_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome jsonb DEFAULT '{}'::jsonb NOT NULL
);

-- Name: statements; Type: TABLE; Schema: bank; Owner: -

CREATE TABLE bank.statements (
    day date NOT NULL,
    message_id text NOT NULL,
    currency text NOT NULL,
    amount_minor bigint NOT NULL,
    lines integer NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT statements_amount_not_negative CHECK ((amount_minor >= 0)),
    CONSTRAINT statements_lines_not_negative CHECK ((lines >= 0))
);

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: inbox inbox_pkey; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (id);

-- Name: inbox inbox_webhook_seen; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.inbox
    ADD CONSTRAINT inbox_webhook_seen UNIQUE (webhook_id);

-- Name: outbox outbox_message_id_unique; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.outbox
    ADD CONSTRAINT outbox_message_id_unique UNIQUE (message_id);

-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);

-- Name: processed_events processed_events_pkey; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.processed_events
    ADD CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id);

-- Name: statements statements_message_id_unique; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.statements
    ADD CONSTRAINT statements_message_id_unique UNIQUE (message_id);

-- Name: statements statements_pkey; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.statements
    ADD CONSTRAINT statements_pkey PRIMARY KEY (day);

-- Name: transfers transfers_bank_reference_unique; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.transfers
    ADD CONSTRAINT transfers_bank_reference_unique UNIQUE (bank_reference);

-- Name: transfers transfers_pkey; Type: CONSTRAINT; Schema: bank; Owner: -

ALTER TABLE ONLY bank.transfers
    ADD CONSTRAINT transfers_pkey PRIMARY KEY (command_id);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: inbox_unapplied; Type: INDEX; Schema: bank; Owner: -

CREATE INDEX inbox_unapplied ON bank.inbox USING btree (bank_reference) WHERE (applied_at IS NULL);

-- Name: outbox_unsent; Type: INDEX; Schema: bank; Owner: -

CREATE INDEX outbox_unsent ON bank.outbox USING btree (id) WHERE (sent_at IS NULL);

-- Name: transfers_pending; Type: INDEX; Schema: bank; Owner: -

CREATE INDEX transfers_pending ON bank.transfers USING btree (requested_at) WHERE (state = 'pending'::text);

-- Name: outbox outbox_keeps_unsent; Type: TRIGGER; Schema: bank; Owner: -

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON bank.outbox FOR EACH ROW EXECUTE FUNCTION bank.outbox_keeps_unsent();

-- Name: SCHEMA bank; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA bank TO hiwallet_bank_app;
GRANT USAGE ON SCHEMA bank TO hiwallet_bank_readonly;

-- Name: TABLE transfers; Type: ACL; Schema: bank; Owner: -

GRANT SELECT ON TABLE bank.transfers TO hiwallet_bank_app;
GRANT SELECT ON TABLE bank.transfers TO hiwallet_bank_readonly;

-- Name: FUNCTION announce(p_transfer bank.transfers, p_message_id text, p_exchange text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.announce(p_transfer bank.transfers, p_message_id text, p_exchange text) FROM PUBLIC;

-- Name: FUNCTION apply_outcome(p_bank_reference text, p_succeeded boolean, p_reason text, p_source text, p_message_id text, p_exchange text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.apply_outcome(p_bank_reference text, p_succeeded boolean, p_reason text, p_source text, p_message_id text, p_exchange text) FROM PUBLIC;

-- Name: FUNCTION lock_reference(p_bank_reference text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.lock_reference(p_bank_reference text) FROM PUBLIC;

-- Name: FUNCTION lock_references(p_bank_references text[]); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.lock_references(p_bank_references text[]) FROM PUBLIC;

-- Name: FUNCTION outbox_keeps_unsent(); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.outbox_keeps_unsent() FROM PUBLIC;

-- Name: FUNCTION purge_inbox(p_older_than interval, p_batch integer); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.purge_inbox(p_older_than interval, p_batch integer) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.purge_inbox(p_older_than interval, p_batch integer) TO hiwallet_bank_app;

-- Name: FUNCTION receive_callback(p_webhook_id text, p_type text, p_bank_reference text, p_body jsonb, p_reason text, p_message_id text, p_exchange text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.receive_callback(p_webhook_id text, p_type text, p_bank_reference text, p_body jsonb, p_reason text, p_message_id text, p_exchange text) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.receive_callback(p_webhook_id text, p_type text, p_bank_reference text, p_body jsonb, p_reason text, p_message_id text, p_exchange text) TO hiwallet_bank_app;

-- Name: FUNCTION receive_callbacks(p_webhook_ids text[], p_types text[], p_bank_references text[], p_bodies text[], p_reasons text[], p_message_ids text[], p_exchange text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.receive_callbacks(p_webhook_ids text[], p_types text[], p_bank_references text[], p_bodies text[], p_reasons text[], p_message_ids text[], p_exchange text) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.receive_callbacks(p_webhook_ids text[], p_types text[], p_bank_references text[], p_bodies text[], p_reasons text[], p_message_ids text[], p_exchange text) TO hiwallet_bank_app;

-- Name: FUNCTION reconcile_transfer(p_bank_reference text, p_succeeded boolean, p_reason text, p_message_id text, p_exchange text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.reconcile_transfer(p_bank_reference text, p_succeeded boolean, p_reason text, p_message_id text, p_exchange text) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.reconcile_transfer(p_bank_reference text, p_succeeded boolean, p_reason text, p_message_id text, p_exchange text) TO hiwallet_bank_app;

-- Name: FUNCTION record_statement(p_day date, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.record_statement(p_day date, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.record_statement(p_day date, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb) TO hiwallet_bank_app;

-- Name: FUNCTION record_transfer(p_command_id text, p_saga_id text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_bank_reference text, p_refusal text, p_message_id text, p_exchange text, p_trace_headers jsonb); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.record_transfer(p_command_id text, p_saga_id text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_bank_reference text, p_refusal text, p_message_id text, p_exchange text, p_trace_headers jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.record_transfer(p_command_id text, p_saga_id text, p_amount_minor bigint, p_currency text, p_destination_iban text, p_bank_reference text, p_refusal text, p_message_id text, p_exchange text, p_trace_headers jsonb) TO hiwallet_bank_app;

-- Name: FUNCTION record_transfers(p_command_ids text[], p_saga_ids text[], p_amounts_minor bigint[], p_currencies text[], p_destination_ibans text[], p_bank_references text[], p_refusals text[], p_message_ids text[], p_exchange text, p_trace_headers jsonb[]); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.record_transfers(p_command_ids text[], p_saga_ids text[], p_amounts_minor bigint[], p_currencies text[], p_destination_ibans text[], p_bank_references text[], p_refusals text[], p_message_ids text[], p_exchange text, p_trace_headers jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.record_transfers(p_command_ids text[], p_saga_ids text[], p_amounts_minor bigint[], p_currencies text[], p_destination_ibans text[], p_bank_references text[], p_refusals text[], p_message_ids text[], p_exchange text, p_trace_headers jsonb[]) TO hiwallet_bank_app;

-- Name: FUNCTION republish_outcome(p_command_id text, p_message_id text, p_exchange text); Type: ACL; Schema: bank; Owner: -

REVOKE ALL ON FUNCTION bank.republish_outcome(p_command_id text, p_message_id text, p_exchange text) FROM PUBLIC;
GRANT ALL ON FUNCTION bank.republish_outcome(p_command_id text, p_message_id text, p_exchange text) TO hiwallet_bank_app;

-- Name: TABLE inbox; Type: ACL; Schema: bank; Owner: -

GRANT SELECT ON TABLE bank.inbox TO hiwallet_bank_app;
GRANT SELECT ON TABLE bank.inbox TO hiwallet_bank_readonly;

-- Name: TABLE outbox; Type: ACL; Schema: bank; Owner: -

GRANT SELECT,DELETE ON TABLE bank.outbox TO hiwallet_bank_app;
GRANT SELECT ON TABLE bank.outbox TO hiwallet_bank_readonly;

-- Name: COLUMN outbox.sent_at; Type: ACL; Schema: bank; Owner: -

GRANT UPDATE(sent_at) ON TABLE bank.outbox TO hiwallet_bank_app;

-- Name: TABLE processed_events; Type: ACL; Schema: bank; Owner: -

GRANT SELECT,INSERT ON TABLE bank.processed_events TO hiwallet_bank_app;
GRANT SELECT ON TABLE bank.processed_events TO hiwallet_bank_readonly;

-- Name: COLUMN processed_events.outcome; Type: ACL; Schema: bank; Owner: -

GRANT UPDATE(outcome) ON TABLE bank.processed_events TO hiwallet_bank_app;

-- Name: TABLE statements; Type: ACL; Schema: bank; Owner: -

GRANT SELECT ON TABLE bank.statements TO hiwallet_bank_app;
GRANT SELECT ON TABLE bank.statements TO hiwallet_bank_readonly;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_bank_readonly;

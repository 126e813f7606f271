-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: topup; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA topup;

-- Name: ingest(text, text, text, text, jsonb, text, text, text, text, bigint, text, text, text, text); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.ingest(p_provider text, p_event_id text, p_event_type text, p_route text, p_payload jsonb, p_payment_id text, p_provider_payment_id text, p_wallet text, p_reference text, p_amount_minor bigint, p_currency text, p_message_id text, p_exchange text, p_request_id text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'topup', 'pg_temp'
    AS $$
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

-- Name: ingest_batch(text[], text[], text[], text[], text[], text[], text[], text[], text[], bigint[], text[], text[], text, text[]); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.ingest_batch(p_providers text[], p_event_ids text[], p_event_types text[], p_routes text[], p_payloads text[], p_payment_ids text[], p_provider_payment_ids text[], p_wallets text[], p_references text[], p_amounts_minor bigint[], p_currencies text[], p_message_ids text[], p_exchange text, p_request_ids text[]) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'topup', 'pg_temp'
    AS $$
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

-- Name: outbox_keeps_unsent(); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.outbox_keeps_unsent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

-- Name: purge_inbox(interval, integer); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.purge_inbox(p_older_than interval, p_batch integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'topup', 'pg_temp'
    AS $$
    WITH gone AS (
        DELETE FROM topup.inbox
         WHERE id IN (SELECT id FROM topup.inbox
                       WHERE processed_at IS NOT NULL
                         AND received_at < now() - greatest(p_older_than, interval '1 day')
                       ORDER BY id
                       LIMIT least(greatest(p_batch, 0), 10000)
                         FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

-- Name: record_settlement(text, text, text, bigint, integer, text, text, text, text, jsonb, jsonb); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.record_settlement(p_provider text, p_payout_id text, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'topup', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO topup.settlements (provider, payout_id, message_id, currency, amount_minor, lines)
    VALUES (p_provider, p_payout_id, p_message_id, p_currency, p_amount_minor, p_lines)
    ON CONFLICT ON CONSTRAINT settlements_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO topup.outbox (message_id, exchange, routing_key, message_type, headers, body)
    VALUES (p_message_id, p_exchange, p_routing_key, p_message_type, p_headers, p_body);
    RETURN true;
END $$;

-- Name: payments; Type: TABLE; Schema: topup; Owner: -

CREATE TABLE topup.payments (
    id text NOT NULL,
    provider text NOT NULL,
    provider_payment_id text NOT NULL,
    wallet text,
    reference text,
    amount_minor bigint NOT NULL,
    currency text NOT NULL,
    reported_by text[] NOT NULL,
    routes text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT payments_amount_bounded CHECK ((amount_minor <= '1000000000000000'::bigint)),
    CONSTRAINT payments_amount_positive CHECK ((amount_minor > 0)),
    CONSTRAINT payments_currency_code CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT payments_provider_known CHECK ((provider = ANY (ARRAY['stripe'::text, 'bank'::text]))),
    CONSTRAINT payments_provider_payment_id_length CHECK (((length(provider_payment_id) >= 1) AND (length(provider_payment_id) <= 200))),
    CONSTRAINT payments_reference_length CHECK (((reference IS NULL) OR (length(reference) <= 500))),
    CONSTRAINT payments_reported CHECK ((cardinality(reported_by) >= 1)),
    CONSTRAINT payments_routes_known CHECK (((cardinality(routes) >= 1) AND (routes <@ ARRAY['webhook'::text, 'reconciliation'::text, 'operator'::text]))),
    CONSTRAINT payments_wallet_length CHECK (((wallet IS NULL) OR ((length(wallet) >= 1) AND (length(wallet) <= 128))))
);

-- Name: recorded_body(topup.payments, text); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.recorded_body(p topup.payments, p_route text) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object(
        'payment_id', p.id,
        'provider', p.provider,
        'provider_payment_id', p.provider_payment_id,
        'wallet', p.wallet,
        'reference', p.reference,
        'amount_minor', p.amount_minor,
        'currency', p.currency,
        'recorded_at', to_char(p.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'route', p_route)
$$;

-- Name: recorded_headers(topup.payments, text); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.recorded_headers(p topup.payments, p_request_id text) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object('x-hiwallet-correlation-id', p.id, 'x-request-id', p_request_id))
$$;

-- Name: report_payment(text, text, text, text, text, bigint, text); Type: FUNCTION; Schema: topup; Owner: -

CREATE FUNCTION topup.report_payment(p_payment_id text, p_provider text, p_provider_payment_id text, p_event_id text, p_route text, p_amount_minor bigint, p_currency text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_payment topup.payments;
BEGIN
    UPDATE topup.payments
       SET reported_by = CASE WHEN p_event_id = ANY (reported_by) THEN reported_by
                              ELSE reported_by || p_event_id END,
           routes = CASE WHEN p_route = ANY (routes) THEN routes ELSE routes || p_route END
     WHERE id = p_payment_id
    RETURNING * INTO v_payment;
    IF v_payment.provider IS DISTINCT FROM p_provider
       OR v_payment.provider_payment_id IS DISTINCT FROM p_provider_payment_id THEN
        -- a derived id names one (provider, payment) only; anything else is a defect
        RAISE EXCEPTION 'payment % is recorded for another provider payment', p_payment_id;
    END IF;
    IF v_payment.amount_minor <> p_amount_minor OR v_payment.currency <> p_currency THEN
        RETURN 'mismatch';
    END IF;
    RETURN 'reported';
END $$;

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: inbox; Type: TABLE; Schema: topup; Owner: -

CREATE TABLE topup.inbox (
    id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    route text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    payload jsonb NOT NULL,
    payment_id text,
    processed_at timestamp with time zone,
    CONSTRAINT inbox_event_id_length CHECK (((length(event_id) >= 1) AND (length(event_id) <= 255))),
    CONSTRAINT inbox_event_type_length CHECK (((length(event_type) >= 1) AND (length(event_type) <= 255))),
    CONSTRAINT inbox_provider_known CHECK ((provider = ANY (ARRAY['stripe'::text, 'bank'::text]))),
    CONSTRAINT inbox_route_known CHECK ((route = ANY (ARRAY['webhook'::text, 'reconciliation'::text])))
);

-- Name: inbox_id_seq; Type: SEQUENCE; Schema: topup; Owner: -

ALTER TABLE topup.inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME topup.inbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: outbox; Type: TABLE; Schema: topup; Owner: -

CREATE TABLE topup.outbox (
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

-- Name: outbox_id_seq; Type: SEQUENCE; Schema: topup; Owner: -

ALTER TABLE topup.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME topup.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: settlements; Type: TABLE; Schema: topup; Owner: -

CREATE TABLE topup.settlements (
    provider text NOT NULL,
    payout_id text NOT NULL,
    message_id text NOT NULL,
    currency text NOT NULL,
    amount_minor bigint NOT NULL,
    lines integer NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT settlements_amount_not_negative CHECK ((amount_minor >= 0)),
    CONSTRAINT settlements_lines_not_negative CHECK ((lines >= 0))
);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: inbox inbox_event_seen; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.inbox
    ADD CONSTRAINT inbox_event_seen UNIQUE (provider, event_id);

-- Name: inbox inbox_pkey; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (id);

-- Name: outbox outbox_message_id_unique; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.outbox
    ADD CONSTRAINT outbox_message_id_unique UNIQUE (message_id);

-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);

-- Name: payments payments_one_per_provider_payment; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.payments
    ADD CONSTRAINT payments_one_per_provider_payment UNIQUE (provider, provider_payment_id);

-- Name: payments payments_pkey; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.payments
    ADD CONSTRAINT payments_pkey PRIMARY KEY (id);

-- Name: settlements settlements_message_id_unique; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.settlements
    ADD CONSTRAINT settlements_message_id_unique UNIQUE (message_id);

-- Name: settlements settlements_pkey; Type: CONSTRAINT; Schema: topup; Owner: -

ALTER TABLE ONLY topup.settlements
    ADD CONSTRAINT settlements_pkey PRIMARY KEY (provider, payout_id);

-- Name: outbox_unsent; Type: INDEX; Schema: topup; Owner: -

CREATE INDEX outbox_unsent ON topup.outbox USING btree (id) WHERE (sent_at IS NULL);

-- Name: outbox outbox_keeps_unsent; Type: TRIGGER; Schema: topup; Owner: -

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON topup.outbox FOR EACH ROW EXECUTE FUNCTION topup.outbox_keeps_unsent();

-- Name: SCHEMA topup; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA topup TO hiwallet_topup_app;
GRANT USAGE ON SCHEMA topup TO hiwallet_topup_readonly;

-- Name: FUNCTION ingest(p_provider text, p_event_id text, p_event_type text, p_route text, p_payload jsonb, p_payment_id text, p_provider_payment_id text, p_wallet text, p_reference text, p_amount_minor bigint, p_currency text, p_message_id text, p_exchange text, p_request_id text); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.ingest(p_provider text, p_event_id text, p_event_type text, p_route text, p_payload jsonb, p_payment_id text, p_provider_payment_id text, p_wallet text, p_reference text, p_amount_minor bigint, p_currency text, p_message_id text, p_exchange text, p_request_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION topup.ingest(p_provider text, p_event_id text, p_event_type text, p_route text, p_payload jsonb, p_payment_id text, p_provider_payment_id text, p_wallet text, p_reference text, p_amount_minor bigint, p_currency text, p_message_id text, p_exchange text, p_request_id text) TO hiwallet_topup_app;

-- Name: FUNCTION ingest_batch(p_providers text[], p_event_ids text[], p_event_types text[], p_routes text[], p_payloads text[], p_payment_ids text[], p_provider_payment_ids text[], p_wallets text[], p_references text[], p_amounts_minor bigint[], p_currencies text[], p_message_ids text[], p_exchange text, p_request_ids text[]); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.ingest_batch(p_providers text[], p_event_ids text[], p_event_types text[], p_routes text[], p_payloads text[], p_payment_ids text[], p_provider_payment_ids text[], p_wallets text[], p_references text[], p_amounts_minor bigint[], p_currencies text[], p_message_ids text[], p_exchange text, p_request_ids text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION topup.ingest_batch(p_providers text[], p_event_ids text[], p_event_types text[], p_routes text[], p_payloads text[], p_payment_ids text[], p_provider_payment_ids text[], p_wallets text[], p_references text[], p_amounts_minor bigint[], p_currencies text[], p_message_ids text[], p_exchange text, p_request_ids text[]) TO hiwallet_topup_app;

-- Name: FUNCTION outbox_keeps_unsent(); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.outbox_keeps_unsent() FROM PUBLIC;

-- Name: FUNCTION purge_inbox(p_older_than interval, p_batch integer); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.purge_inbox(p_older_than interval, p_batch integer) FROM PUBLIC;
GRANT ALL ON FUNCTION topup.purge_inbox(p_older_than interval, p_batch integer) TO hiwallet_topup_app;

-- Name: FUNCTION record_settlement(p_provider text, p_payout_id text, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.record_settlement(p_provider text, p_payout_id text, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION topup.record_settlement(p_provider text, p_payout_id text, p_currency text, p_amount_minor bigint, p_lines integer, p_message_id text, p_exchange text, p_routing_key text, p_message_type text, p_headers jsonb, p_body jsonb) TO hiwallet_topup_app;

-- Name: TABLE payments; Type: ACL; Schema: topup; Owner: -

GRANT SELECT ON TABLE topup.payments TO hiwallet_topup_app;
GRANT SELECT ON TABLE topup.payments TO hiwallet_topup_readonly;

-- Name: FUNCTION recorded_body(p topup.payments, p_route text); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.recorded_body(p topup.payments, p_route text) FROM PUBLIC;

-- Name: FUNCTION recorded_headers(p topup.payments, p_request_id text); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.recorded_headers(p topup.payments, p_request_id text) FROM PUBLIC;

-- Name: FUNCTION report_payment(p_payment_id text, p_provider text, p_provider_payment_id text, p_event_id text, p_route text, p_amount_minor bigint, p_currency text); Type: ACL; Schema: topup; Owner: -

REVOKE ALL ON FUNCTION topup.report_payment(p_payment_id text, p_provider text, p_provider_payment_id text, p_event_id text, p_route text, p_amount_minor bigint, p_currency text) FROM PUBLIC;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_topup_readonly;

-- Name: TABLE inbox; Type: ACL; Schema: topup; Owner: -

GRANT SELECT ON TABLE topup.inbox TO hiwallet_topup_app;
GRANT SELECT ON TABLE topup.inbox TO hiwallet_topup_readonly;

-- Name: TABLE outbox; Type: ACL; Schema: topup; Owner: -

GRANT SELECT,DELETE ON TABLE topup.outbox TO hiwallet_topup_app;
GRANT SELECT ON TABLE topup.outbox TO hiwallet_topup_readonly;

-- Name: COLUMN outbox.sent_at; Type: ACL; Schema: topup; Owner: -

GRANT UPDATE(sent_at) ON TABLE topup.outbox TO hiwallet_topup_app;

-- Name: TABLE settlements; Type: ACL; Schema: topup; Owner: -

GRANT SELECT ON TABLE topup.settlements TO hiwallet_topup_app;
GRANT SELECT ON TABLE topup.settlements TO hiwallet_topup_readonly;

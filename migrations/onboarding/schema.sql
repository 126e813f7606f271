-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: onboarding; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA onboarding;

-- Name: customers_keep_users(); Type: FUNCTION; Schema: onboarding; Owner: -

CREATE FUNCTION onboarding.customers_keep_users() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.sub IS NOT NULL THEN
        RAISE EXCEPTION 'customer % has a user: never deleted', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END;
$$;

-- Name: consents; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.consents (
    customer_id text NOT NULL,
    document text NOT NULL,
    version text NOT NULL,
    accepted_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT consents_document_check CHECK ((document = ANY (ARRAY['user_agreement'::text, 'privacy_notice'::text])))
);

-- Name: customers; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.customers (
    id text NOT NULL,
    email_hash bytea NOT NULL,
    sub text,
    account_id text,
    wallet_id text,
    tier text DEFAULT 'unknown'::text NOT NULL,
    tier_wanted text DEFAULT 'unknown'::text NOT NULL,
    tier_changed_at timestamp with time zone,
    phone_hash bytea,
    phone_enc bytea,
    phone_verified_at timestamp with time zone,
    tckn_hash bytea,
    tckn_enc bytea,
    given_name_enc bytea,
    family_name_enc bytea,
    birth_date_enc bytea,
    identity_verified_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT customers_identity_check CHECK (((tckn_hash IS NULL) = (identity_verified_at IS NULL))),
    CONSTRAINT customers_phone_check CHECK (((phone_hash IS NULL) = (phone_verified_at IS NULL))),
    CONSTRAINT customers_tier_check CHECK (((tier = ANY (ARRAY['unknown'::text, 'unverified'::text, 'verified'::text, 'contracted'::text])) AND (tier_wanted = ANY (ARRAY['unknown'::text, 'unverified'::text, 'verified'::text, 'contracted'::text]))))
);

-- Name: phone_codes; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.phone_codes (
    customer_id text NOT NULL,
    phone_hash bytea NOT NULL,
    phone_enc bytea NOT NULL,
    code_hash bytea NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    attempts_left integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT phone_codes_attempts_check CHECK ((attempts_left >= 0))
);

-- Name: processed_events; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.processed_events (
    consumer text NOT NULL,
    message_id text NOT NULL,
    processed_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome jsonb DEFAULT '{}'::jsonb NOT NULL
);

-- Name: rate_hits; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.rate_hits (
    scope text NOT NULL,
    key_hash bytea NOT NULL,
    window_start timestamp with time zone NOT NULL,
    hits integer NOT NULL
);

-- Name: registrations; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.registrations (
    id text NOT NULL,
    email_hash bytea NOT NULL,
    email_enc bytea NOT NULL,
    known boolean DEFAULT false NOT NULL,
    status text DEFAULT 'code_sent'::text NOT NULL,
    code_hash bytea,
    code_expires_at timestamp with time zone,
    attempts_left integer DEFAULT 0 NOT NULL,
    customer_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT registrations_attempts_check CHECK ((attempts_left >= 0)),
    CONSTRAINT registrations_status_check CHECK ((status = ANY (ARRAY['code_sent'::text, 'email_verified'::text, 'user_created'::text, 'completed'::text])))
);

-- Name: wire_checks; Type: TABLE; Schema: onboarding; Owner: -

CREATE TABLE onboarding.wire_checks (
    payment_id text NOT NULL,
    customer_id text NOT NULL,
    wire_id text NOT NULL,
    result text NOT NULL,
    checked_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT wire_checks_result_check CHECK ((result = ANY (ARRAY['verified'::text, 'other-sender'::text, 'no-tckn'::text, 'wire-unknown'::text])))
);

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: consents consents_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.consents
    ADD CONSTRAINT consents_pkey PRIMARY KEY (customer_id, document, version);

-- Name: customers customers_account_key; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.customers
    ADD CONSTRAINT customers_account_key UNIQUE (account_id);

-- Name: customers customers_email_taken; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.customers
    ADD CONSTRAINT customers_email_taken UNIQUE (email_hash);

-- Name: customers customers_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.customers
    ADD CONSTRAINT customers_pkey PRIMARY KEY (id);

-- Name: customers customers_sub_key; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.customers
    ADD CONSTRAINT customers_sub_key UNIQUE (sub);

-- Name: customers customers_tckn_taken; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.customers
    ADD CONSTRAINT customers_tckn_taken UNIQUE (tckn_hash);

-- Name: customers customers_wallet_key; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.customers
    ADD CONSTRAINT customers_wallet_key UNIQUE (wallet_id);

-- Name: phone_codes phone_codes_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.phone_codes
    ADD CONSTRAINT phone_codes_pkey PRIMARY KEY (customer_id);

-- Name: processed_events processed_events_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.processed_events
    ADD CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id);

-- Name: rate_hits rate_hits_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.rate_hits
    ADD CONSTRAINT rate_hits_pkey PRIMARY KEY (scope, key_hash, window_start);

-- Name: registrations registrations_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.registrations
    ADD CONSTRAINT registrations_pkey PRIMARY KEY (id);

-- Name: wire_checks wire_checks_pkey; Type: CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.wire_checks
    ADD CONSTRAINT wire_checks_pkey PRIMARY KEY (payment_id);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: customers_tier_pending_idx; Type: INDEX; Schema: onboarding; Owner: -

CREATE INDEX customers_tier_pending_idx ON onboarding.customers USING btree (id) WHERE (tier_wanted <> tier);

-- Name: registrations_expires_idx; Type: INDEX; Schema: onboarding; Owner: -

CREATE INDEX registrations_expires_idx ON onboarding.registrations USING btree (expires_at);

-- Name: wire_checks_verified_once; Type: INDEX; Schema: onboarding; Owner: -

CREATE UNIQUE INDEX wire_checks_verified_once ON onboarding.wire_checks USING btree (customer_id) WHERE (result = 'verified'::text);

-- Name: customers customers_keep_users; Type: TRIGGER; Schema: onboarding; Owner: -

CREATE TRIGGER customers_keep_users BEFORE DELETE ON onboarding.customers FOR EACH ROW EXECUTE FUNCTION onboarding.customers_keep_users();

-- Name: consents consents_customer_fkey; Type: FK CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.consents
    ADD CONSTRAINT consents_customer_fkey FOREIGN KEY (customer_id) REFERENCES onboarding.customers(id);

-- Name: phone_codes phone_codes_customer_fkey; Type: FK CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.phone_codes
    ADD CONSTRAINT phone_codes_customer_fkey FOREIGN KEY (customer_id) REFERENCES onboarding.customers(id);

-- Name: wire_checks wire_checks_customer_fkey; Type: FK CONSTRAINT; Schema: onboarding; Owner: -

ALTER TABLE ONLY onboarding.wire_checks
    ADD CONSTRAINT wire_checks_customer_fkey FOREIGN KEY (customer_id) REFERENCES onboarding.customers(id);

-- Name: SCHEMA onboarding; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA onboarding TO hiwallet_onboarding_app;
GRANT USAGE ON SCHEMA onboarding TO hiwallet_onboarding_readonly;

-- Name: FUNCTION customers_keep_users(); Type: ACL; Schema: onboarding; Owner: -

REVOKE ALL ON FUNCTION onboarding.customers_keep_users() FROM PUBLIC;

-- Name: TABLE consents; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT ON TABLE onboarding.consents TO hiwallet_onboarding_app;
GRANT SELECT ON TABLE onboarding.consents TO hiwallet_onboarding_readonly;

-- Name: TABLE customers; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.id; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(id) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;

-- Name: COLUMN customers.sub; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(sub) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(sub) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.account_id; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(account_id) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(account_id) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.wallet_id; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(wallet_id) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(wallet_id) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.tier; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(tier) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(tier) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.tier_wanted; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(tier_wanted) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(tier_wanted) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.tier_changed_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(tier_changed_at) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(tier_changed_at) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.phone_hash; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(phone_hash) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.phone_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(phone_enc) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.phone_verified_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(phone_verified_at) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(phone_verified_at) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.tckn_hash; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(tckn_hash) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.tckn_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(tckn_enc) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.given_name_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(given_name_enc) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.family_name_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(family_name_enc) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.birth_date_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(birth_date_enc) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.identity_verified_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(identity_verified_at) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(identity_verified_at) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: COLUMN customers.created_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(created_at) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;

-- Name: COLUMN customers.updated_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(updated_at) ON TABLE onboarding.customers TO hiwallet_onboarding_readonly;
GRANT UPDATE(updated_at) ON TABLE onboarding.customers TO hiwallet_onboarding_app;

-- Name: TABLE phone_codes; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: COLUMN phone_codes.phone_hash; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(phone_hash) ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: COLUMN phone_codes.phone_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(phone_enc) ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: COLUMN phone_codes.code_hash; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(code_hash) ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: COLUMN phone_codes.expires_at; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(expires_at) ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: COLUMN phone_codes.attempts_left; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(attempts_left) ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: COLUMN phone_codes.created_at; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(created_at) ON TABLE onboarding.phone_codes TO hiwallet_onboarding_app;

-- Name: TABLE processed_events; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT ON TABLE onboarding.processed_events TO hiwallet_onboarding_app;

-- Name: COLUMN processed_events.outcome; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(outcome) ON TABLE onboarding.processed_events TO hiwallet_onboarding_app;

-- Name: TABLE rate_hits; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE onboarding.rate_hits TO hiwallet_onboarding_app;

-- Name: COLUMN rate_hits.hits; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(hits) ON TABLE onboarding.rate_hits TO hiwallet_onboarding_app;

-- Name: TABLE registrations; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.id; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(id) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;

-- Name: COLUMN registrations.email_enc; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(email_enc) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.known; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(known) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;
GRANT UPDATE(known) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.status; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(status) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;
GRANT UPDATE(status) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.code_hash; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(code_hash) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.code_expires_at; Type: ACL; Schema: onboarding; Owner: -

GRANT UPDATE(code_expires_at) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.attempts_left; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(attempts_left) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;
GRANT UPDATE(attempts_left) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.customer_id; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(customer_id) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;
GRANT UPDATE(customer_id) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.created_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(created_at) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;

-- Name: COLUMN registrations.updated_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(updated_at) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;
GRANT UPDATE(updated_at) ON TABLE onboarding.registrations TO hiwallet_onboarding_app;

-- Name: COLUMN registrations.expires_at; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT(expires_at) ON TABLE onboarding.registrations TO hiwallet_onboarding_readonly;

-- Name: TABLE wire_checks; Type: ACL; Schema: onboarding; Owner: -

GRANT SELECT,INSERT ON TABLE onboarding.wire_checks TO hiwallet_onboarding_app;
GRANT SELECT ON TABLE onboarding.wire_checks TO hiwallet_onboarding_readonly;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_onboarding_readonly;

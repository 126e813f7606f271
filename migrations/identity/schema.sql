-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: action_tokens; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.action_tokens (
    token_hash text NOT NULL,
    user_id text NOT NULL,
    actions text[] NOT NULL,
    client_id text,
    redirect_uri text,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone
);

-- Name: authorization_codes; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.authorization_codes (
    code_hash text NOT NULL,
    client_id text NOT NULL,
    user_id text NOT NULL,
    session_id text NOT NULL,
    redirect_uri text NOT NULL,
    scope text NOT NULL,
    nonce text,
    code_challenge text,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone
);

-- Name: login_flows; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.login_flows (
    id text NOT NULL,
    client_id text NOT NULL,
    redirect_uri text NOT NULL,
    scope text NOT NULL,
    state text,
    nonce text,
    code_challenge text,
    user_id text,
    stage text DEFAULT 'credentials'::text NOT NULL,
    pending_totp text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT login_flows_stage_check CHECK ((stage = ANY (ARRAY['credentials'::text, 'update_password'::text, 'otp_setup'::text, 'otp'::text])))
);

-- Name: outgoing_mail; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.outgoing_mail (
    id text NOT NULL,
    recipient text NOT NULL,
    subject text NOT NULL,
    body text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone
);

-- Name: refresh_tokens; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.refresh_tokens (
    token_hash text NOT NULL,
    family_id text NOT NULL,
    session_id text NOT NULL,
    client_id text NOT NULL,
    user_id text NOT NULL,
    scope text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    revoked_at timestamp with time zone
);

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: sessions; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.sessions (
    id text NOT NULL,
    user_id text NOT NULL,
    client_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    ended_at timestamp with time zone
);

-- Name: signing_keys; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.signing_keys (
    kid text NOT NULL,
    private_pem text NOT NULL,
    public_jwk jsonb NOT NULL,
    status text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    activated_at timestamp with time zone,
    retired_at timestamp with time zone,
    publish_until timestamp with time zone,
    CONSTRAINT signing_keys_retired_check CHECK (((status <> 'retired'::text) OR (publish_until IS NOT NULL))),
    CONSTRAINT signing_keys_status_check CHECK ((status = ANY (ARRAY['next'::text, 'active'::text, 'retired'::text])))
);

-- Name: users; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.users (
    id text NOT NULL,
    username text NOT NULL,
    email text,
    first_name text,
    last_name text,
    enabled boolean DEFAULT true NOT NULL,
    email_verified boolean DEFAULT false NOT NULL,
    password_hash text,
    required_actions text[] DEFAULT '{}'::text[] NOT NULL,
    totp_secret text,
    totp_last_step bigint,
    failed_logins integer DEFAULT 0 NOT NULL,
    last_failure_at timestamp with time zone,
    locked_until timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT users_email_lower_check CHECK ((email = lower(email))),
    CONSTRAINT users_failed_logins_check CHECK ((failed_logins >= 0)),
    CONSTRAINT users_username_length_check CHECK (((length(username) >= 1) AND (length(username) <= 255))),
    CONSTRAINT users_username_lower_check CHECK ((username = lower(username)))
);

-- Name: action_tokens action_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.action_tokens
    ADD CONSTRAINT action_tokens_pkey PRIMARY KEY (token_hash);

-- Name: authorization_codes authorization_codes_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.authorization_codes
    ADD CONSTRAINT authorization_codes_pkey PRIMARY KEY (code_hash);

-- Name: login_flows login_flows_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.login_flows
    ADD CONSTRAINT login_flows_pkey PRIMARY KEY (id);

-- Name: outgoing_mail outgoing_mail_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.outgoing_mail
    ADD CONSTRAINT outgoing_mail_pkey PRIMARY KEY (id);

-- Name: refresh_tokens refresh_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.refresh_tokens
    ADD CONSTRAINT refresh_tokens_pkey PRIMARY KEY (token_hash);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);

-- Name: signing_keys signing_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.signing_keys
    ADD CONSTRAINT signing_keys_pkey PRIMARY KEY (kid);

-- Name: users users_email_key; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_email_key UNIQUE (email);

-- Name: users users_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);

-- Name: users users_username_key; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_username_key UNIQUE (username);

-- Name: refresh_tokens_family_idx; Type: INDEX; Schema: public; Owner: -

CREATE INDEX refresh_tokens_family_idx ON public.refresh_tokens USING btree (family_id);

-- Name: sessions_user_idx; Type: INDEX; Schema: public; Owner: -

CREATE INDEX sessions_user_idx ON public.sessions USING btree (user_id);

-- Name: signing_keys_one_active_key; Type: INDEX; Schema: public; Owner: -

CREATE UNIQUE INDEX signing_keys_one_active_key ON public.signing_keys USING btree (status) WHERE (status = 'active'::text);

-- Name: signing_keys_one_next_key; Type: INDEX; Schema: public; Owner: -

CREATE UNIQUE INDEX signing_keys_one_next_key ON public.signing_keys USING btree (status) WHERE (status = 'next'::text);

-- Name: action_tokens action_tokens_user_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.action_tokens
    ADD CONSTRAINT action_tokens_user_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;

-- Name: authorization_codes authorization_codes_session_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.authorization_codes
    ADD CONSTRAINT authorization_codes_session_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id) ON DELETE CASCADE;

-- Name: login_flows login_flows_user_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.login_flows
    ADD CONSTRAINT login_flows_user_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;

-- Name: refresh_tokens refresh_tokens_session_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.refresh_tokens
    ADD CONSTRAINT refresh_tokens_session_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id) ON DELETE CASCADE;

-- Name: sessions sessions_user_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_user_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;

-- Name: SCHEMA public; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA public TO hiwallet_identity_app;
GRANT USAGE ON SCHEMA public TO hiwallet_identity_readonly;

-- Name: TABLE action_tokens; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE public.action_tokens TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.action_tokens TO hiwallet_identity_readonly;

-- Name: COLUMN action_tokens.actions; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(actions) ON TABLE public.action_tokens TO hiwallet_identity_app;

-- Name: COLUMN action_tokens.used_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(used_at) ON TABLE public.action_tokens TO hiwallet_identity_app;

-- Name: TABLE authorization_codes; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT ON TABLE public.authorization_codes TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.authorization_codes TO hiwallet_identity_readonly;

-- Name: COLUMN authorization_codes.used_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(used_at) ON TABLE public.authorization_codes TO hiwallet_identity_app;

-- Name: TABLE login_flows; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE public.login_flows TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.login_flows TO hiwallet_identity_readonly;

-- Name: COLUMN login_flows.user_id; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(user_id) ON TABLE public.login_flows TO hiwallet_identity_app;

-- Name: COLUMN login_flows.stage; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(stage) ON TABLE public.login_flows TO hiwallet_identity_app;

-- Name: COLUMN login_flows.pending_totp; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(pending_totp) ON TABLE public.login_flows TO hiwallet_identity_app;

-- Name: TABLE outgoing_mail; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT ON TABLE public.outgoing_mail TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.outgoing_mail TO hiwallet_identity_readonly;

-- Name: COLUMN outgoing_mail.sent_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(sent_at) ON TABLE public.outgoing_mail TO hiwallet_identity_app;

-- Name: TABLE refresh_tokens; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT ON TABLE public.refresh_tokens TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.refresh_tokens TO hiwallet_identity_readonly;

-- Name: COLUMN refresh_tokens.used_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(used_at) ON TABLE public.refresh_tokens TO hiwallet_identity_app;

-- Name: COLUMN refresh_tokens.revoked_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(revoked_at) ON TABLE public.refresh_tokens TO hiwallet_identity_app;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_identity_readonly;

-- Name: TABLE sessions; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE public.sessions TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.sessions TO hiwallet_identity_readonly;

-- Name: COLUMN sessions.ended_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(ended_at) ON TABLE public.sessions TO hiwallet_identity_app;

-- Name: TABLE signing_keys; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT ON TABLE public.signing_keys TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.signing_keys TO hiwallet_identity_readonly;

-- Name: COLUMN signing_keys.status; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(status) ON TABLE public.signing_keys TO hiwallet_identity_app;

-- Name: COLUMN signing_keys.activated_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(activated_at) ON TABLE public.signing_keys TO hiwallet_identity_app;

-- Name: COLUMN signing_keys.retired_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(retired_at) ON TABLE public.signing_keys TO hiwallet_identity_app;

-- Name: COLUMN signing_keys.publish_until; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(publish_until) ON TABLE public.signing_keys TO hiwallet_identity_app;

-- Name: TABLE users; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT ON TABLE public.users TO hiwallet_identity_app;
GRANT SELECT ON TABLE public.users TO hiwallet_identity_readonly;

-- Name: COLUMN users.email; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(email) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.first_name; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(first_name) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.last_name; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(last_name) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.enabled; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(enabled) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.email_verified; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(email_verified) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.password_hash; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(password_hash) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.required_actions; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(required_actions) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.totp_secret; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(totp_secret) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.totp_last_step; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(totp_last_step) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.failed_logins; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(failed_logins) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.last_failure_at; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(last_failure_at) ON TABLE public.users TO hiwallet_identity_app;

-- Name: COLUMN users.locked_until; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(locked_until) ON TABLE public.users TO hiwallet_identity_app;

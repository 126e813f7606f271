-- The identity provider's state: users, signing keys, browser logins, sessions, authorization
-- codes, refresh tokens and action tokens. The customers' (hiwallet_identity) and the staff's
-- (hiwallet_staff_identity) databases have the same schema: two installations, one program.
-- Secrets are stored only as hashes (passwords with argon2, codes and tokens with SHA-256), so
-- a copy of this database logs nobody in.

CREATE TABLE users (
    id                 text        NOT NULL,
    username           text        NOT NULL,
    email              text,
    first_name         text,
    last_name          text,
    enabled            boolean     NOT NULL DEFAULT true,
    email_verified     boolean     NOT NULL DEFAULT false,
    password_hash      text,
    -- Required actions as Keycloak names them: UPDATE_PASSWORD, CONFIGURE_TOTP.
    required_actions   text[]      NOT NULL DEFAULT '{}',
    totp_secret        text,
    -- The last accepted TOTP time step: a code is good once, not for its whole 30 s window.
    totp_last_step     bigint,
    failed_logins      integer     NOT NULL DEFAULT 0,
    last_failure_at    timestamptz,
    locked_until       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_pkey PRIMARY KEY (id),
    CONSTRAINT users_username_key UNIQUE (username),
    CONSTRAINT users_email_key UNIQUE (email),
    -- Usernames and e-mails are compared lower-cased, as Keycloak does.
    CONSTRAINT users_username_lower_check CHECK (username = lower(username)),
    CONSTRAINT users_email_lower_check CHECK (email = lower(email)),
    CONSTRAINT users_username_length_check CHECK (length(username) BETWEEN 1 AND 255),
    CONSTRAINT users_failed_logins_check CHECK (failed_logins >= 0)
);

CREATE TABLE signing_keys (
    kid            text        NOT NULL,
    private_pem    text        NOT NULL,
    public_jwk     jsonb       NOT NULL,
    -- next: published, not yet signing; active: signs (exactly one); retired: published until
    -- the tokens it signed have expired (publish_until), then dropped from the JWKS.
    status         text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    activated_at   timestamptz,
    retired_at     timestamptz,
    publish_until  timestamptz,
    CONSTRAINT signing_keys_pkey PRIMARY KEY (kid),
    CONSTRAINT signing_keys_status_check CHECK (status IN ('next', 'active', 'retired')),
    CONSTRAINT signing_keys_retired_check CHECK (status <> 'retired' OR publish_until IS NOT NULL)
);
-- One active key at a time, enforced by the database rather than by care.
CREATE UNIQUE INDEX signing_keys_one_active_key ON signing_keys (status) WHERE status = 'active';
CREATE UNIQUE INDEX signing_keys_one_next_key ON signing_keys (status) WHERE status = 'next';

-- A browser login in progress, between GET /auth and the redirect with a code. The form
-- carries only this row's id; what the client asked for stays on the server.
CREATE TABLE login_flows (
    id              text        NOT NULL,
    client_id       text        NOT NULL,
    redirect_uri    text        NOT NULL,
    scope           text        NOT NULL,
    state           text,
    nonce           text,
    code_challenge  text,
    user_id         text,
    -- credentials: asks for the password; update_password: a required new password;
    -- otp_setup: enrolling TOTP; otp: asks for a code.
    stage           text        NOT NULL DEFAULT 'credentials',
    pending_totp    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    CONSTRAINT login_flows_pkey PRIMARY KEY (id),
    CONSTRAINT login_flows_user_fkey FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE,
    CONSTRAINT login_flows_stage_check CHECK (stage IN ('credentials', 'update_password', 'otp_setup', 'otp'))
);

CREATE TABLE sessions (
    id           text        NOT NULL,
    user_id      text        NOT NULL,
    client_id    text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    CONSTRAINT sessions_pkey PRIMARY KEY (id),
    CONSTRAINT sessions_user_fkey FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE
);
CREATE INDEX sessions_user_idx ON sessions (user_id);

CREATE TABLE authorization_codes (
    code_hash       text        NOT NULL,
    client_id       text        NOT NULL,
    user_id         text        NOT NULL,
    session_id      text        NOT NULL,
    redirect_uri    text        NOT NULL,
    scope           text        NOT NULL,
    nonce           text,
    code_challenge  text,
    expires_at      timestamptz NOT NULL,
    used_at         timestamptz,
    CONSTRAINT authorization_codes_pkey PRIMARY KEY (code_hash),
    CONSTRAINT authorization_codes_session_fkey FOREIGN KEY (session_id)
        REFERENCES sessions (id) ON DELETE CASCADE
);

-- Refresh tokens rotate: each use marks the row used and issues a new one in the same family.
-- Presenting a used token again means it was stolen; the whole family (the session) is revoked.
CREATE TABLE refresh_tokens (
    token_hash   text        NOT NULL,
    family_id    text        NOT NULL,
    session_id   text        NOT NULL,
    client_id    text        NOT NULL,
    user_id      text        NOT NULL,
    scope        text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT refresh_tokens_pkey PRIMARY KEY (token_hash),
    CONSTRAINT refresh_tokens_session_fkey FOREIGN KEY (session_id)
        REFERENCES sessions (id) ON DELETE CASCADE
);
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family_id);

-- The "execute actions" link: one token, some required actions, one use.
CREATE TABLE action_tokens (
    token_hash    text        NOT NULL,
    user_id       text        NOT NULL,
    actions       text[]      NOT NULL,
    client_id     text,
    redirect_uri  text,
    expires_at    timestamptz NOT NULL,
    used_at       timestamptz,
    CONSTRAINT action_tokens_pkey PRIMARY KEY (token_hash),
    CONSTRAINT action_tokens_user_fkey FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE
);

-- Mail the provider sends (action links). Written in the same transaction as the token, then
-- delivered over SMTP; tests and operators read it here when no mail catcher runs.
CREATE TABLE outgoing_mail (
    id          text        NOT NULL,
    recipient   text        NOT NULL,
    subject     text        NOT NULL,
    body        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz,
    CONSTRAINT outgoing_mail_pkey PRIMARY KEY (id)
);

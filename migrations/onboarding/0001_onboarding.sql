-- onboarding (issue 12): registration, basic verification and the tier it sets; the only
-- database holding a customer's personal data (docs/onboarding.md).
--
-- Personal data (e-mail, phone, TCKN, names, birth date) is stored only as AES-GCM
-- ciphertext (*_enc, bytea: the key's id, a nonce, the sealed text; the service's key ring
-- decrypts, the database never can). Lookups and uniqueness go through keyed hashes
-- (*_hash: HMAC-SHA256 under a key the database does not have), so the TCKN's uniqueness is
-- a constraint without the TCKN being readable here.

CREATE SCHEMA IF NOT EXISTS onboarding;

-- One row per registration attempt: an address, its current e-mail code, how far it got.
CREATE TABLE onboarding.registrations (
    id             text        NOT NULL,
    email_hash     bytea       NOT NULL,
    email_enc      bytea       NOT NULL,
    -- the address belonged to a customer when the registration began: no code was mailed
    -- (a "you already have an account" mail instead) and any code is answered as wrong
    known          boolean     NOT NULL DEFAULT false,
    status         text        NOT NULL DEFAULT 'code_sent',
    code_hash      bytea,
    code_expires_at timestamptz,
    attempts_left  integer     NOT NULL DEFAULT 0,
    -- the customer this registration claimed (customers.id = this id) once past the password
    customer_id    text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    CONSTRAINT registrations_pkey PRIMARY KEY (id),
    CONSTRAINT registrations_status_check CHECK (
        status IN ('code_sent', 'email_verified', 'user_created', 'completed')),
    CONSTRAINT registrations_attempts_check CHECK (attempts_left >= 0)
);
CREATE INDEX registrations_expires_idx ON onboarding.registrations (expires_at);

-- One row per customer, made when a registration with a verified address is given a
-- password (its id is that registration's id): the claim on the address comes first, so two
-- registrations of one address can never both create a user.
CREATE TABLE onboarding.customers (
    id                   text        NOT NULL,
    email_hash           bytea       NOT NULL,
    -- the identity provider's user id (the token's sub), once created
    sub                  text,
    -- wallet-api's personal account and its TRY wallet, once opened
    account_id           text,
    wallet_id            text,
    -- the tier onboarding has set in wallet-api, and the one it means to (a raise that could
    -- not reach wallet-api is finished by the sweep while tier_wanted is above tier)
    tier                 text        NOT NULL DEFAULT 'unknown',
    tier_wanted          text        NOT NULL DEFAULT 'unknown',
    tier_changed_at      timestamptz,
    phone_hash           bytea,
    phone_enc            bytea,
    phone_verified_at    timestamptz,
    tckn_hash            bytea,
    tckn_enc             bytea,
    given_name_enc       bytea,
    family_name_enc      bytea,
    birth_date_enc       bytea,
    identity_verified_at timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT customers_pkey PRIMARY KEY (id),
    CONSTRAINT customers_email_taken UNIQUE (email_hash),
    CONSTRAINT customers_sub_key UNIQUE (sub),
    CONSTRAINT customers_account_key UNIQUE (account_id),
    CONSTRAINT customers_wallet_key UNIQUE (wallet_id),
    CONSTRAINT customers_tckn_taken UNIQUE (tckn_hash),
    CONSTRAINT customers_tier_check CHECK (
        tier IN ('unknown', 'unverified', 'verified', 'contracted')
        AND tier_wanted IN ('unknown', 'unverified', 'verified', 'contracted')),
    CONSTRAINT customers_identity_check CHECK (
        (tckn_hash IS NULL) = (identity_verified_at IS NULL)),
    CONSTRAINT customers_phone_check CHECK ((phone_hash IS NULL) = (phone_verified_at IS NULL))
);
CREATE INDEX customers_tier_pending_idx ON onboarding.customers (id) WHERE tier_wanted <> tier;

-- The phone number a customer is verifying and its SMS code (one at a time; replaced by a
-- new request).
CREATE TABLE onboarding.phone_codes (
    customer_id   text        NOT NULL,
    phone_hash    bytea       NOT NULL,
    phone_enc     bytea       NOT NULL,
    code_hash     bytea       NOT NULL,
    expires_at    timestamptz NOT NULL,
    attempts_left integer     NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT phone_codes_pkey PRIMARY KEY (customer_id),
    CONSTRAINT phone_codes_customer_fkey FOREIGN KEY (customer_id) REFERENCES onboarding.customers (id),
    CONSTRAINT phone_codes_attempts_check CHECK (attempts_left >= 0)
);

-- What a customer accepted: each document's version and when; never changed, never erased.
CREATE TABLE onboarding.consents (
    customer_id text        NOT NULL,
    document    text        NOT NULL,
    version     text        NOT NULL,
    accepted_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consents_pkey PRIMARY KEY (customer_id, document, version),
    CONSTRAINT consents_customer_fkey FOREIGN KEY (customer_id) REFERENCES onboarding.customers (id),
    CONSTRAINT consents_document_check CHECK (document IN ('user_agreement', 'privacy_notice'))
);

-- Rate limits: hits per (scope, keyed hash of the address or IP, fixed window).
CREATE TABLE onboarding.rate_hits (
    scope        text        NOT NULL,
    key_hash     bytea       NOT NULL,
    window_start timestamptz NOT NULL,
    hits         integer     NOT NULL,
    CONSTRAINT rate_hits_pkey PRIMARY KEY (scope, key_hash, window_start)
);

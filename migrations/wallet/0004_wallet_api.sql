-- wallet-api: accounts (personal, business), their members, their wallets (one per currency,
-- each with a number a person can read out), idempotency records and monthly limit counters.
-- Every table that belongs to an account carries the account's bucket at the head of its keys
-- (docs/wallet-api.md, src/hiwallet/ledger/citus_tables.json). The one exception is
-- wallet.identity_accounts, the index "accounts of identity X", which is keyed by the identity
-- and is a reference table.

CREATE SCHEMA IF NOT EXISTS wallet;

CREATE TABLE wallet.accounts (
    bucket      smallint    NOT NULL,
    id          text        NOT NULL,
    kind        text        NOT NULL,
    -- personal accounts only; a business account has no tier and no monthly limits
    tier        text,
    -- a business's name; a personal account has none (personal data stays with onboarding)
    name        text,
    opened_by   text        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    CONSTRAINT accounts_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT accounts_bucket_range CHECK (bucket BETWEEN 1 AND 1023),
    CONSTRAINT accounts_id_has_bucket CHECK (substr(id, 1, 4) = lpad(bucket::text, 4, '0')),
    CONSTRAINT accounts_kind_known CHECK (kind IN ('personal', 'business')),
    CONSTRAINT accounts_tier_known CHECK (
        (kind = 'personal' AND tier IN ('unknown', 'unverified', 'verified', 'contracted'))
        OR (kind = 'business' AND tier IS NULL)),
    CONSTRAINT accounts_name_length CHECK (name IS NULL OR length(name) BETWEEN 1 AND 200)
);

-- Who may act for an account: an identity is (issuer, subject) of a verified token.
CREATE TABLE wallet.members (
    bucket      smallint    NOT NULL,
    account_id  text        NOT NULL,
    issuer      text        NOT NULL,
    subject     text        NOT NULL,
    added_by    text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT members_pkey PRIMARY KEY (bucket, account_id, issuer, subject),
    CONSTRAINT members_account_fkey FOREIGN KEY (bucket, account_id)
        REFERENCES wallet.accounts (bucket, id)
);

-- "Which accounts may identity X use?" crosses buckets, so it has its own index, keyed by the
-- identity (a reference table on Citus: small, rarely written, read on GET /v1/accounts and
-- when a personal account is opened). A person has at most one personal account.
CREATE TABLE wallet.identity_accounts (
    issuer      text        NOT NULL,
    subject     text        NOT NULL,
    account_id  text        NOT NULL,
    bucket      smallint    NOT NULL,
    kind        text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT identity_accounts_pkey PRIMARY KEY (issuer, subject, account_id)
);
CREATE UNIQUE INDEX identity_accounts_one_personal
    ON wallet.identity_accounts (issuer, subject) WHERE kind = 'personal';

-- A wallet: the ledger's wallet id (its cash and promo accounts) and its number. The number
-- begins with the bucket's four digits, so a lookup by number names one bucket.
CREATE TABLE wallet.wallets (
    bucket      smallint    NOT NULL,
    id          text        NOT NULL,
    account_id  text        NOT NULL,
    currency    char(3)     NOT NULL,
    number      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT wallets_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT wallets_number_unique UNIQUE (bucket, number),
    CONSTRAINT wallets_one_per_currency UNIQUE (bucket, account_id, currency),
    CONSTRAINT wallets_account_fkey FOREIGN KEY (bucket, account_id)
        REFERENCES wallet.accounts (bucket, id),
    CONSTRAINT wallets_number_format CHECK (
        number ~ '^[0-9]{16}$' AND substr(number, 1, 4) = lpad(bucket::text, 4, '0')),
    CONSTRAINT wallets_currency_format CHECK (currency ~ '^[A-Z]{3}$')
);

-- The first answer to a money-moving request, per (bucket of the money's source, caller, key).
-- Written in the same transaction as the posting; refused requests are not stored.
CREATE TABLE wallet.idempotency_keys (
    bucket        smallint    NOT NULL,
    scope         text        NOT NULL,
    key           text        NOT NULL,
    request_hash  bytea       NOT NULL,
    status        smallint    NOT NULL,
    body          jsonb       NOT NULL,
    created_at    timestamptz NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (bucket, scope, key)
);
CREATE INDEX idempotency_keys_created ON wallet.idempotency_keys (created_at);

-- What an account has used of a monthly limit; the row is locked by the upsert that adds to it,
-- in the same transaction as the posting, so two requests at once cannot both pass.
CREATE TABLE wallet.limit_usage (
    bucket      smallint    NOT NULL,
    account_id  text        NOT NULL,
    month       date        NOT NULL,
    kind        text        NOT NULL,
    currency    char(3)     NOT NULL,
    used        bigint      NOT NULL,
    CONSTRAINT limit_usage_pkey PRIMARY KEY (bucket, account_id, month, kind, currency),
    CONSTRAINT limit_usage_account_fkey FOREIGN KEY (bucket, account_id)
        REFERENCES wallet.accounts (bucket, id),
    CONSTRAINT limit_usage_used_not_negative CHECK (used >= 0)
);

-- The ledger: accounts, transactions (one part row per bucket they touch), lines (legs),
-- holds and promo batches. Every table that belongs to a wallet carries the wallet's bucket at
-- the head of its keys, so the database can move to Citus sharded by bucket without a rewrite
-- (docs/ledger-citus.md, tests/ledger/test_schema_rules.py).

CREATE SCHEMA IF NOT EXISTS ledger;

-- Closed sets are enum types rather than CHECK (x IN (...)): PostgreSQL re-reads a table's
-- CHECK expressions from their stored text for every statement that writes the table, and long
-- IN-lists made that a tenth of a posting's cost when measured. An enum checks on input.
CREATE TYPE ledger.account_role AS ENUM (
    'user_wallet', 'clearing', 'nostro', 'revenue', 'provider_expense',
    'promo_expense', 'promo_breakage', 'transit');
CREATE TYPE ledger.purse AS ENUM ('cash', 'promo');
CREATE TYPE ledger.tx_type AS ENUM (
    'topup', 'p2p', 'payment', 'b2p', 'b2b', 'promo_grant', 'promo_expiry', 'withdrawal',
    'refund', 'settlement_topup', 'settlement_withdrawal', 'provider_invoice', 'hold_capture',
    'debit', 'sweep');

-- ---------------------------------------------------------------------------------------------
-- Accounts
-- ---------------------------------------------------------------------------------------------
-- role: user_wallet belongs to a customer or a business and never goes below zero; the system
-- roles may. purse splits a wallet into its cash and its promo money (two accounts, one wallet).
CREATE TABLE ledger.accounts (
    bucket        smallint    NOT NULL,
    id            text        NOT NULL,
    role          ledger.account_role NOT NULL,
    purse         ledger.purse,
    currency      char(3)     NOT NULL,
    owner         text,
    balance       bigint      NOT NULL DEFAULT 0,
    held          bigint      NOT NULL DEFAULT 0,
    version       bigint      NOT NULL DEFAULT 0,
    -- hash of the newest line: the next line's hash covers it (tamper evidence)
    last_hash     bytea       NOT NULL DEFAULT '\x'::bytea,
    created_at    timestamptz NOT NULL,
    CONSTRAINT accounts_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT accounts_bucket_range CHECK (bucket BETWEEN 0 AND 1023),
    CONSTRAINT accounts_id_has_bucket CHECK (substr(id, 1, 4) = lpad(bucket::text, 4, '0')),
    CONSTRAINT accounts_id_length CHECK (length(id) <= 120),
    CONSTRAINT accounts_purse_for_wallets CHECK ((role = 'user_wallet') = (purse IS NOT NULL)),
    CONSTRAINT accounts_currency_format CHECK (currency ~ '^[A-Z]{3}$'),
    -- The last line of defence for "customers never go below zero" and for holds staying
    -- inside the balance. The posting function checks first and answers with a typed error;
    -- this CHECK catches any code path that forgets.
    CONSTRAINT accounts_customer_not_negative CHECK (role <> 'user_wallet' OR balance >= 0),
    CONSTRAINT accounts_held_within_balance CHECK (held >= 0 AND (role <> 'user_wallet' OR held <= balance)),
    CONSTRAINT accounts_version_not_negative CHECK (version >= 0)
) WITH (fillfactor = 70);  -- room for HOT updates of the balance row

-- ---------------------------------------------------------------------------------------------
-- Transactions: one row per (transaction, bucket it touches). The home part (bucket =
-- home_bucket) carries the request hash; all parts carry the list of buckets.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ledger.transactions (
    bucket        smallint    NOT NULL,
    id            text        NOT NULL,
    home_bucket   smallint    NOT NULL,
    buckets       smallint[]  NOT NULL,
    type          ledger.tx_type NOT NULL,
    actor         text        NOT NULL,
    ref           text        NOT NULL,
    request_hash  bytea       NOT NULL,
    -- true: every part balances by itself (transit legs); false: the parts balance together
    parts_balanced boolean    NOT NULL,
    refund_of     text,
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    posted_at     timestamptz NOT NULL,
    CONSTRAINT transactions_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT transactions_id_length CHECK (length(id) BETWEEN 1 AND 100),
    CONSTRAINT transactions_actor_length CHECK (length(actor) BETWEEN 1 AND 200),
    CONSTRAINT transactions_ref_length CHECK (length(ref) BETWEEN 1 AND 200),
    CONSTRAINT transactions_bucket_listed CHECK (bucket = ANY (buckets) AND home_bucket = ANY (buckets)),
    CONSTRAINT transactions_metadata_size CHECK (pg_column_size(metadata) <= 4096)
);

-- A transaction is refunded at most once: the refund's home part names its original, and the
-- refund lives in the original's home bucket.
CREATE UNIQUE INDEX transactions_refunded_once ON ledger.transactions (bucket, refund_of)
    WHERE refund_of IS NOT NULL AND bucket = home_bucket;

-- ---------------------------------------------------------------------------------------------
-- Lines: one per leg. version is the account's version this line made; balance_after what it
-- left. The lines of an account, in version order, add up to its balance at every step.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ledger.lines (
    bucket         smallint    NOT NULL,
    account_id     text        NOT NULL,
    version        bigint      NOT NULL,
    transaction_id text        NOT NULL,
    amount         bigint      NOT NULL,
    currency       char(3)     NOT NULL,
    balance_after  bigint      NOT NULL,
    type           ledger.tx_type NOT NULL,
    ref            text        NOT NULL,
    posted_at      timestamptz NOT NULL,
    hash           bytea       NOT NULL,
    CONSTRAINT lines_pkey PRIMARY KEY (bucket, account_id, version),
    CONSTRAINT lines_amount_not_zero CHECK (amount <> 0),
    CONSTRAINT lines_version_positive CHECK (version > 0)
    -- Which account and which transaction part a line belongs to is checked by the deferred
    -- trigger lines_balanced below, not by foreign keys: a foreign key check locks the
    -- referenced row (FOR KEY SHARE, a write to its page) for every line, which cost 15 % of
    -- a posting when measured. Neither accounts nor transactions are ever deleted (triggers
    -- below), so a row found at commit stays found.
);
CREATE INDEX lines_by_transaction ON ledger.lines (bucket, transaction_id);
CREATE INDEX lines_by_time ON ledger.lines (bucket, account_id, posted_at);

-- ---------------------------------------------------------------------------------------------
-- Holds: money set aside on a wallet (available = balance - held), captured or released once.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ledger.holds (
    bucket          smallint    NOT NULL,
    account_id      text        NOT NULL,
    key             text        NOT NULL,
    amount          bigint      NOT NULL,
    status          text        NOT NULL DEFAULT 'pending',
    transaction_id  text,
    created_at      timestamptz NOT NULL,
    closed_at       timestamptz,
    CONSTRAINT holds_pkey PRIMARY KEY (bucket, account_id, key),
    CONSTRAINT holds_amount_positive CHECK (amount > 0),
    CONSTRAINT holds_key_length CHECK (length(key) BETWEEN 1 AND 200),
    CONSTRAINT holds_status_known CHECK (status IN ('pending', 'captured', 'released')),
    CONSTRAINT holds_closed_consistent CHECK ((status = 'pending') = (closed_at IS NULL)),
    CONSTRAINT holds_account_fk FOREIGN KEY (bucket, account_id) REFERENCES ledger.accounts (bucket, id)
);

-- ---------------------------------------------------------------------------------------------
-- Promo batches: promo money granted to a wallet's promo purse, spent earliest-expiring first,
-- what is left at expiry goes back to its funder. The promo purse's balance is the sum of
-- its batches' remaining amounts.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE ledger.promo_batches (
    bucket          smallint    NOT NULL,
    id              text        NOT NULL,
    account_id      text        NOT NULL,
    funder_bucket   smallint    NOT NULL,
    funder_account  text        NOT NULL,
    funded_by       text        NOT NULL,
    -- where what is left at expiry goes: the business that funded it, or promo_breakage
    expire_to_bucket  smallint  NOT NULL,
    expire_to_account text      NOT NULL,
    amount          bigint      NOT NULL,
    remaining       bigint      NOT NULL,
    expires_at      timestamptz NOT NULL,
    grant_transaction_id text   NOT NULL,
    created_at      timestamptz NOT NULL,
    CONSTRAINT promo_batches_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT promo_batches_amount_positive CHECK (amount > 0),
    CONSTRAINT promo_batches_remaining_range CHECK (remaining BETWEEN 0 AND amount),
    CONSTRAINT promo_batches_funded_by_known CHECK (funded_by IN ('business', 'platform')),
    CONSTRAINT promo_batches_account_fk FOREIGN KEY (bucket, account_id) REFERENCES ledger.accounts (bucket, id)
);
CREATE INDEX promo_batches_spend_order ON ledger.promo_batches (bucket, account_id, expires_at, id)
    WHERE remaining > 0;

-- What a transaction took from which batch, so that a refund puts it back where it came from.
CREATE TABLE ledger.promo_spends (
    bucket          smallint    NOT NULL,
    transaction_id  text        NOT NULL,
    batch_id        text        NOT NULL,
    amount          bigint      NOT NULL,
    CONSTRAINT promo_spends_pkey PRIMARY KEY (bucket, transaction_id, batch_id),
    CONSTRAINT promo_spends_amount_not_zero CHECK (amount <> 0),
    CONSTRAINT promo_spends_batch_fk FOREIGN KEY (bucket, batch_id) REFERENCES ledger.promo_batches (bucket, id),
    CONSTRAINT promo_spends_transaction_fk FOREIGN KEY (bucket, transaction_id)
        REFERENCES ledger.transactions (bucket, id)
);

-- ---------------------------------------------------------------------------------------------
-- Append-only: lines, transactions and promo spends are never updated or deleted. A correction
-- is another movement. (Tests that tamper on purpose switch triggers off as a superuser.)
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION ledger.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger.% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'HW010';
END $$;

CREATE TRIGGER lines_append_only BEFORE UPDATE OR DELETE ON ledger.lines
    FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();
CREATE TRIGGER lines_no_truncate BEFORE TRUNCATE ON ledger.lines
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change();
CREATE TRIGGER transactions_append_only BEFORE UPDATE OR DELETE ON ledger.transactions
    FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();
CREATE TRIGGER transactions_no_truncate BEFORE TRUNCATE ON ledger.transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change();
CREATE TRIGGER promo_spends_append_only BEFORE UPDATE OR DELETE ON ledger.promo_spends
    FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();
-- An account is never deleted: its lines would lose their owner.
CREATE TRIGGER accounts_never_deleted BEFORE DELETE ON ledger.accounts
    FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();
CREATE TRIGGER accounts_no_truncate BEFORE TRUNCATE ON ledger.accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change();

-- ---------------------------------------------------------------------------------------------
-- Balanced transactions, enforced at commit whatever wrote the lines. Deferred, so that the
-- check sees all of a transaction's legs; it reads only through (bucket, transaction_id), the
-- one access path that stays shard-local on Citus.
-- ---------------------------------------------------------------------------------------------
CREATE FUNCTION ledger.check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    -- One query, three index probes: the line's account, its transaction part, and the sum of
    -- the part's (transit legs) or the whole transaction's lines per currency.
    SELECT a.id IS NOT NULL AS has_account, t.id IS NOT NULL AS has_part, u.currency, u.total INTO v
      FROM (SELECT 1) AS one
      LEFT JOIN ledger.accounts a ON a.bucket = NEW.bucket AND a.id = NEW.account_id
      LEFT JOIN ledger.transactions t ON t.bucket = NEW.bucket AND t.id = NEW.transaction_id
      LEFT JOIN LATERAL (
            SELECT l.currency, sum(l.amount) AS total
              FROM ledger.lines l
             WHERE l.transaction_id = t.id
               AND l.bucket = ANY (CASE WHEN t.parts_balanced THEN ARRAY[t.bucket] ELSE t.buckets END)
             GROUP BY l.currency
            HAVING sum(l.amount) <> 0
             LIMIT 1) AS u ON true;
    IF NOT v.has_account OR NOT v.has_part THEN
        RAISE EXCEPTION 'line % v% names no %', NEW.account_id, NEW.version,
            CASE WHEN NOT v.has_account THEN 'account' ELSE 'transaction part ' || NEW.transaction_id END
            USING ERRCODE = 'HW012', CONSTRAINT = 'lines_belong';
    END IF;
    IF v.currency IS NOT NULL THEN
        RAISE EXCEPTION 'transaction % is unbalanced: % sums to %', NEW.transaction_id, v.currency, v.total
            USING ERRCODE = 'HW011', CONSTRAINT = 'lines_balanced';
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER lines_balanced AFTER INSERT ON ledger.lines
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger.check_balanced();

-- The ledger's reads behind a statement page and a wallet's overview in its SQL interface
-- (ledger_api, migration 0015), so that a service reads them in the same statement as its own
-- check of who may see them (issue 26, docs/performance.md): wallet-api's statement page was four
-- round trips (the membership, the page, its counterparties' transactions, their wallets) and
-- its overview three (the wallet, the promo batches, the 30 days' probes); a round trip was most
-- of wallet-api's CPU a read. The same rows as the ledger's own queries (statement,
-- counterparties, promo_batches and daily_balances in src/hiwallet/ledger/sql/queries.sql).
--
-- Plain, as the other views here (no security_barrier, no function in them): the planner inlines
-- them, so a read through one is the index probe it was (the account's lines by their key or
-- lines_by_time, a transaction's lines by lines_by_transaction). The enums as text: they are the
-- ledger's.

-- An account's lines: its statement (in version order by the key) and its balance at a time
-- (the last line before it, by lines_by_time). Not the hash chain: that is the ledger's own.
CREATE VIEW ledger_api.lines AS
SELECT l.bucket, l.account_id, l.version, l.transaction_id, l.type::text AS type, l.ref, l.amount,
       l.currency, l.balance_after, l.posted_at
  FROM ledger.lines l;

-- The customer wallets' accounts a transaction moved money on, by the transaction's row in a
-- bucket it touched (bucket, transaction_id): in each of the buckets it lists, its lines on an
-- account of the user_wallet role (no fee, clearing or promo-expense leg), with that account's
-- bucket. A statement line's counterparty is one of these that is not the line's own wallet's.
CREATE VIEW ledger_api.transaction_wallet_accounts AS
SELECT t.bucket, t.id AS transaction_id, l.bucket AS account_bucket, l.account_id
  FROM ledger.transactions t
 CROSS JOIN LATERAL unnest(t.buckets) AS b (bucket)
  JOIN ledger.lines l ON l.bucket = b.bucket AND l.transaction_id = t.id
  JOIN ledger.accounts a ON a.bucket = l.bucket AND a.id = l.account_id
 WHERE a.role = 'user_wallet';

-- A promo account's batches: what each was granted, what is left and when it expires.
CREATE VIEW ledger_api.promo_batches AS
SELECT b.bucket, b.id, b.account_id, b.funded_by, b.amount, b.remaining, b.expires_at,
       b.grant_transaction_id
  FROM ledger.promo_batches b;

-- wallet-api's named queries. Every statement on a wallet-owned table names its bucket
-- (`bucket = $n`), or says it is a multi-shard read; tests/wallet_api/test_schema.py checks it.

-- name: insert_account
INSERT INTO wallet.accounts (bucket, id, kind, tier, name, opened_by, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp(), clock_timestamp())

-- name: insert_member
INSERT INTO wallet.members (bucket, account_id, issuer, subject, added_by, created_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())
ON CONFLICT DO NOTHING

-- name: insert_identity_account
-- citus: reference table, keyed by the identity
INSERT INTO wallet.identity_accounts (issuer, subject, account_id, bucket, kind, created_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())
ON CONFLICT DO NOTHING

-- name: personal_account_of
-- citus: reference table, keyed by the identity
SELECT account_id, bucket FROM wallet.identity_accounts
 WHERE issuer = $1 AND subject = $2 AND kind = 'personal'

-- name: accounts_of_identity
-- citus: reference table, keyed by the identity
SELECT account_id, bucket FROM wallet.identity_accounts
 WHERE issuer = $1 AND subject = $2
 ORDER BY created_at, account_id
 LIMIT 100

-- name: get_account
SELECT id, bucket, kind, tier, name, created_at, updated_at
  FROM wallet.accounts WHERE bucket = $1 AND id = $2

-- name: get_account_for_update
SELECT id, bucket, kind, tier, name, created_at, updated_at
  FROM wallet.accounts WHERE bucket = $1 AND id = $2
   FOR UPDATE

-- name: is_member
SELECT EXISTS (
    SELECT 1 FROM wallet.members
     WHERE bucket = $1 AND account_id = $2 AND issuer = $3 AND subject = $4)

-- name: members_of_account
-- Staff read an account's record: who its members are and who added them (an operator, an
-- employee as staff:<sub>, onboarding's client).
SELECT issuer, subject, added_by, created_at FROM wallet.members
 WHERE bucket = $1 AND account_id = $2
 ORDER BY created_at, issuer, subject

-- name: account_opened_by
SELECT opened_by FROM wallet.accounts WHERE bucket = $1 AND id = $2

-- name: wallet_account
SELECT account_id FROM wallet.wallets WHERE bucket = $1 AND id = $2

-- name: set_tier
UPDATE wallet.accounts SET tier = $3, updated_at = clock_timestamp()
 WHERE bucket = $1 AND id = $2

-- name: insert_account_contract
-- The Contracted tier's record (migrations/wallet/0018), in the transaction that raises it.
INSERT INTO wallet.account_contracts
       (bucket, account_id, evidence, evidence_ref, previous_tier, recorded_by, recorded_at)
VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())

-- name: account_contract
SELECT evidence, evidence_ref, previous_tier, recorded_by, recorded_at
  FROM wallet.account_contracts WHERE bucket = $1 AND account_id = $2

-- name: insert_wallet
INSERT INTO wallet.wallets (bucket, id, account_id, currency, number, created_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())

-- name: wallets_of_account
SELECT id, bucket, account_id, currency, number, created_at
  FROM wallet.wallets WHERE bucket = $1 AND account_id = $2
 ORDER BY created_at, id

-- name: wallet_of_account
SELECT id, bucket, account_id, currency, number, created_at
  FROM wallet.wallets WHERE bucket = $1 AND account_id = $2 AND currency = $3

-- name: wallet_with_access
-- A wallet, its account and whether the caller is a member: one round trip per check.
SELECT w.id, w.bucket, w.account_id, w.currency, w.number, w.created_at,
       a.kind, a.tier, a.name,
       EXISTS (SELECT 1 FROM wallet.members m
                WHERE m.bucket = w.bucket AND m.account_id = w.account_id
                  AND m.issuer = $3 AND m.subject = $4) AS member
  FROM wallet.wallets w
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
 WHERE w.bucket = $1 AND w.id = $2

-- name: wallet_with_balance
-- wallet_with_access and the wallet's two purses in the ledger ($5 its cash account, $6 its
-- promo account, named by hiwallet.ledger), read at one snapshot in one round trip (GET
-- /v1/wallets/{id} and its overview: the round trip saved was a third of wallet-api's CPU a read,
-- docs/performance.md). The ledger's accounts are in the wallet's bucket; an account missing is a
-- NULL, which the caller refuses as the ledger's own read would.
SELECT w.id, w.bucket, w.account_id, w.currency, w.number, w.created_at,
       a.kind, a.tier, a.name,
       EXISTS (SELECT 1 FROM wallet.members m
                WHERE m.bucket = w.bucket AND m.account_id = w.account_id
                  AND m.issuer = $3 AND m.subject = $4) AS member,
       c.currency AS cash_currency, c.balance AS cash, c.held AS held,
       p.balance AS promo, p.expired AS promo_expired
  FROM wallet.wallets w
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
  LEFT JOIN ledger_api.wallet_purses c ON c.bucket = w.bucket AND c.id = $5 AND c.purse = 'cash'
  LEFT JOIN ledger_api.wallet_purses p ON p.bucket = w.bucket AND p.id = $6 AND p.purse = 'promo'
 WHERE w.bucket = $1 AND w.id = $2

-- name: counterparty_wallets
-- The wallets a statement's lines moved money with ($1, $2: buckets and ids): each one's number
-- and its account's kind and name (a business's; a person's account has none).
-- citus: multi-shard read (the counterparties' buckets; each pair names its own).
SELECT w.id, w.number, a.kind, a.name
  FROM unnest($1::smallint[], $2::text[]) AS p (bucket, id)
  JOIN wallet.wallets w ON w.bucket = p.bucket AND w.id = p.id
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id

-- name: wallet_by_number
SELECT w.id, w.bucket, w.account_id, w.currency, w.number, w.created_at, a.kind, a.tier, a.name
  FROM wallet.wallets w
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
 WHERE w.bucket = $1 AND w.number = $2

-- name: transfer_parties
-- A transfer's first statement (read only, autocommit): the key's stored answer and both
-- parties. One row without parties, else one per party found.
SELECT true AS locked, k.request_hash, k.status, k.body, k.posted,
       w.id, w.bucket, w.account_id, w.currency, w.number, w.created_at, a.kind, a.tier, a.name,
       EXISTS (SELECT 1 FROM wallet.members m
                WHERE m.bucket = w.bucket AND m.account_id = w.account_id
                  AND m.issuer = $5 AND m.subject = $6) AS member,
       (w.bucket = $1 AND w.id = $2) AS is_source
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN wallet.idempotency_keys k ON k.bucket = $1 AND k.scope = $7 AND k.key = $8
  LEFT JOIN (wallet.wallets w JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id)
         ON (w.bucket = $1 AND w.id = $2) OR (w.bucket = $3 AND w.number = $4)

-- name: transfer_batch
-- Transfers, one or many, in one autocommit statement: keys, checks, limits, postings and
-- stored answers (migrations/wallet/0005_wallet_transfer.sql, 0007, 0008, 0022). Its statements serve the
-- whole batch, each row probing by its own bucket; on Citus, a batch spanning workers is a
-- distributed transaction, and the function is not yet tried there (docs/ledger-citus.md).
SELECT wallet.transfer_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                             $17, $18, $19, $20)

-- name: transfer_batch_events
-- transfer_batch, and in the same statement (so in its transaction) the merchants' events of
-- the transfers that posted ($21: per transfer, the event's row, or null: the payee is not a
-- business). Only a batch with a payment to a business takes this statement (transfers.py);
-- a refused or replayed transfer writes no event (its answer has no "result").
WITH batch AS MATERIALIZED (
    SELECT wallet.transfer_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                                 $16, $17, $18, $19, $20) AS answers
), events AS (
    INSERT INTO wallet.webhook_events (bucket, id, account_id, type, resource_id, payload, created_at)
    SELECT (x.e->>'bucket')::smallint, x.e->>'id', x.e->>'account_id', x.e->>'type',
           x.e->>'resource_id', x.e->'payload', clock_timestamp()
      FROM batch, unnest(batch.answers, $21::jsonb[]) AS x (answer, e)
     WHERE x.e IS NOT NULL AND x.answer ? 'result'
)
SELECT answers FROM batch

-- name: member_of_any_wallet
-- Is the caller a member of the account of any of these wallets (a transfer's legs)?
SELECT w.id, w.account_id, a.kind
  FROM wallet.wallets w
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
  JOIN wallet.members m ON m.bucket = w.bucket AND m.account_id = w.account_id
 WHERE w.bucket = ANY ($1::smallint[]) AND w.id = ANY ($2::text[])
   AND m.issuer = $3 AND m.subject = $4

-- name: limit_usage
SELECT kind, currency, used FROM wallet.limit_usage
 WHERE bucket = $1 AND account_id = $2 AND month = $3

-- wallet-consumer's named queries. wallet.unattributed_topups is not distributed (no wallet,
-- no bucket: src/hiwallet/ledger/citus_tables.json); every read of a distributed table names
-- its bucket. Of the ledger they name only its SQL interface, ledger_api (migrations/wallet/
-- 0015; tests/test_ledger_boundary.py): views the planner inlines, so each read is planned as
-- the read of the ledger's table was.

-- name: wallet_state
-- What a top-up needs to know of a wallet: that the ledger has its cash account, its currency,
-- and whether wallet-api's record of it says closed (a wallet opened by the ledger alone has no
-- record: open). Read only; the ledger's own check runs again when the top-up posts.
SELECT a.currency, w.closed_at
  FROM ledger_api.accounts a
  LEFT JOIN wallet.wallets w ON w.bucket = $1 AND w.id = $2
 WHERE a.bucket = $1 AND a.id = $3

-- name: insert_unattributed
-- One row per payment: a repeat (another message of the same payment) keeps the first.
INSERT INTO wallet.unattributed_topups
       (payment_id, provider, provider_payment_id, reference, amount_minor, currency, reason, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp())
ON CONFLICT (payment_id) DO NOTHING

-- name: unattributed_of_payment
SELECT payment_id, provider, provider_payment_id, reference, amount_minor, currency, reason,
       created_at, attributed_wallet, attributed_by, attributed_at
  FROM wallet.unattributed_topups
 WHERE payment_id = $1

-- name: lock_unattributed
-- The operator's attribution holds the row until it commits: two operators at once, one credit.
SELECT payment_id, provider, provider_payment_id, reference, amount_minor, currency, reason,
       created_at, attributed_wallet, attributed_by, attributed_at
  FROM wallet.unattributed_topups
 WHERE payment_id = $1
   FOR UPDATE

-- name: mark_attributed
UPDATE wallet.unattributed_topups
   SET attributed_wallet = $2, attributed_by = $3, attributed_at = clock_timestamp()
 WHERE payment_id = $1 AND attributed_wallet IS NULL

-- name: list_open
-- The open ones, oldest first (the partial index unattributed_topups_open).
SELECT payment_id, provider, provider_payment_id, reference, amount_minor, currency, reason,
       created_at, attributed_wallet, attributed_by, attributed_at
  FROM wallet.unattributed_topups
 WHERE attributed_wallet IS NULL
 ORDER BY created_at, payment_id
 LIMIT $1

-- name: list_all
-- The attributed ones too, newest first.
SELECT payment_id, provider, provider_payment_id, reference, amount_minor, currency, reason,
       created_at, attributed_wallet, attributed_by, attributed_at
  FROM wallet.unattributed_topups
 ORDER BY created_at DESC, payment_id
 LIMIT $1

-- name: count_unattributed
SELECT count(*) FROM wallet.unattributed_topups WHERE attributed_wallet IS NULL

-- name: credited_under_key
-- citus: multi-shard read (rare: only for a top-up that is not credited by its message)
-- A ledger transaction under the payment's key in any bucket (a transaction's id is its home
-- bucket and its key: ledger/rules.py transaction_id): the payment was credited to a wallet
-- already. One index probe per bucket.
SELECT t.id, t.type, t.ref, t.metadata
  FROM generate_series(0, $2::int - 1) AS b
  JOIN ledger_api.transactions t
    ON t.bucket = b AND t.id = lpad(b::text, 4, '0') || ':' || $1
 ORDER BY t.posted_at
 LIMIT 1

-- name: batch_state
-- citus: multi-bucket read (a batch's wallets are in many buckets; not yet tried on Citus,
-- as wallet.transfer_batch: docs/ledger-citus.md)
-- wallet_state and unattributed_of_payment for a batch of top-ups in one statement, one row per
-- top-up in the order given (n, 1-based). A top-up whose row shows anything but an open wallet
-- of its currency and no unattributed row goes the single way (TopupHandler.handle).
SELECT i.n, a.currency, w.closed_at, (u.payment_id IS NOT NULL) AS unattributed
  FROM unnest($1::text[], $2::smallint[], $3::text[], $4::text[])
       WITH ORDINALITY AS i (payment_id, bucket, wallet, account, n)
  LEFT JOIN ledger_api.accounts a ON a.bucket = i.bucket AND a.id = i.account
  LEFT JOIN wallet.wallets w ON w.bucket = i.bucket AND w.id = i.wallet
  LEFT JOIN wallet.unattributed_topups u ON u.payment_id = i.payment_id
 ORDER BY i.n

-- name: post_topups
-- The ledger's batched posting path (ledger_api.post_batch, migrations/wallet/0015): an answer
-- per posting, a refusal leaving nothing and not stopping the others. In the consumer's
-- transaction.
SELECT ledger_api.post_batch($1)

-- name: topups_under_keys
-- citus: multi-shard read (one payout's lines, once per payout)
-- The top-up transactions under these payments' keys, in any bucket (a transaction's id is its
-- home bucket and its key): the payments a payout's lines name that were credited to a wallet.
SELECT k.payment_id, t.id
  FROM unnest($1::text[]) AS k(payment_id)
 CROSS JOIN generate_series(0, $2::int - 1) AS b
  JOIN ledger_api.transactions t
    ON t.bucket = b AND t.id = lpad(b::text, 4, '0') || ':' || k.payment_id
 WHERE t.type = 'topup'

-- name: settle_topups
-- The top-ups a payout settles, each once (migrations/wallet/0020): the ones recorded now. A
-- payment a payout settled before is not returned (the caller records a finding for it).
INSERT INTO wallet.settled_topups (payment_id, provider, payout_id, line_id, gross_minor, fee_minor)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
    ON CONFLICT ON CONSTRAINT settled_topups_pkey DO NOTHING
RETURNING payment_id

-- name: record_bank_statement
-- The bank's statement of a day, once (migrations/wallet/0021): the day when recorded now,
-- nothing when it was before (its lines then are there too: one transaction wrote both).
INSERT INTO wallet.bank_statements (day, currency, opening_minor, closing_minor, lines)
VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT ON CONSTRAINT bank_statements_pkey DO NOTHING
RETURNING day

-- name: record_bank_statement_lines
INSERT INTO wallet.bank_statement_lines (day, currency, position, bank_reference, customer_reference,
                                         amount_minor, booked_on, saga_id)
SELECT $1::date, $2::text, l.*
  FROM unnest($3::int[], $4::text[], $5::text[], $6::bigint[], $7::date[], $8::text[]) AS l

-- wallet-consumer's named queries for the withdrawal saga's commands
-- (src/hiwallet/wallet_consumer/withdrawals.py; migrations/wallet/0011_withdrawals.sql).
-- wallet.processed_messages is not distributed (keyed by the command); every read of a
-- distributed table names its bucket.

-- name: lock_command
-- One handling of a command id at a time, until the transaction ends: a command published
-- again while its first delivery is being handled (another message id, so processed_events
-- does not tell them apart) waits here, then finds the stored response. Its own statement,
-- before the read below: a statement's snapshot is taken when it starts, so a read in the
-- same statement as the lock could miss the response committed while it waited.
SELECT pg_advisory_xact_lock(hashtextextended('wallet-command|' || $1, 0))

-- name: stored_response
SELECT command_type, saga_id, response_type, response
  FROM wallet.processed_messages
 WHERE command_id = $1

-- name: store_response
INSERT INTO wallet.processed_messages (command_id, command_type, saga_id, response_type, response, processed_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())

-- name: debit_party
-- What a debit is decided on, as wallet-api decides a transfer's source (its wallet_with_access):
-- the wallet's record and currency, its account's kind and tier, and whether the requester is
-- a member of that account. No row: no such wallet (wallet-api's record), answered as
-- "membership", as wallet-api answers 404 to a stranger.
SELECT w.currency, w.account_id, a.kind, a.tier,
       EXISTS (SELECT 1 FROM wallet.members m
                WHERE m.bucket = w.bucket AND m.account_id = w.account_id
                  AND m.issuer = $3 AND m.subject = $4) AS member
  FROM wallet.wallets w
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
 WHERE w.bucket = $1 AND w.id = $2

-- name: count_withdrawal
-- The monthly withdrawal limit (migrations/wallet/0011): counted unless the month's total
-- would pass it; nothing written then.
SELECT wallet.count_withdrawal($1, $2, $3, $4, $5, $6, $7)

-- name: return_withdrawal
-- A refunded withdrawal gives back what its debit counted, once.
SELECT wallet.return_withdrawal($1, $2)

-- name: limit_used
-- What an account has used of its withdrawal limit in a month (tests, an operator's question).
SELECT coalesce((SELECT used FROM wallet.limit_usage
                  WHERE bucket = $1 AND account_id = $2 AND month = $3 AND kind = 'withdrawal'
                    AND currency = $4), 0)

-- The batch path (WithdrawalHandler.batch): each statement below does for a whole batch what
-- the ones above do for one command.

-- name: lock_commands
-- lock_command for every command id of a batch, in the order of their lock keys: two batches
-- that share ids take them in the same order and never deadlock. Its own statement, before
-- stored_responses, for the reason lock_command gives.
SELECT count(pg_advisory_xact_lock(k.key))
  FROM (SELECT DISTINCT hashtextextended('wallet-command|' || c, 0) AS key
          FROM unnest($1::text[]) AS c
         ORDER BY 1) AS k

-- name: stored_responses
-- stored_response for each command id of a batch: a probe of the primary key each (LATERAL,
-- OFFSET 0: no plan but that fits). "command_id = ANY ($1)" got a generic plan, made while the
-- table was young and without statistics, that scanned the whole table on every batch.
SELECT r.command_id, r.command_type, r.saga_id, r.response_type, r.response
  FROM unnest($1::text[]) AS i (command_id)
 CROSS JOIN LATERAL (SELECT * FROM wallet.processed_messages
                      WHERE command_id = i.command_id OFFSET 0) AS r

-- name: store_responses
-- Text cast to jsonb: whatever jsonb codec the caller's connection has.
INSERT INTO wallet.processed_messages (command_id, command_type, saga_id, response_type, response, processed_at)
SELECT r.command_id, r.command_type, r.saga_id, r.response_type, r.response::jsonb, clock_timestamp()
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
       AS r (command_id, command_type, saga_id, response_type, response)

-- name: debit_parties
-- debit_party for each debit of a batch, in the arrays' order; a row of nulls where
-- debit_party has no row.
SELECT d.currency, d.account_id, d.kind, d.tier, d.member
  FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY
       AS r (bucket, wallet, issuer, subject, ord)
  LEFT JOIN LATERAL (
        SELECT w.currency, w.account_id, a.kind, a.tier,
               EXISTS (SELECT 1 FROM wallet.members m
                        WHERE m.bucket = w.bucket AND m.account_id = w.account_id
                          AND m.issuer = r.issuer AND m.subject = r.subject) AS member
          FROM wallet.wallets w
          JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
         WHERE w.bucket = r.bucket AND w.id = r.wallet) AS d ON true
 ORDER BY r.ord

-- name: count_withdrawals
-- count_withdrawal for each debit of a batch, one after another in the arrays' order (the
-- subquery's ORDER BY ... OFFSET 0 fixes the order the volatile calls run in; each call sees
-- the earlier calls' counts: two debits of one account add up).
SELECT wallet.count_withdrawal(r.bucket, r.command_id, r.account_id, $4::date, r.currency, r.amount,
                               r.limit_minor) AS counted
  FROM (SELECT * FROM unnest($1::smallint[], $2::text[], $3::text[], $5::text[], $6::bigint[], $7::bigint[])
                      WITH ORDINALITY AS u (bucket, command_id, account_id, currency, amount, limit_minor, ord)
         ORDER BY u.ord OFFSET 0) AS r

-- name: post_batch
-- The ledger's batch posting (its declared API: ledger_api.post_batch, Ledger.batch_arguments,
-- Ledger.answer) in this transaction: refusals are answered, not raised, and a refused posting
-- writes nothing.
SELECT ledger_api.post_batch($1)

-- name: withdrawal_events
-- The merchants' events of withdrawals (migrations/wallet/0016, docs/webhooks.md), in the
-- command's transaction: for each settled (withdrawal.completed) or refunded (withdrawal.failed)
-- withdrawal of a business's wallet; a personal wallet's writes nothing. The resource is the
-- withdrawal (the saga's id, which the business was given when it asked).
INSERT INTO wallet.webhook_events (bucket, id, account_id, type, resource_id, payload, created_at)
SELECT w.bucket, r.event_id, w.account_id, r.type, r.saga_id,
       jsonb_build_object('account_id', w.account_id, 'wallet_id', w.id, 'withdrawal_id', r.saga_id,
                          'transaction_id', r.transaction_id, 'amount_minor', r.amount,
                          'currency', w.currency),
       clock_timestamp()
  FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[])
       AS r (bucket, wallet, type, event_id, saga_id, transaction_id, amount)
  JOIN wallet.wallets w ON w.bucket = r.bucket AND w.id = r.wallet
  JOIN wallet.accounts a ON a.bucket = w.bucket AND a.id = w.account_id
 WHERE a.kind = 'business'

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

-- name: wallet_statement_page
-- A statement page in one round trip where four were (the membership, the ledger's page, its
-- counterparties' transactions, their wallets; issue 26, docs/performance.md), read at one
-- snapshot: whether the wallet exists and the caller is a member of its account (as
-- wallet_with_access), then, for a member only, the page of $5
-- (the purse's account, named by hiwallet.ledger, in the wallet's bucket) after version $6, $7
-- lines at most (the page and one more: there is a next page), each with its counterparty: the
-- first by id of the other customer wallets' accounts its transaction moved money on (not $5, nor
-- another purse of the wallet: $8 its purses' prefix), that wallet's number and its account's
-- kind and name. The same rows as the ledger's statement and counterparties queries and
-- counterparty_wallets. One row without lines (NULL version), else one per line in version order;
-- none for no such wallet. Only the membership of the wallet's columns: each row's columns are
-- decoded by wallet-api, 51 times a page. The counterparty's wallet by its key a line (a LATERAL
-- with LIMIT 1, which the planner does not pull up into a join: as a join, on a small
-- wallet.wallets, its generic plan hashed the counterparty of each line anew and scanned the
-- wallets for it, a third of the page's database CPU on the read bench).
-- $9: the lines whose counterparty wallet-api already holds (element i: the line of version
-- $6 + i; a boolean array, so that its element is found by offset): their counterparty is not
-- looked up (their party columns NULL). Those lookups, four index probes a line, were ~80 % of the
-- page's database CPU; what they find never changes (a line, its transaction's lines and an
-- account's role are never updated; a wallet's number, its account's kind and name are not
-- updatable: migrations/wallet/grants.sql), so wallet-api keeps it (parties.StatementLines).
-- no_party: a line looked up whose transaction moved money on no other customer wallet (as a
-- top-up): its counterparty is none, for good.
SELECT m.member,
       l.version, l.transaction_id, l.type, l.ref, l.amount, l.currency AS line_currency,
       l.balance_after, l.posted_at,
       p.number AS party_number, p.kind AS party_kind, p.name AS party_name,
       c.account_id IS NULL AS no_party
  FROM wallet.wallets w
 CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM wallet.members mm
                                     WHERE mm.bucket = w.bucket AND mm.account_id = w.account_id
                                       AND mm.issuer = $3 AND mm.subject = $4) AS member) m
  LEFT JOIN LATERAL (SELECT l.version, l.transaction_id, l.type, l.ref, l.amount, l.currency,
                            l.balance_after, l.posted_at
                       FROM ledger_api.lines l
                      WHERE m.member AND l.bucket = w.bucket AND l.account_id = $5 AND l.version > $6
                      ORDER BY l.version
                      LIMIT $7) l ON true
  LEFT JOIN LATERAL (SELECT c.account_bucket, c.account_id
                       FROM ledger_api.transaction_wallet_accounts c
                      WHERE NOT coalesce(($9::boolean[])[(l.version - $6)::int], false)
                        AND c.bucket = w.bucket AND c.transaction_id = l.transaction_id
                        AND c.account_id <> $5 AND NOT starts_with(c.account_id, $8)
                      ORDER BY c.account_id
                      LIMIT 1) c ON true
  LEFT JOIN LATERAL (SELECT pw.number, pa.kind, pa.name
                       FROM wallet.wallets pw
                       JOIN wallet.accounts pa ON pa.bucket = pw.bucket AND pa.id = pw.account_id
                      WHERE c.account_id IS NOT NULL AND pw.bucket = c.account_bucket
                        AND pw.id = left(c.account_id, -strpos(reverse(c.account_id), ':'))
                      LIMIT 1) p ON true
 WHERE w.bucket = $1 AND w.id = $2
 ORDER BY l.version

-- name: wallet_statement_known
-- A statement page whose lines wallet-api holds (parties.StatementLines, $6 + 1 to $6 + $7 - 1):
-- whether the wallet exists and the caller is a member of its account (as wallet_with_access),
-- then, for a member only, how many of the lines of $5 after version $6 there are, $7 at most
-- (the page and one more: there is a next page), and the last one's version (wallet-api checks
-- that they are the versions it holds). One row, read at one snapshot; member false for no such
-- wallet. The lines' own columns and their counterparties are not read nor sent: on the read
-- bench that was 51 rows decoded by wallet-api and ~150 µs of the database's CPU a page more
-- than the bare endpoint's one query (issue 26, docs/performance.md).
SELECT m.member, n.lines, n.last
  FROM (SELECT EXISTS (SELECT 1
                         FROM wallet.wallets w
                         JOIN wallet.members mm ON mm.bucket = w.bucket AND mm.account_id = w.account_id
                        WHERE w.bucket = $1 AND w.id = $2 AND mm.issuer = $3 AND mm.subject = $4)
               AS member
        OFFSET 0) m
  LEFT JOIN LATERAL (SELECT count(*) AS lines, max(l.version) AS last
                       FROM (SELECT l.version
                               FROM ledger_api.lines l
                              WHERE m.member AND l.bucket = $1 AND l.account_id = $5 AND l.version > $6
                              ORDER BY l.version
                              LIMIT $7) l) n ON true

-- name: wallet_overview
-- wallet_with_balance's wallet, membership and purses ($1 to $6 as there), and for a member only,
-- in the same round trip where three were (issue 26): the promo account's batches ($6; as the
-- ledger's promo_batches, each a record: id, funded_by, amount, remaining, expires_at,
-- grant_transaction_id, in expiry order) and the cash account's balance at the end of each UTC day
-- from $7 to $8 (as the ledger's daily_balances: its last line before the day's end, one backward
-- probe of lines_by_time a day, which reads that one line (the index ends with the version since
-- migration 0028); 0 before its first), in day order (an ARRAY of the ordered days: an aggregate's
-- own ORDER BY sorted them again in a sort of its own, ~10 µs of the database's CPU a read more).
-- The days before $7, whose balances wallet-api keeps (closed days, parties.ClosedDays), are not
-- asked for: neither probed nor sent (they were a series of 30 days with a null for each kept one).
-- Not the account's kind, tier and name (wallet_with_balance's): the overview shows none of them
-- (the account's row was one more probe, and their decoding a fifth of the overview's own Python).
-- The membership is a subquery evaluated once (OFFSET 0 keeps the planner from pulling it up
-- into the expressions that read it: the member column and the two CASEs each probed
-- wallet.members again, three probes a read).
-- The probes name the cash account by the joined purse's row (c), not by $5: asyncpg prepares
-- each statement once, and after five runs PostgreSQL keeps the generic plan only if its
-- estimate is not above the custom plans' (planned with the values). The day series counts as
-- 1,000 rows in either plan (generate_series over timestamps has no row estimate), so any
-- difference in the estimate of one probe by $5 (a literal account's statistics against the
-- average account's) weighed 1,000 times, and on the read bench's fresh ledger the custom plan
-- won every time: each overview planned anew, ~0.85 ms of the database's CPU for ~0.1 of work
-- (issue 26, docs/performance.md). By a column, a probe's estimate is the same in both plans, and
-- tests/wallet_api/test_read_plans.py checks that the generic plan is kept.
SELECT w.id, w.bucket, w.account_id, w.currency, w.number, w.created_at,
       m.member,
       c.currency AS cash_currency, c.balance AS cash, c.held AS held,
       p.balance AS promo, p.expired AS promo_expired,
       CASE WHEN m.member THEN
           (SELECT array_agg((b.id, b.funded_by, b.amount, b.remaining, b.expires_at,
                              b.grant_transaction_id) ORDER BY b.expires_at, b.id)
              FROM ledger_api.promo_batches b
             WHERE b.bucket = w.bucket AND b.account_id = $6)
       END AS batches,
       CASE WHEN m.member THEN
           ARRAY(SELECT coalesce(
                            (SELECT l.balance_after FROM ledger_api.lines l
                              WHERE l.bucket = c.bucket AND l.account_id = c.id
                                AND l.posted_at < (d.day + interval '1 day') AT TIME ZONE 'UTC'
                              ORDER BY l.posted_at DESC, l.version DESC
                              LIMIT 1), 0)
                   FROM generate_series($7::date::timestamp, $8::date::timestamp, interval '1 day') AS d (day)
                  ORDER BY d.day)
       END AS days
  FROM wallet.wallets w
 CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM wallet.members mm
                                     WHERE mm.bucket = w.bucket AND mm.account_id = w.account_id
                                       AND mm.issuer = $3 AND mm.subject = $4) AS member
                     OFFSET 0) m
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

-- The ledger's reads behind a statement page's counterparties and a wallet's daily balances, in
-- fewer index tuples and executor nodes a probe (issue 26, docs/performance.md: on the read
-- bench's ledger of 100,000 lines, EXPLAIN (ANALYZE, BUFFERS) and the backends' CPU a call). The
-- same rows as before.

-- lines_by_time with the line's version after its time: the ledger's "last line of an account
-- before a time" (daily_balances, balance_as_of, wallet-api's overview: ORDER BY posted_at DESC,
-- version DESC LIMIT 1; the nostro's movements in posting order) is then the index's own order,
-- one index tuple and one line read. With posted_at alone the version was sorted after the
-- index scan (a top-N sort), which reads every line of the account before that time: the
-- overview of a wallet with 121 lines today read and sorted the 121 for today's balance. The
-- same number of indexes on ledger.lines (a posting writes no more), each entry 8 bytes longer.
-- Built in the migration's transaction (CONCURRENTLY cannot be): on a grown ledger, postings wait
-- for the build, as for any index a migration makes.
DROP INDEX ledger.lines_by_time;
CREATE INDEX lines_by_time ON ledger.lines (bucket, account_id, posted_at, version);

-- A transaction's wallet accounts: its lines in the buckets it lists found by one probe of
-- lines_by_transaction with the bucket among the listed ones (a scalar array key: one index
-- scan node a transaction), where an unnest of the buckets joined to a probe a bucket was (a
-- function scan, a nested loop and a rescanned index scan a bucket, for each line of a
-- statement page). The same columns and rows, each once (a bucket listed twice in a
-- transaction's buckets gave its lines twice; the page takes the first account by id, as before).
CREATE OR REPLACE VIEW ledger_api.transaction_wallet_accounts AS
SELECT t.bucket, t.id AS transaction_id, l.bucket AS account_bucket, l.account_id
  FROM ledger.transactions t
  JOIN ledger.lines l ON l.bucket = ANY (t.buckets) AND l.transaction_id = t.id
  JOIN ledger.accounts a ON a.bucket = l.bucket AND a.id = l.account_id
 WHERE a.role = 'user_wallet';

-- A wallet's purses in the ledger's SQL interface (ledger_api, migration 0015), so that a
-- service reads a wallet's balances in the same statement as its own check of who may see them:
-- wallet-api's GET /v1/wallets/{id} (and its overview) was two round trips, the membership and
-- the ledger's wallet_balance, and a round trip was most of wallet-api's CPU a read (issue 26,
-- docs/performance.md). The same columns and the same expired part as the ledger's own
-- wallet_balance query (src/hiwallet/ledger/sql/queries.sql): what promo batches past their
-- expiry still hold until the expiry job returns it, which a shown balance leaves out.
--
-- Plain, as the other views here (no security_barrier): the planner inlines it, so a read of one
-- account through it is the probe of ledger.accounts' key it was, and the batches' sum is a
-- subplan run for a promo account only. The purse and the role as text: the enums are the
-- ledger's.
CREATE VIEW ledger_api.wallet_purses AS
SELECT a.bucket, a.id, a.purse::text AS purse, a.currency, a.balance, a.held,
       CASE WHEN a.purse = 'promo' THEN
           (SELECT coalesce(sum(b.remaining), 0) FROM ledger.promo_batches b
             WHERE b.bucket = a.bucket AND b.account_id = a.id AND b.remaining > 0
               AND b.expires_at <= clock_timestamp())
       ELSE 0 END AS expired
  FROM ledger.accounts a;

-- Many customer accounts opened in one statement (issue 26: the growth loader opens a million
-- wallets; ledger.open_account is a call and a round trip an account, three statements a
-- wallet). The same row for each account as ledger.open_account (0009) gives it: the same
-- columns and values, an account already there left as it is. Sorted by key, so that two
-- callers opening overlapping sets wait for each other in one order rather than deadlock.
-- SECURITY DEFINER and the search path are set by grants.sql, as for ledger.open_account.
CREATE FUNCTION ledger.open_accounts(
    p_buckets smallint[], p_ids text[], p_purses text[], p_currency text, p_owner text
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ledger.accounts (bucket, id, role, purse, currency, owner, created_at)
    SELECT a.bucket, a.id, 'user_wallet', a.purse::ledger.purse, p_currency, p_owner, clock_timestamp()
      FROM unnest(p_buckets, p_ids, p_purses) AS a (bucket, id, purse)
     ORDER BY a.bucket, a.id
    ON CONFLICT (bucket, id) DO NOTHING
$$;

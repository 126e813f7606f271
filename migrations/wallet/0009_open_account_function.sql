-- A wallet's accounts are opened through a function, not by an INSERT of the caller's: the
-- application role may not write ledger.accounts (grants.sql), so that a compromised service
-- cannot set a balance, only open an empty customer account as the ledger's rules allow. The
-- same statement as the store's former open_account query; SECURITY DEFINER and the search
-- path are set by grants.sql, applied after every migrate.
CREATE FUNCTION ledger.open_account(
    p_bucket smallint, p_id text, p_purse text, p_currency text, p_owner text
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO ledger.accounts (bucket, id, role, purse, currency, owner, created_at)
    VALUES (p_bucket, p_id, 'user_wallet', p_purse::ledger.purse, p_currency, p_owner, clock_timestamp())
    ON CONFLICT (bucket, id) DO NOTHING
$$;

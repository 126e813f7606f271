-- Retention of the bank's callbacks (issue 11). A callback's body holds the transfer's
-- destination IBAN, personal data kept no longer than it serves: once its outcome is on the
-- transfer (applied_at), the inbox row is only a record of what the bank sent, deleted after
-- the retention (bank-adapter's retention job, in bounded batches). What the transfer became
-- stays in bank.transfers. A callback still waiting for its transfer (applied_at NULL) is never
-- deleted: that would lose an outcome.
--
-- The application role deletes inbox rows only through this function (grants.sql: a writer,
-- SECURITY DEFINER); at least a day is always kept, whatever the caller asks.
CREATE FUNCTION bank.purge_inbox(p_older_than interval, p_batch integer) RETURNS integer
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM bank.inbox
         WHERE id IN (SELECT id FROM bank.inbox
                       WHERE applied_at IS NOT NULL
                         AND received_at < now() - greatest(p_older_than, interval '1 day')
                       ORDER BY id
                       LIMIT least(greatest(p_batch, 0), 10000)
                         FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

-- Who may do what in the bank database (issue 11; as migrations/topup/grants.sql).
--
-- Not a numbered migration: `hiwallet migrate` applies this file after every run, in one
-- transaction; it starts from nothing and grants exactly what is needed. Roles (made by
-- migrate): :"app_role" for bank-adapter and bank-webhook, :"readonly_role" for reports.
-- tests/bank/test_roles.py holds the full list of what each role may do.
--
-- What a compromised bank-adapter or bank-webhook must not do: announce a transfer's outcome
-- (BankTransferSucceeded settles a withdrawal, BankTransferFailed refunds one) without a
-- transfer record behind it, change a transfer's outcome once recorded, erase a transfer, or
-- drop an announcement before it was sent. So it writes transfers, inbox and outbox only
-- through the functions below, and touches the outbox only as the relay must: claim rows (FOR
-- UPDATE needs an UPDATE privilege), mark them sent, delete sent ones (a trigger refuses an
-- unsent one). processed_events is core's Consumer's own record (claim, outcome).

-- 1. Nothing for anyone but the owner.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA bank FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL TABLES IN SCHEMA bank, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA bank, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA bank FROM PUBLIC, :"app_role", :"readonly_role";

-- 2. Reading: every table of the schema (the handler looks a transfer up, the reconciliation
--    lists pending ones, the metrics count, the relay reads the outbox).
GRANT USAGE ON SCHEMA bank TO :"app_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA bank TO :"app_role", :"readonly_role";
GRANT SELECT ON public.schema_migrations TO :"readonly_role";

-- 3. The relay (core/outbox.py): claim due rows, mark them sent, purge sent ones.
GRANT UPDATE (sent_at), DELETE ON bank.outbox TO :"app_role";

-- 4. The consumer (core/consumer.py): its record of what it handled.
GRANT INSERT, UPDATE (outcome) ON bank.processed_events TO :"app_role";

-- 5. Everything else is written by these functions, as the owner (SECURITY DEFINER, the search
--    path pinned so that nothing the caller creates can stand in for what they name). Listed
--    by name, every overload; a name that no longer exists stops migrate. bank.announce,
--    bank.apply_outcome, bank.lock_reference and bank.lock_references are theirs alone:
--    granted to nobody.
DO $$
DECLARE
    writers CONSTANT text[] := ARRAY['bank.record_transfer', 'bank.record_transfers',
                                     'bank.receive_callback', 'bank.receive_callbacks',
                                     'bank.reconcile_transfer', 'bank.republish_outcome',
                                     'bank.purge_inbox', 'bank.record_statement'];
    internal CONSTANT text[] := ARRAY['bank.announce', 'bank.apply_outcome', 'bank.lock_reference',
                                      'bank.lock_references'];
    missing text;
    f regprocedure;
BEGIN
    SELECT string_agg(w, ', ') INTO missing
      FROM unnest(writers || internal) AS w
     WHERE NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname || '.' || p.proname = w);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'grants.sql names functions that do not exist: %', missing;
    END IF;
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname || '.' || p.proname = ANY (writers)
         ORDER BY p.oid::regprocedure::text
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, bank, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, :'app_role');
    END LOOP;
    -- The internal ones run inside a writer (as the owner already); pinned all the same.
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname || '.' || p.proname = ANY (internal)
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, bank, pg_temp', f);
    END LOOP;
END $$;

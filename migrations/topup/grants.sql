-- Who may do what in the top-up database (issue 10; as migrations/wallet/grants.sql).
--
-- Not a numbered migration: `hiwallet migrate` applies this file after every run, in one
-- transaction; it starts from nothing and grants exactly what is needed. Roles (made by
-- migrate): :"app_role" for topup-webhook, :"readonly_role" for reports.
-- tests/core/test_roles.py holds the full list of what each role may do.
--
-- What a compromised topup-webhook must not do: announce a top-up (a TopupRecorded credits a
-- wallet) without a payment record behind it, change or erase a payment record, or drop an
-- announcement before it was sent. So it writes the inbox, the payments and the outbox only
-- through topup.ingest and topup.ingest_batch (topup.ingest for many in one statement; they append
-- to a payment's reported_by and routes and change nothing else), deletes inbox rows only through topup.purge_inbox (processed rows older than
-- a day), and may touch the outbox only as the relay must: claim rows (FOR UPDATE needs an
-- UPDATE privilege), mark them sent, delete sent ones (a trigger refuses an unsent one).

-- 1. Nothing for anyone but the owner.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA topup FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL TABLES IN SCHEMA topup, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA topup, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA topup FROM PUBLIC, :"app_role", :"readonly_role";

-- 2. Reading: every table of the schema (the reconciliation asks which payments exist, the
--    metrics count rows, the relay reads the outbox).
GRANT USAGE ON SCHEMA topup TO :"app_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA topup TO :"app_role", :"readonly_role";
GRANT SELECT ON public.schema_migrations TO :"readonly_role";

-- 3. The relay (core/outbox.py): claim due rows, mark them sent, purge sent ones.
GRANT UPDATE (sent_at), DELETE ON topup.outbox TO :"app_role";

--    A payout and its SettlementReported only together, once (topup.record_settlement).
-- 4. Everything else is written by these functions, as the owner (SECURITY DEFINER, the search
--    path pinned so that nothing the caller creates can stand in for what they name). Listed
--    by name, every overload; a name that no longer exists stops migrate.
DO $$
DECLARE
    writers CONSTANT text[] := ARRAY['topup.ingest', 'topup.ingest_batch', 'topup.purge_inbox',
                                       'topup.record_settlement'];
    missing text;
    f regprocedure;
BEGIN
    SELECT string_agg(w, ', ') INTO missing
      FROM unnest(writers) AS w
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
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, topup, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, :'app_role');
    END LOOP;
END $$;

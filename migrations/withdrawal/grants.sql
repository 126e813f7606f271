-- Who may do what in the withdrawal database (issue 11; as migrations/topup/grants.sql).
--
-- Not a numbered migration: `hiwallet migrate` applies this file after every run, in one
-- transaction; it starts from nothing and grants exactly what is needed. Roles (made by
-- migrate): :"app_role" for withdrawal-orchestrator, :"readonly_role" for reports.
-- tests/withdrawals/test_roles.py holds the full list of what each role may do.
--
-- What a compromised orchestrator must not do: rewrite what a customer asked for, move a saga
-- along a path the diagram does not have, forge or erase the saga's history, or send a command
-- the saga does not stand behind (the triggers of 0001_withdrawal.sql refuse those whatever
-- the privileges). Beyond that it writes what its work needs: sagas (new ones; the columns that
-- change with the state), the idempotency records (and their purge), the outbox (enqueue, and
-- what the relay does: claim, mark sent, delete sent), and processed_events (the consumer).

-- 1. Nothing for anyone but the owner.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA withdrawal FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL TABLES IN SCHEMA withdrawal, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA withdrawal, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA withdrawal FROM PUBLIC, :"app_role", :"readonly_role";

-- 2. Reading: every table of the schema.
GRANT USAGE ON SCHEMA withdrawal TO :"app_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA withdrawal TO :"app_role", :"readonly_role";
GRANT SELECT ON public.schema_migrations TO :"readonly_role";

-- 3. The saga: created (initiated, the trigger checks), then only the columns that move with
--    its state. What was asked (wallet, amount, currency, IBAN, requester) has no UPDATE grant
--    (and the guard trigger refuses a change of it even to the owner).
GRANT INSERT ON withdrawal.sagas TO :"app_role";
GRANT UPDATE (state, state_actor, fee_minor, debit_transaction_id, bank_reference, reason, reason_detail,
              reviewed_by, state_changed_at, last_command, last_published_at, republished)
    ON withdrawal.sagas TO :"app_role";

-- 4. Idempotency records: written with the saga, purged after the retention.
GRANT INSERT, DELETE ON withdrawal.idempotency_keys TO :"app_role";

-- 5. The outbox: enqueue (the guard trigger checks each command against its saga); the relay
--    (core/outbox.py) claims rows (FOR UPDATE needs an UPDATE privilege), marks them sent,
--    deletes sent ones (a trigger refuses an unsent one).
GRANT INSERT, UPDATE (sent_at), DELETE ON withdrawal.outbox TO :"app_role";

-- 6. The results consumer's record of what it processed (core/consumer.py).
GRANT INSERT, UPDATE (outcome) ON withdrawal.processed_events TO :"app_role";

-- 7. The history is written by the database alone: the trigger function runs as the owner (the
--    application role has no INSERT on transitions), its search path pinned. A trigger
--    function needs no EXECUTE grant to fire.
ALTER FUNCTION withdrawal.sagas_history() SECURITY DEFINER SET search_path = pg_catalog, withdrawal, pg_temp;

-- 8. The functions of 0002 (a batch's changes of state, a request in one statement): SECURITY
--    INVOKER on purpose, unlike the history's writer: they write as the application role, with
--    its privileges above and through the same triggers, so they may do nothing the role could
--    not do statement by statement; they only save round trips. Their search path pinned all
--    the same. Listed by name, every overload; a name that no longer exists stops migrate.
DO $$
DECLARE
    writers CONSTANT text[] := ARRAY['withdrawal.move_sagas', 'withdrawal.request', 'withdrawal.iso_utc'];
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
        EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER SET search_path = pg_catalog, withdrawal, pg_temp', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, :'app_role');
    END LOOP;
END $$;

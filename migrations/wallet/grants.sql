-- Who may do what in a wallet database (docs/ledger.md, "Who may write").
--
-- Not a numbered migration: `hiwallet migrate` applies this file after every run, in one
-- transaction, so that what it says holds whatever the migrations did (CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER and SET clauses; a new table or function starts with the
-- defaults). It starts from nothing and grants exactly what is needed, so it is idempotent and
-- a grant taken out here is taken away on the next migrate. Roles (made by migrate: core/db.py
-- app_role, SERVICE_ROLES): :"app_role" for wallet-api (and the ledger's and business operator
-- commands), :"wallet_consumer_role" for wallet-consumer (and its operator commands), each with
-- its own records and nothing of the other's, and :"readonly_role" for verify and reports.
-- The owner (who migrates) owns every object; tests/core/test_roles.py holds the full list of
-- what each role may do and fails on anything more.

-- 1. Nothing for anyone but the owner: not PUBLIC's defaults (EXECUTE on every function,
--    CREATE on public before PostgreSQL 15), nor any earlier grant.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA ledger, ledger_api, wallet
    FROM PUBLIC, :"app_role", :"wallet_consumer_role", :"merchant_webhooks_role", :"readonly_role";
REVOKE ALL ON ALL TABLES IN SCHEMA ledger, ledger_api, wallet, public
    FROM PUBLIC, :"app_role", :"wallet_consumer_role", :"merchant_webhooks_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA ledger, ledger_api, wallet, public
    FROM PUBLIC, :"app_role", :"wallet_consumer_role", :"merchant_webhooks_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ledger, ledger_api, wallet
    FROM PUBLIC, :"app_role", :"wallet_consumer_role", :"merchant_webhooks_role", :"readonly_role";

-- 2. Reading the ledger: every table, for the ledger's own code (hiwallet.ledger), which runs
--    on each service's connection; and its SQL interface (ledger_api, migration 0015), which
--    is all the services' own statements name of it (tests/test_ledger_boundary.py). The line
--    hash is a pure function that verify's queries call (a SQL function is inlined only where
--    it may be executed). The read-only role reads everything.
GRANT USAGE ON SCHEMA ledger, ledger_api, wallet TO :"app_role", :"wallet_consumer_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA ledger, ledger_api
    TO :"app_role", :"wallet_consumer_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA wallet TO :"readonly_role";
GRANT SELECT ON public.schema_migrations TO :"readonly_role";
GRANT EXECUTE ON FUNCTION ledger.line_hash TO :"app_role", :"readonly_role";

-- 3. wallet-api's own records, written by its statements (src/hiwallet/wallet_api/sql/
--    queries.sql): accounts opened and their tier set (SELECT ... FOR UPDATE needs UPDATE on
--    a column), members and wallets added, idempotency records stored and purged. Never a
--    stored answer rewritten, an account's kind changed, or anything deleted but expired
--    records. wallet.limit_usage is written only by wallet.transfer_batch and the withdrawal
--    functions (below); both services read it (a customer's limits, an operator's question).
GRANT SELECT ON wallet.accounts, wallet.members, wallet.identity_accounts, wallet.wallets,
    wallet.idempotency_keys, wallet.limit_usage TO :"app_role";
GRANT INSERT, UPDATE (tier, updated_at) ON wallet.accounts TO :"app_role";
GRANT INSERT ON wallet.members, wallet.identity_accounts, wallet.wallets TO :"app_role";
GRANT INSERT, DELETE ON wallet.idempotency_keys TO :"app_role";

-- 3b. wallet-consumer's records (src/hiwallet/wallet_consumer): each message it handled, in
--     the transaction of its effect (core.consumer: inserted, then its outcome stored), and the
--     top-ups it could not attribute, later attributed once by an operator (the columns of the
--     attribution only; a trigger refuses changing them once set). Nothing deleted, no
--     top-up's amount, payment or reason rewritten. (processed_events is in public, where
--     core's Consumer finds it: SELECT for its ON CONFLICT and for reports.)
GRANT SELECT, INSERT, UPDATE (outcome) ON public.processed_events TO :"wallet_consumer_role";
GRANT SELECT ON public.processed_events TO :"readonly_role";
GRANT SELECT, INSERT, UPDATE (attributed_wallet, attributed_by, attributed_at) ON wallet.unattributed_topups
    TO :"wallet_consumer_role";

-- 3c. wallet-consumer's withdrawal commands (migrations/wallet/0011): each command's response,
--     stored once and never changed (a trigger refuses UPDATE and DELETE), and the outbox as
--     the relay needs it: rows written in the command's transaction, claimed (FOR UPDATE
--     needs an UPDATE privilege), marked sent, sent ones purged (a trigger refuses an unsent
--     one). The monthly withdrawal limit is written only by wallet.count_withdrawal and
--     wallet.return_withdrawal (below).
GRANT SELECT, INSERT ON wallet.processed_messages TO :"wallet_consumer_role";
GRANT SELECT, INSERT, UPDATE (sent_at), DELETE ON wallet.outbox TO :"wallet_consumer_role";
GRANT SELECT ON wallet.withdrawal_counts, wallet.limit_usage TO :"wallet_consumer_role";
--     The providers' payouts (migrations/wallet/0020): each top-up settled, once, nothing
--     changed or deleted (what did not match is a finding of the books: 3f below).
GRANT SELECT, INSERT ON wallet.settled_topups TO :"wallet_consumer_role";
--     Of wallet-api's records, wallet-consumer reads what a top-up and a debit are decided on
--     (src/hiwallet/wallet_consumer/sql: a wallet's currency, account and whether it is
--     closed; the account's kind and tier; whether the requester is a member), column by
--     column, and writes nothing.
GRANT SELECT (bucket, id, account_id, currency, closed_at) ON wallet.wallets TO :"wallet_consumer_role";
GRANT SELECT (bucket, id, kind, tier) ON wallet.accounts TO :"wallet_consumer_role";
GRANT SELECT (bucket, account_id, issuer, subject) ON wallet.members TO :"wallet_consumer_role";

-- 3d. wallet-api's staff money (migrations/wallet/0013): campaigns created and their budget
--     spent (remaining_minor only), each campaign grant recorded; programmes proposed, decided
--     once and spent (triggers refuse changing a decision or the terms); goodwill credits
--     requested and approved (a trigger refuses changing a posted one or the request); each
--     employee's daily usage added to. Nothing deleted.
GRANT SELECT ON wallet.campaigns, wallet.campaign_grants, wallet.promo_programmes,
    wallet.promo_programme_receivers, wallet.goodwill_credits, wallet.staff_daily_usage TO :"app_role";
GRANT INSERT, UPDATE (remaining_minor) ON wallet.campaigns TO :"app_role";
GRANT INSERT ON wallet.campaign_grants TO :"app_role";
GRANT INSERT, UPDATE (status, remaining_minor, decided_by, decided_at, decision_reason)
    ON wallet.promo_programmes TO :"app_role";
GRANT INSERT, UPDATE (granted_minor) ON wallet.promo_programme_receivers TO :"app_role";
GRANT INSERT, UPDATE (status, approved_by, approved_at, transaction_id) ON wallet.goodwill_credits
    TO :"app_role";
GRANT INSERT, UPDATE (used) ON wallet.staff_daily_usage TO :"app_role";

-- 3d'. The Contracted tier's records (migrations/wallet/0018): wallet-api inserts one with the
--     raise; nothing changes or deletes them.
GRANT SELECT, INSERT ON wallet.account_contracts TO :"app_role";

-- 3e. The merchants' webhooks (migrations/wallet/0016, docs/webhooks.md). wallet-api: the
--     endpoints its members register (no delete of anything else), and the events of its
--     movements (payment.received in the statement of wallet.transfer_batch, payment.refunded
--     and promo.granted in their posting's transaction), which it never changes; it reads the
--     deliveries and their attempts (listing) and re-queues one (replay: its status and
--     schedule only). wallet-consumer: the withdrawals' events, written in the command's
--     transaction, nothing else. merchant-webhooks: it reads the events and the endpoints,
--     marks events dispatched, disables a failing endpoint (its state columns only) and adds
--     endpoint.disabled events, makes and updates deliveries and records attempts, and deletes
--     them all past the retention (migration 0017); nothing of the ledger, nothing of
--     wallet-api's other records.
GRANT SELECT, INSERT, DELETE, UPDATE (url, event_types, description, enabled, disabled_reason,
    disabled_at, secret_sealed, previous_secret_sealed, previous_secret_until, failing_since, updated_at)
    ON wallet.webhook_endpoints TO :"app_role";
GRANT SELECT, INSERT ON wallet.webhook_events TO :"app_role";
GRANT SELECT, UPDATE (status, attempts, next_attempt_at, updated_at) ON wallet.webhook_deliveries
    TO :"app_role";
GRANT SELECT ON wallet.webhook_attempts TO :"app_role";
GRANT INSERT ON wallet.webhook_events TO :"wallet_consumer_role";
GRANT USAGE ON SCHEMA wallet TO :"merchant_webhooks_role";
GRANT SELECT, UPDATE (enabled, disabled_reason, disabled_at, failing_since, updated_at)
    ON wallet.webhook_endpoints TO :"merchant_webhooks_role";
GRANT SELECT, INSERT, DELETE, UPDATE (dispatched_at) ON wallet.webhook_events TO :"merchant_webhooks_role";
GRANT SELECT, INSERT, DELETE, UPDATE (status, attempts, next_attempt_at, last_status_code, last_error,
    updated_at, delivered_at) ON wallet.webhook_deliveries TO :"merchant_webhooks_role";
GRANT SELECT, INSERT, DELETE ON wallet.webhook_attempts TO :"merchant_webhooks_role";

-- 3f. Reconciliation (migrations/wallet/0019, src/hiwallet/reconciliation): wallet-consumer's
--     jobs record findings (a new one, or the open one's details and last_seen_at refreshed),
--     resolve those no longer found, and upsert the daily summary; verify runs as a job there
--     (it calls the line hash). wallet-api's staff list and resolve findings, run a round on
--     demand (the same statements) and read the summary. Nothing deleted (a trigger refuses),
--     a resolution never rewritten (the same trigger).
GRANT SELECT, INSERT, UPDATE (details, last_seen_at, status, resolved_by, resolution_note, resolved_at)
    ON wallet.reconciliation_findings TO :"wallet_consumer_role", :"app_role";
GRANT SELECT, INSERT, UPDATE (transactions, volume_in_minor, volume_out_minor, fees_minor, computed_at)
    ON wallet.daily_summary TO :"wallet_consumer_role";
GRANT SELECT ON wallet.daily_summary TO :"app_role";
--     Of wallet-api's records, the summary reads which accounts are businesses' and their
--     wallets (the columns above: bucket, id, kind; bucket, id, account_id, currency).
GRANT EXECUTE ON FUNCTION ledger.line_hash TO :"wallet_consumer_role";
--     The bank's statements (migrations/wallet/0021): kept once by wallet-consumer's settlement
--     of the bank's day, never changed; read by the round (wallet-consumer's job, wallet-api's
--     on demand), which also reads which wires each statement settled.
GRANT SELECT, INSERT ON wallet.bank_statements, wallet.bank_statement_lines TO :"wallet_consumer_role";
GRANT SELECT ON wallet.bank_statements, wallet.bank_statement_lines, wallet.settled_topups TO :"app_role";

-- 4. The ledger is written only by its functions, which check what they write: a service
--    may call those it needs and nothing else that writes. SECURITY DEFINER: they run as the
--    owner, whatever the caller may do itself. The search path is pinned so that nothing the
--    caller creates or sets can stand in for a table, type, function or operator they name
--    (pg_temp last: never searched before the schemas); a service's function's path leaves
--    the ledger out, so that an unqualified name in it cannot reach past ledger_api either
--    (tests/test_ledger_boundary.py). Listed by name, every overload, with
--    who may call them: a migration that changes a signature keeps them, and a name listed
--    here that no longer exists stops migrate rather than lose its guard silently.
--    wallet-api: its transfers, the ledger's use cases it runs (hiwallet.ledger: post, holds,
--    opening accounts). wallet-consumer: the posting path (the ledger's code for a top-up or a
--    refund, its own statements through ledger_api) and the withdrawal limit's functions.
DO $$
DECLARE
    writers CONSTANT text[][] := ARRAY[
        ['ledger.post', 'app'],
        ['ledger.post_batch', 'both'],
        ['ledger.place_hold', 'app'],
        ['ledger.release_hold', 'app'],
        ['ledger.ensure_system_accounts', 'app'],
        ['ledger.open_account', 'app'],
        ['ledger.open_accounts', 'app'],
        ['ledger_api.post_batch', 'both'],
        ['wallet.transfer_batch', 'app'],
        ['wallet.count_withdrawal', 'consumer'],
        ['wallet.return_withdrawal', 'consumer']];
    missing text;
    f record;
BEGIN
    SELECT string_agg(writers[i][1], ', ') INTO missing
      FROM generate_subscripts(writers, 1) AS i
     WHERE NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname || '.' || p.proname = writers[i][1]);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'grants.sql names functions that do not exist: %', missing;
    END IF;
    FOR f IN
        SELECT p.oid::regprocedure AS proc, n.nspname AS schema, writers[i][2] AS callers
          FROM generate_subscripts(writers, 1) AS i
          JOIN pg_proc p ON true JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname || '.' || p.proname = writers[i][1]
         ORDER BY p.oid::regprocedure::text
    LOOP
        IF f.schema = 'wallet' THEN
            EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, wallet, pg_temp', f.proc);
        ELSE
            EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, ledger, wallet, pg_temp', f.proc);
        END IF;
        IF f.callers IN ('app', 'both') THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.proc, :'app_role');
        END IF;
        IF f.callers IN ('consumer', 'both') THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.proc, :'wallet_consumer_role');
        END IF;
    END LOOP;
END $$;

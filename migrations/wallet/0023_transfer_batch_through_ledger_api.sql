-- wallet-api's transfers post through the ledger's declared SQL interface (ledger_api,
-- migrations 0015 and 0022), no longer through the ledger's own schema: wallet.transfer_batch as
-- in 0008, but for the type of its postings' argument (ledger_api.posting_in[], a domain over
-- the ledger's posting type: the same values) and its two calls of the ledger's batch posting,
-- now ledger_api.post_batch (which calls the ledger's in the same transaction and answers the
-- same). Nothing else changes: the answers and their order, the locks and their order, what is
-- written. The argument's type changes, so the function is dropped and made again (its grant,
-- SECURITY DEFINER and search path are grants.sql's, applied after every migrate). Dropped by
-- its name alone (it has no overload), so that this file names nothing of the ledger's schema
-- (tests/test_ledger_boundary.py).
DROP FUNCTION wallet.transfer_batch;

CREATE FUNCTION wallet.transfer_batch(
    -- per transfer: the key and its record
    w_buckets smallint[], w_scopes text[], w_keys text[], w_locks bigint[], w_hashes bytea[],
    -- per transfer: what wallet-api decided on
    w_issuers text[], w_subjects text[], w_src_accounts text[], w_src_tiers text[],
    w_dst_buckets smallint[], w_dst_accounts text[], w_dst_tiers text[],
    -- per transfer: the monthly limit (kind null: none applies) and the view
    w_months date[], w_limit_kinds text[], w_limit_locks bigint[], w_currencies text[],
    w_amounts bigint[], w_limits bigint[], w_views jsonb[],
    -- ledger_api.post_batch's argument: one posting per transfer
    p_postings ledger_api.posting_in[]
) RETURNS jsonb[] LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    n         int := coalesce(array_length(w_keys, 1), 0);
    busy      boolean[] := '{}';  -- per transfer: its key is held (elsewhere, or earlier here)
    held      bigint[] := '{}';   -- the keys this batch holds
    answers   jsonb[];            -- per transfer: null while it goes on
    live      int[];              -- transfers still going, in order
    seen_src  text[] := '{}';
    retried   boolean := false;
    locks     bigint[] := '{}';   -- the live transfers' monthly limits' locks
    totals    bigint[];           -- per live transfer: the month's total with it (null: no limit)
    over      boolean := false;
    posted    jsonb[];
    i int;
    j int;
BEGIN
    IF n = 0 THEN
        RETURN '{}';
    END IF;

    -- 1. Each key's lock, which never waits. A second request with a key in this batch, or one
    --    whose first request runs in another transaction, is still running (the lock is
    --    re-entrant within a transaction, so the batch checks its own keys itself). Plain
    --    expressions in a loop: cheaper than a statement.
    FOR i IN 1 .. n LOOP
        busy[i] := w_locks[i] = ANY (held) OR NOT pg_try_advisory_xact_lock(w_locks[i]);
        IF busy[i] IS NOT TRUE THEN
            held := held || w_locks[i];
        END IF;
    END LOOP;

    -- 2. Stored answers and what wallet-api decided on (membership, tiers), for every transfer
    --    in one statement. Each statement of a VOLATILE function takes a new snapshot (READ
    --    COMMITTED): this one follows every key's lock, so it sees a first request that
    --    committed before this one got the key. The probes are scalar subqueries, one index
    --    probe per transfer whatever the batch's size (as in 0006). The rows come from
    --    generate_subscripts, whose row estimate does not depend on the arrays, so the plan
    --    cache keeps one generic plan (over unnest it planned every call again: 140 µs).
    answers := ARRAY(
        SELECT CASE WHEN busy[x] THEN '{"in_progress": true}'::jsonb
               ELSE coalesce(
                   (SELECT CASE WHEN k.request_hash <> w_hashes[x] THEN '{"reused": true}'::jsonb
                                ELSE jsonb_build_object('stored', jsonb_build_object(
                                    'status', k.status, 'body', k.body, 'posted', k.posted)) END
                      FROM wallet.idempotency_keys k
                     WHERE k.bucket = w_buckets[x] AND k.scope = w_scopes[x] AND k.key = w_keys[x]),
                   CASE WHEN (SELECT true FROM wallet.members m
                               WHERE m.bucket = w_buckets[x] AND m.account_id = w_src_accounts[x]
                                 AND m.issuer = w_issuers[x] AND m.subject = w_subjects[x]) IS NULL
                             OR (SELECT a.tier FROM wallet.accounts a
                                  WHERE a.bucket = w_buckets[x] AND a.id = w_src_accounts[x])
                                IS DISTINCT FROM w_src_tiers[x]
                             OR (SELECT a.tier FROM wallet.accounts a
                                  WHERE a.bucket = w_dst_buckets[x] AND a.id = w_dst_accounts[x])
                                IS DISTINCT FROM w_dst_tiers[x]
                        THEN '{"stale": true}'::jsonb END) END
          FROM generate_subscripts(w_keys, 1) AS x
         ORDER BY x);
    live := array_positions(answers, NULL);
    -- A second transfer of a source account among those still going answers "retry" (the
    -- caller's batching keeps them apart).
    FOREACH i IN ARRAY live LOOP
        IF w_src_accounts[i] = ANY (seen_src) THEN
            answers[i] := '{"retry": true}';
            retried := true;
        ELSE
            seen_src := seen_src || w_src_accounts[i];
            IF w_limit_kinds[i] IS NOT NULL THEN
                locks := locks || w_limit_locks[i];
            END IF;
        END IF;
    END LOOP;
    IF retried THEN
        live := array_positions(answers, NULL);
    END IF;
    IF cardinality(live) = 0 THEN
        RETURN answers;
    END IF;

    -- 3. Monthly limits: each limited account's lock, in key order (one needs no sorting), so
    --    two requests at a limit are decided one after the other; then, in the next statement
    --    (a snapshot taken under the locks), the month's total with each transfer. Totals over
    --    their limit are rare: they are answered here and the others go on.
    IF cardinality(locks) > 0 THEN
        IF cardinality(locks) = 1 THEN
            PERFORM pg_advisory_xact_lock(locks[1]);
        ELSE
            PERFORM pg_advisory_xact_lock(l.key)
               FROM (SELECT key FROM unnest(locks) AS key ORDER BY 1) AS l;
        END IF;
        totals := ARRAY(
            SELECT CASE WHEN w_limit_kinds[live[o]] IS NOT NULL THEN
                       coalesce((SELECT u.used FROM wallet.limit_usage u
                                  WHERE u.bucket = w_buckets[live[o]]
                                    AND u.account_id = w_src_accounts[live[o]]
                                    AND u.month = w_months[live[o]]
                                    AND u.kind = w_limit_kinds[live[o]]
                                    AND u.currency = w_currencies[live[o]]), 0)
                       + w_amounts[live[o]] END
              FROM generate_subscripts(live, 1) AS o
             ORDER BY o);
        FOR j IN 1 .. cardinality(live) LOOP
            IF totals[j] > w_limits[live[j]] THEN
                answers[live[j]] := jsonb_build_object('limit', jsonb_build_object(
                    'used', totals[j], 'limit', w_limits[live[j]]));
                over := true;
            END IF;
        END LOOP;
        IF over THEN
            live := array_positions(answers, NULL);
            IF cardinality(live) = 0 THEN
                RETURN answers;
            END IF;
        END IF;
    END IF;

    -- 4. The postings of the transfers still going, in one call: the argument as it came when
    --    every transfer goes on (the common case), else the live transfers' postings, in order.
    IF cardinality(live) = n THEN
        posted := ledger_api.post_batch(p_postings);
    ELSE
        posted := ledger_api.post_batch(ARRAY(SELECT p_postings[live[o]] FROM generate_subscripts(live, 1) AS o
                                           ORDER BY o));
    END IF;

    -- 5. For all posted transfers at once: the month's totals and the stored answers. A
    --    refusal was decided before the ledger's first write: it is the answer as it is, and
    --    nothing is stored for it. Live transfers have distinct source accounts, so the
    --    statement upserts no limit row twice.
    IF cardinality(locks) > 0 THEN
        INSERT INTO wallet.limit_usage AS u (bucket, account_id, month, kind, currency, used)
        SELECT w_buckets[live[o]], w_src_accounts[live[o]], w_months[live[o]], w_limit_kinds[live[o]],
               w_currencies[live[o]], w_amounts[live[o]]
          FROM generate_subscripts(live, 1) AS o
         WHERE w_limit_kinds[live[o]] IS NOT NULL AND (posted[o] ? 'error') IS NOT TRUE
        ON CONFLICT (bucket, account_id, month, kind, currency)
        DO UPDATE SET used = u.used + EXCLUDED.used;
    END IF;
    INSERT INTO wallet.idempotency_keys (bucket, scope, key, request_hash, status, body, posted, created_at)
    SELECT w_buckets[live[o]], w_scopes[live[o]], w_keys[live[o]], w_hashes[live[o]], 201, NULL,
           jsonb_build_object('result', posted[o], 'view', w_views[live[o]]), clock_timestamp()
      FROM generate_subscripts(live, 1) AS o
     WHERE (posted[o] ? 'error') IS NOT TRUE;
    FOR j IN 1 .. cardinality(live) LOOP
        answers[live[j]] := CASE WHEN posted[j] ? 'error' THEN posted[j]
                                 ELSE jsonb_build_object('result', posted[j]) END;
    END LOOP;
    RETURN answers;
END $$;

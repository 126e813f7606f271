-- wallet-api's transfers in one statement: for each transfer the Idempotency-Key's lock and
-- record, the checks of what wallet-api decided on (membership, tiers), the monthly limit, the
-- posting (through ledger.post_batch, the ledger's own writer) and the stored answer; for many
-- concurrent transfers at once, in one round trip and one commit.
--
-- Why: the same work as BEGIN, three statements and COMMIT took five round trips per transfer,
-- each costing system calls on both sides and a wait for a CPU on a loaded machine, with the
-- posting's row locks held across them (bench/: 18 ms inside wallet-api per transfer at
-- concurrency 8, of which the statements themselves took under a third).

-- A transfer's stored answer is what the posting returned plus what the view needs (type,
-- reference, metadata, currency), not the rendered body: wallet-api renders both the first
-- answer and every replay from it with one function. Other requests keep their rendered body.
ALTER TABLE wallet.idempotency_keys
    ALTER COLUMN body DROP NOT NULL,
    ADD COLUMN posted jsonb,
    ADD CONSTRAINT idempotency_keys_one_answer CHECK ((body IS NULL) <> (posted IS NULL));

-- One answer per transfer, in order:
--   {"in_progress": true}         another request holds the key (409 at once, never a wait)
--   {"reused": true}              the key was used with another request (422)
--   {"stored": {...}}             the stored answer (status, body, posted): a replay
--   {"stale": true}               the caller's view of membership or tiers is out of date:
--                                 read the parties again and decide again
--   {"retry": true}               another transfer of this batch has the same source account:
--                                 send it again (the caller's batching keeps this from happening)
--   {"limit": {"used", "limit"}}  over the monthly limit (the total with this transfer)
--   {"error": {...}}              the ledger refused the posting
--   {"result": {...}}             posted
-- Nothing is written for any answer but "result".
--
-- Locks, in this order in every transaction that takes more than one (no deadlock):
--   1. each key: pg_try_advisory_xact_lock, which never waits;
--   2. each limited source account's monthly limit: pg_advisory_xact_lock, in key order, so two
--      requests at a limit are decided one after the other, by the total the first left;
--   3. the ledger's account rows, in (bucket, id) order, in ledger.post_batch;
--   4. the limit counter rows, already guarded by 2.
CREATE FUNCTION wallet.transfer_batch(
    -- per transfer: the key and its record
    w_buckets smallint[], w_scopes text[], w_keys text[], w_locks bigint[], w_hashes bytea[],
    -- per transfer: what wallet-api decided on
    w_issuers text[], w_subjects text[], w_src_accounts text[], w_src_tiers text[],
    w_dst_buckets smallint[], w_dst_accounts text[], w_dst_tiers text[],
    -- per transfer: the monthly limit (kind null: none applies) and the view
    w_months date[], w_limit_kinds text[], w_limit_locks bigint[], w_currencies text[],
    w_amounts bigint[], w_limits bigint[], w_views jsonb[],
    -- ledger.post_batch's arguments, one posting per transfer, legs flattened
    p_ids text[], p_homes smallint[], p_types text[], p_actors text[], p_refs text[],
    p_hashes bytea[], p_parts_balanced boolean, p_refund_ofs text[], p_metadata jsonb[],
    p_leg_counts int[], p_buckets smallint[], p_accounts text[], p_amounts bigint[],
    p_currencies text[], p_options jsonb[]
) RETURNS jsonb[] LANGUAGE plpgsql AS $$
DECLARE
    n        int := coalesce(array_length(w_keys, 1), 0);
    answers  jsonb[] := array_fill(NULL::jsonb, ARRAY[n]);
    live     int[] := '{}';      -- transfers still going, in order
    seen_key bigint[] := '{}';
    seen_src text[] := '{}';
    starts   int[] := '{}';      -- per transfer: its first leg in the flattened arrays
    v_stored record;
    v_lock   bigint;
    v_used   bigint;
    posted   jsonb[];
    -- the live transfers' postings, for ledger.post_batch
    l_ids text[] := '{}'; l_homes smallint[] := '{}'; l_types text[] := '{}';
    l_actors text[] := '{}'; l_refs text[] := '{}'; l_hashes bytea[] := '{}';
    l_refund_ofs text[] := '{}'; l_metadata jsonb[] := '{}'; l_leg_counts int[] := '{}';
    l_buckets smallint[] := '{}'; l_accounts text[] := '{}'; l_amounts bigint[] := '{}';
    l_currencies text[] := '{}'; l_options jsonb[] := '{}';
    s int := 1;
    i int;
    j int;
    e int;
BEGIN
    FOR i IN 1 .. n LOOP
        starts := starts || s;
        s := s + p_leg_counts[i];
    END LOOP;

    -- 1. Keys, stored answers and what wallet-api decided on.
    FOR i IN 1 .. n LOOP
        -- A second request with a key in this batch, or one whose first request runs in
        -- another transaction, is still running (the lock is re-entrant within a transaction,
        -- so the batch checks its own keys itself).
        IF w_locks[i] = ANY (seen_key) OR NOT pg_try_advisory_xact_lock(w_locks[i]) THEN
            answers[i] := '{"in_progress": true}';
            CONTINUE;
        END IF;
        seen_key := seen_key || w_locks[i];
        -- Each statement of a VOLATILE function takes a new snapshot (READ COMMITTED): a first
        -- request that committed before this one got the key's lock is seen here.
        SELECT k.request_hash, k.status, k.body, k.posted INTO v_stored
          FROM wallet.idempotency_keys k
         WHERE k.bucket = w_buckets[i] AND k.scope = w_scopes[i] AND k.key = w_keys[i];
        IF FOUND THEN
            answers[i] := CASE WHEN v_stored.request_hash <> w_hashes[i] THEN '{"reused": true}'::jsonb
                               ELSE jsonb_build_object('stored', jsonb_build_object(
                                   'status', v_stored.status, 'body', v_stored.body,
                                   'posted', v_stored.posted)) END;
            CONTINUE;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM wallet.members m
                        WHERE m.bucket = w_buckets[i] AND m.account_id = w_src_accounts[i]
                          AND m.issuer = w_issuers[i] AND m.subject = w_subjects[i])
           OR (SELECT a.tier FROM wallet.accounts a
                WHERE a.bucket = w_buckets[i] AND a.id = w_src_accounts[i])
              IS DISTINCT FROM w_src_tiers[i]
           OR (SELECT a.tier FROM wallet.accounts a
                WHERE a.bucket = w_dst_buckets[i] AND a.id = w_dst_accounts[i])
              IS DISTINCT FROM w_dst_tiers[i] THEN
            answers[i] := '{"stale": true}';
            CONTINUE;
        END IF;
        IF w_src_accounts[i] = ANY (seen_src) THEN
            answers[i] := '{"retry": true}';
            CONTINUE;
        END IF;
        seen_src := seen_src || w_src_accounts[i];
        live := live || i;
    END LOOP;

    -- 2. Monthly limits: each limited account's lock in key order, then its month's total.
    FOR v_lock IN SELECT DISTINCT w_limit_locks[x] FROM unnest(live) AS x
                   WHERE w_limit_kinds[x] IS NOT NULL ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(v_lock);
    END LOOP;
    FOR j IN 1 .. coalesce(array_length(live, 1), 0) LOOP
        i := live[j];
        CONTINUE WHEN w_limit_kinds[i] IS NULL;
        SELECT u.used INTO v_used FROM wallet.limit_usage u
         WHERE u.bucket = w_buckets[i] AND u.account_id = w_src_accounts[i] AND u.month = w_months[i]
           AND u.kind = w_limit_kinds[i] AND u.currency = w_currencies[i];
        v_used := coalesce(v_used, 0) + w_amounts[i];
        IF v_used > w_limits[i] THEN
            answers[i] := jsonb_build_object('limit', jsonb_build_object('used', v_used, 'limit', w_limits[i]));
            live[j] := NULL;
        END IF;
    END LOOP;
    live := array_remove(live, NULL);

    -- 3. The postings of the transfers still going, in one call.
    IF coalesce(array_length(live, 1), 0) = 0 THEN
        RETURN answers;
    END IF;
    FOREACH i IN ARRAY live LOOP
        e := starts[i] + p_leg_counts[i] - 1;
        l_ids := l_ids || p_ids[i]; l_homes := l_homes || p_homes[i];
        l_types := l_types || p_types[i]; l_actors := l_actors || p_actors[i];
        l_refs := l_refs || p_refs[i]; l_hashes := l_hashes || p_hashes[i];
        l_refund_ofs := l_refund_ofs || p_refund_ofs[i]; l_metadata := l_metadata || p_metadata[i];
        l_leg_counts := l_leg_counts || p_leg_counts[i]; l_options := l_options || p_options[i];
        l_buckets := l_buckets || p_buckets[starts[i]:e]; l_accounts := l_accounts || p_accounts[starts[i]:e];
        l_amounts := l_amounts || p_amounts[starts[i]:e];
        l_currencies := l_currencies || p_currencies[starts[i]:e];
    END LOOP;
    posted := ledger.post_batch(l_ids, l_homes, l_types, l_actors, l_refs, l_hashes, p_parts_balanced,
                                l_refund_ofs, l_metadata, l_leg_counts, l_buckets, l_accounts,
                                l_amounts, l_currencies, l_options);

    -- 4. For each posted transfer: the month's total and the stored answer.
    FOR j IN 1 .. array_length(live, 1) LOOP
        i := live[j];
        IF posted[j] ? 'error' THEN
            answers[i] := posted[j];  -- a refusal is decided before the ledger's first write
            CONTINUE;
        END IF;
        IF w_limit_kinds[i] IS NOT NULL THEN
            INSERT INTO wallet.limit_usage AS u (bucket, account_id, month, kind, currency, used)
            VALUES (w_buckets[i], w_src_accounts[i], w_months[i], w_limit_kinds[i], w_currencies[i], w_amounts[i])
            ON CONFLICT (bucket, account_id, month, kind, currency)
            DO UPDATE SET used = u.used + EXCLUDED.used;
        END IF;
        INSERT INTO wallet.idempotency_keys (bucket, scope, key, request_hash, status, body, posted, created_at)
        VALUES (w_buckets[i], w_scopes[i], w_keys[i], w_hashes[i], 201, NULL,
                jsonb_build_object('result', posted[j], 'view', w_views[i]), clock_timestamp());
        answers[i] := jsonb_build_object('result', posted[j]);
    END LOOP;
    RETURN answers;
END $$;

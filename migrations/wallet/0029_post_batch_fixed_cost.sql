-- The posting function's fixed cost a call (issue 26, docs/performance.md): the same answers,
-- the same locks in the same order, the same rows written, fewer PL/pgSQL statements a posting.
--
-- perf of the backend calling it with one or two p2p transfers a call, each call committed
-- (bench/post_call_cost.py): the function's SQL statements over a third of the call's CPU
-- (their executor start-up a tenth, the balance trigger and the CHECK constraints, prepared
-- again in every statement, a twelfth each), PL/pgSQL's own work over a quarter, the commit a
-- sixth. What PL/pgSQL does a posting is cut here:
--   - a posting's parts (its buckets) are put in order without a query when there are two;
--   - a transaction's part rows are made by the writing statement from the posting and its
--     parts, not appended field by field (eleven appends and a test a part) in the loop.
CREATE OR REPLACE FUNCTION ledger.post_batch(p_postings ledger.posting_in[], p_replay_on_conflict boolean DEFAULT false)
RETURNS jsonb[] LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode = force_generic_plan SET jit = off
    SET search_path = pg_catalog, ledger, wallet, pg_temp
    AS $$
DECLARE
    n        int := coalesce(cardinality(p_postings), 0);
    v_claim  boolean := p_replay_on_conflict AND n = 1;
    results  jsonb[] := '{}';
    known    boolean[];           -- per posting: its id is in the ledger already
    first_at int[];               -- per posting: the first posting of the call with its id
    last_at  int[];               -- per first posting: the last posting of its id decided
    v_at     timestamptz;
    v_at_json jsonb;              -- v_at as the answers carry it, converted once a call
    v_row    record;
    v_p      ledger.posting_in;
    -- The arrays start null, not empty: appending to null makes an array of one, and each
    -- default is an expression evaluated on every call (and compiled in every transaction).
    -- the locked accounts, in lock order
    a_bucket smallint[]; a_id text[]; a_role text[]; a_cur text[]; a_bal bigint[]; a_held bigint[];
    a_ver bigint[]; a_hash bytea[];
    a_dheld bigint[];             -- held to change in the table (a hold captured)
    a_moved boolean[];
    a_map    jsonb;               -- account id -> index into the a_ arrays (a call of many)
    n_acc    int := 0;
    -- per posting
    n_legs   int;
    l_acc    int[];               -- per leg: index into the a_ arrays
    amounts  bigint[];            -- the legs' amounts as decided under the locks
    v_parts  smallint[];
    v_lines  jsonb;
    v_refusal jsonb;
    v_missing text;
    v_mismatch int;
    v_options boolean;            -- options beyond transit legs, or a refund
    v_opt    jsonb;
    v_hold   record;
    v_batch  record;
    v_hold_acc int;               -- the account whose hold the posting captures
    v_hold_amount bigint;
    v_net bigint; v_debit bigint; v_held bigint; v_take bigint; v_left bigint; v_total bigint;
    v_fail   int;
    -- rows to write: the postings whose part rows are due (of a call of many), the lines
    w_count  int := 0;            -- postings decided since the last write
    t_at int[]; t_parts text[];   -- the posting's index and its parts (smallint[] as text)
    o_bucket smallint[]; o_acc text[]; o_ver bigint[]; o_tx text[]; o_amt bigint[]; o_cur text[];
    o_bal bigint[]; o_type text[]; o_ref text[]; o_hash bytea[];
    -- the one posting with options since the last write, and its rows
    w_opt    int;
    w_amounts bigint[];
    w_hold_leg int;
    s_bucket smallint[] := '{}'; s_batch text[] := '{}'; s_amt bigint[] := '{}';  -- remaining -= amt
    i int; j int; k int; m int; x int; y int;
BEGIN
    IF n = 0 THEN
        RETURN results;
    END IF;

    -- 1. Known ids are replays (or reused ids), found before any lock is taken: the accounts
    --    of a posting whose id is known are not locked.
    --    The same statement finds, for each posting, the call's first posting with its id
    --    (a repeated id is answered by its earlier posting: 3a).
    IF n = 1 THEN
        known := ARRAY[EXISTS (SELECT 1 FROM ledger.transactions t
                                WHERE t.bucket = (p_postings[1]).home AND t.id = (p_postings[1]).id)];
        first_at := '{1}';
    ELSE
        SELECT array_agg(x.known ORDER BY x.o), array_agg(x.first ORDER BY x.o) INTO known, first_at
          FROM (SELECT p.ordinality AS o,
                       (SELECT true FROM ledger.transactions t
                         WHERE t.bucket = p.home AND t.id = p.id) IS NOT NULL AS known,
                       min(p.ordinality) OVER (PARTITION BY p.id COLLATE "C") AS first
                  FROM unnest(p_postings) WITH ORDINALITY AS p) AS x;
    END IF;
    last_at := array_fill(NULL::int, ARRAY[n]);

    -- 2. Every account of the call's new postings, locked in (bucket, id) order by one
    --    statement: one global order, so two writers can never wait on each other in a cycle.
    FOR v_row IN
        SELECT a.bucket, a.id, a.role, a.currency, a.balance, a.held, a.version, a.last_hash
          FROM ledger.accounts a
          JOIN (SELECT DISTINCT k.b, k.id
                  FROM unnest(p_postings) WITH ORDINALITY AS p, unnest(p.buckets, p.accounts) AS k(b, id)
                 WHERE NOT known[p.ordinality]) AS k
            ON a.bucket = k.b AND a.id = k.id
         ORDER BY a.bucket, a.id
           FOR UPDATE OF a
    LOOP
        n_acc := n_acc + 1;
        a_bucket[n_acc] := v_row.bucket; a_id[n_acc] := v_row.id; a_role[n_acc] := v_row.role;
        a_cur[n_acc] := v_row.currency; a_bal[n_acc] := v_row.balance; a_held[n_acc] := v_row.held;
        a_ver[n_acc] := v_row.version; a_hash[n_acc] := v_row.last_hash; a_dheld[n_acc] := 0;
        a_moved[n_acc] := false;
    END LOOP;
    -- The time of the postings is read after the locks: every later posting on these accounts
    -- waited for this call to commit, so posted_at grows with the accounts' versions.
    v_at := clock_timestamp();
    v_at_json := to_jsonb(v_at);
    -- Each leg finds its account's index. array_position copies the whole array (an expanded
    -- array is flattened for the call) and compares the ids one by one: for a call of 1,000
    -- postings over 500 accounts that was a sixth of the call's time (perf). A jsonb object
    -- is a binary search; built once, it pays from a few hundred accounts on (the backend's
    -- CPU a call, measured: 17 % less at 500 accounts, even at 200, 6 % more at 40).
    IF n_acc > 200 THEN
        a_map := (SELECT jsonb_object_agg(u.id, u.o) FROM unnest(a_id) WITH ORDINALITY AS u(id, o));
    END IF;

    -- 3. The postings in order, one more turn to write what is left.
    FOR i IN 1 .. n + 1 LOOP
        IF i <= n THEN
            v_p := p_postings[i];
            n_legs := coalesce(cardinality(v_p.accounts), 0);
            IF n_legs = 0 OR cardinality(v_p.amounts) IS DISTINCT FROM n_legs
               OR cardinality(v_p.buckets) IS DISTINCT FROM n_legs
               OR cardinality(v_p.currencies) IS DISTINCT FROM n_legs THEN
                RAISE EXCEPTION 'a posting needs legs of equal length arrays' USING ERRCODE = 'HW008',
                    DETAIL = jsonb_build_object('reason', 'legs')::text;
            END IF;
            v_options := v_p.refund_of IS NOT NULL
                         OR coalesce(v_p.options <> '{}'::jsonb AND v_p.options - 'transit_legs' <> '{}'::jsonb,
                                     false);
        END IF;

        -- Write the rows decided so far: at the end, and before a posting with options if an
        -- earlier one had options (it may read what that one wrote).
        IF w_count > 0 AND (i > n OR (v_options AND w_opt IS NOT NULL)) THEN
            IF v_claim THEN
                -- Claim the id. A concurrent post of the same id that got here first has
                -- committed by now (we waited on its locks) or is still running on other
                -- accounts (the insert waits for it); either way ON CONFLICT tells us, and it
                -- is answered as a replay, having written nothing.
                INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref,
                                                 request_hash, parts_balanced, refund_of, metadata, posted_at)
                VALUES (v_p.home, v_p.id, v_p.home, v_parts, v_p.type::ledger.tx_type, v_p.actor, v_p.ref,
                        v_p.request_hash, v_p.parts_balanced, v_p.refund_of,
                        coalesce(v_p.metadata, '{}'::jsonb), v_at)
                ON CONFLICT (bucket, id) DO NOTHING;
                IF NOT FOUND THEN
                    RETURN ARRAY[ledger.replay(v_p.home, v_p.id, v_p.request_hash)];
                END IF;
                IF cardinality(v_parts) > 1 THEN
                    INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref,
                                                     request_hash, parts_balanced, refund_of, metadata, posted_at)
                    SELECT b, v_p.id, v_p.home, v_parts, v_p.type::ledger.tx_type, v_p.actor, v_p.ref,
                           v_p.request_hash, v_p.parts_balanced, NULL, '{}'::jsonb, v_at
                      FROM unnest(v_parts) AS b WHERE b <> v_p.home;
                END IF;
            ELSE
                -- A concurrent writer of one of these ids makes this fail, and the caller posts
                -- the batch again one posting at a time.
                -- A row a part: the home part carries the refund and the metadata.
                INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref,
                                                 request_hash, parts_balanced, refund_of, metadata, posted_at)
                SELECT b.b, p.id, p.home, t.parts::smallint[], p.type::ledger.tx_type, p.actor, p.ref, p.request_hash,
                       p.parts_balanced,
                       CASE WHEN b.b = p.home THEN p.refund_of END,
                       CASE WHEN b.b = p.home THEN coalesce(p.metadata, '{}'::jsonb) ELSE '{}'::jsonb END,
                       v_at
                  FROM unnest(t_at, t_parts) AS t(i, parts)
                  JOIN unnest(p_postings) WITH ORDINALITY AS p ON p.ordinality = t.i,
                       unnest(t.parts::smallint[]) AS b(b);
            END IF;
            INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,
                                      balance_after, type, ref, posted_at, hash)
            SELECT b, acc, ver, tx, amt, cur, bal, ty::ledger.tx_type, rf, v_at, h
              FROM unnest(o_bucket, o_acc, o_ver, o_tx, o_amt, o_cur, o_bal, o_type, o_ref, o_hash)
                AS t(b, acc, ver, tx, amt, cur, bal, ty, rf, h);
            UPDATE ledger.accounts AS a
               SET balance = t.bal, held = a.held + t.dh, version = t.ver, last_hash = t.h
              FROM unnest(a_bucket, a_id, a_bal, a_ver, a_hash, a_dheld, a_moved) AS t(b, id, bal, ver, h, dh, moved)
             WHERE a.bucket = t.b AND a.id = t.id AND (t.moved OR t.dh <> 0);

            -- The rows of the posting with options: its hold, its promo batches and spends.
            IF w_opt IS NOT NULL THEN
                IF w_hold_leg IS NOT NULL THEN
                    UPDATE ledger.holds SET status = 'captured', transaction_id = (p_postings[w_opt]).id,
                                            closed_at = v_at
                     WHERE bucket = (p_postings[w_opt]).buckets[w_hold_leg]
                       AND account_id = (p_postings[w_opt]).accounts[w_hold_leg]
                       AND key = (p_postings[w_opt]).options -> 'capture_hold' ->> 'key';
                END IF;
                IF s_batch <> '{}' THEN
                    UPDATE ledger.promo_batches AS pb SET remaining = pb.remaining - t.amt
                      FROM unnest(s_bucket, s_batch, s_amt) AS t(b, id, amt)
                     WHERE pb.bucket = t.b AND pb.id = t.id;
                    INSERT INTO ledger.promo_spends (bucket, transaction_id, batch_id, amount)
                    SELECT b, (p_postings[w_opt]).id, bid, amt FROM unnest(s_bucket, s_batch, s_amt) AS t(b, bid, amt);
                END IF;
                -- A promo grant opens a batch with the amount its promo leg carried.
                v_opt := (p_postings[w_opt]).options -> 'grant_promo';
                IF v_opt IS NOT NULL THEN
                    j := (v_opt ->> 'promo_leg')::int;
                    k := (v_opt ->> 'funder_leg')::int;
                    INSERT INTO ledger.promo_batches (bucket, id, account_id, funder_bucket, funder_account,
                                                      funded_by, expire_to_bucket, expire_to_account,
                                                      amount, remaining, expires_at, grant_transaction_id,
                                                      created_at)
                    VALUES ((p_postings[w_opt]).buckets[j], v_opt ->> 'batch_id', (p_postings[w_opt]).accounts[j],
                            (p_postings[w_opt]).buckets[k], (p_postings[w_opt]).accounts[k],
                            v_opt ->> 'funded_by', (v_opt ->> 'expire_to_bucket')::smallint, v_opt ->> 'expire_to',
                            w_amounts[j], w_amounts[j], (v_opt ->> 'expires_at')::timestamptz,
                            (p_postings[w_opt]).id, v_at);
                END IF;
            END IF;
            EXIT WHEN i > n;

            -- What is written is the tables' now; the arrays start again.
            w_count := 0; w_opt := NULL;
            t_at := NULL; t_parts := NULL;
            o_bucket := NULL; o_acc := NULL; o_ver := NULL; o_tx := NULL; o_amt := NULL; o_cur := NULL;
            o_bal := NULL; o_type := NULL; o_ref := NULL; o_hash := NULL;
            a_dheld := array_fill(0::bigint, ARRAY[n_acc]);
            a_moved := array_fill(false, ARRAY[n_acc]);
        END IF;
        EXIT WHEN i > n;

        -- 3a. A repeated id: answered by its earlier posting in this call (unless that one was
        --     refused, which left the id free), or by the ledger.
        --     last_at[first_at[i]]: the last posting of this id decided in this call.
        x := first_at[i];
        y := last_at[x];
        IF y IS NOT NULL AND NOT results[y] ? 'error' THEN
            IF (p_postings[y]).request_hash = v_p.request_hash THEN
                results := results || (results[y] || '{"replayed": true}'::jsonb);
            ELSE
                results := results || ledger.refusal('HW003',
                    format('transaction id %s was used for another request', v_p.id),
                    jsonb_build_object('id', v_p.id));
            END IF;
            CONTINUE;
        ELSIF y IS NULL AND known[i] THEN
            results := results || ledger.replay(v_p.home, v_p.id, v_p.request_hash);
            CONTINUE;
        END IF;
        last_at[x] := i;  -- (again, for a new attempt of an id whose earlier posting was refused)

        -- 3b. Its legs' accounts (an id names its bucket, so the id alone finds it) and
        --     currencies. A customer's missing account is the likelier news than a system one.
        l_acc := '{}';
        amounts := v_p.amounts;
        v_parts := ARRAY[v_p.home];
        v_missing := NULL;
        v_mismatch := NULL;
        FOR k IN 1 .. n_legs LOOP
            j := CASE WHEN a_map IS NULL THEN array_position(a_id, v_p.accounts[k])
                      ELSE (a_map ->> v_p.accounts[k])::int END;
            IF j IS NULL OR a_bucket[j] <> v_p.buckets[k] THEN
                IF v_missing IS NULL OR position(':sys:' IN v_missing) > 0 THEN
                    v_missing := v_p.accounts[k];
                END IF;
                j := NULL;
            ELSIF v_mismatch IS NULL AND a_cur[j] <> v_p.currencies[k] THEN
                v_mismatch := k;
            END IF;
            l_acc := l_acc || j;
            IF NOT v_p.buckets[k] = ANY (v_parts) THEN
                v_parts := v_parts || v_p.buckets[k];
            END IF;
        END LOOP;
        IF v_missing IS NOT NULL THEN
            results := results || ledger.refusal('HW002', format('no account %s', v_missing),
                                                 jsonb_build_object('account', v_missing));
            CONTINUE;
        END IF;
        IF v_mismatch IS NOT NULL THEN
            k := v_mismatch;
            results := results || ledger.refusal('HW004',
                format('account %s holds %s, not %s', v_p.accounts[k], a_cur[l_acc[k]], v_p.currencies[k]),
                jsonb_build_object('account', v_p.accounts[k], 'account_currency', a_cur[l_acc[k]],
                                   'currency', v_p.currencies[k]));
            CONTINUE;
        END IF;
        -- In order: two parts (a transfer between two buckets) by hand, more by a query.
        IF cardinality(v_parts) = 2 THEN
            IF v_parts[1] > v_parts[2] THEN
                v_parts := ARRAY[v_parts[2], v_parts[1]];
            END IF;
        ELSIF cardinality(v_parts) > 2 THEN
            v_parts := ARRAY(SELECT b FROM unnest(v_parts) AS b ORDER BY b);
        END IF;

        -- 3c. Options that decide amounts under the locks. They read; writing waits for the
        --     rows' turn (above). Without an earlier posting with options since the last
        --     write, these arrays are empty.
        v_hold_acc := NULL;
        v_hold_amount := 0;
        IF v_options THEN
            w_hold_leg := NULL;
            s_bucket := '{}'; s_batch := '{}'; s_amt := '{}';

            -- A hold captured by this posting: its whole amount leaves `held` as the leg takes
            -- (at most) that much.
            v_opt := v_p.options -> 'capture_hold';
            IF v_opt IS NOT NULL THEN
                k := (v_opt ->> 'leg')::int;
                SELECT amount, status INTO v_hold FROM ledger.holds
                 WHERE bucket = v_p.buckets[k] AND account_id = v_p.accounts[k] AND key = v_opt ->> 'key'
                   FOR UPDATE;
                IF NOT FOUND OR v_hold.status <> 'pending' THEN
                    results := results || ledger.refusal('HW005',
                        format('hold %s on %s is not pending', v_opt ->> 'key', v_p.accounts[k]),
                        jsonb_build_object('account', v_p.accounts[k], 'key', v_opt ->> 'key',
                                           'status', coalesce(v_hold.status, 'missing')));
                    CONTINUE;
                END IF;
                IF -amounts[k] > v_hold.amount THEN
                    results := results || ledger.refusal('HW005',
                        format('capture of %s exceeds hold of %s', -amounts[k], v_hold.amount),
                        jsonb_build_object('account', v_p.accounts[k], 'key', v_opt ->> 'key',
                                           'status', 'exceeded', 'held', v_hold.amount));
                    CONTINUE;
                END IF;
                w_hold_leg := k;
                v_hold_acc := l_acc[k];
                v_hold_amount := v_hold.amount;
            END IF;

            -- A payment that spends promo first: the promo leg takes what the live batches
            -- hold, earliest expiry first, and the cash leg the rest.
            v_opt := v_p.options -> 'spend_promo';
            IF v_opt IS NOT NULL THEN
                k := (v_opt ->> 'promo_leg')::int;
                j := (v_opt ->> 'cash_leg')::int;
                v_total := (v_opt ->> 'total')::bigint;
                v_left := v_total;
                FOR v_batch IN
                    SELECT id, remaining FROM ledger.promo_batches
                     WHERE bucket = v_p.buckets[k] AND account_id = v_p.accounts[k] AND remaining > 0
                       AND expires_at > v_at
                     ORDER BY expires_at, id FOR UPDATE
                LOOP
                    EXIT WHEN v_left = 0;
                    v_take := least(v_left, v_batch.remaining);
                    s_bucket := s_bucket || v_p.buckets[k]; s_batch := s_batch || v_batch.id;
                    s_amt := s_amt || v_take;
                    v_left := v_left - v_take;
                END LOOP;
                amounts[k] := -(v_total - v_left);
                amounts[j] := -v_left;
            END IF;

            -- Promo expiry: what is left in the batch goes back to its funder or to breakage.
            v_opt := v_p.options -> 'expire_promo';
            IF v_opt IS NOT NULL THEN
                k := (v_opt ->> 'promo_leg')::int;
                j := (v_opt ->> 'funder_leg')::int;
                SELECT id, remaining, expires_at, expire_to_bucket, expire_to_account INTO v_batch
                  FROM ledger.promo_batches
                 WHERE bucket = v_p.buckets[k] AND id = v_opt ->> 'batch_id' AND account_id = v_p.accounts[k]
                   FOR UPDATE;
                IF NOT FOUND OR v_batch.remaining = 0 OR v_batch.expires_at > v_at
                   OR v_batch.expire_to_account <> v_p.accounts[j] OR v_batch.expire_to_bucket <> v_p.buckets[j] THEN
                    results := results || ledger.refusal('HW007',
                        format('promo batch %s has nothing to expire', v_opt ->> 'batch_id'),
                        jsonb_build_object('batch', v_opt ->> 'batch_id',
                            'reason', CASE WHEN v_batch.id IS NULL THEN 'missing'
                                           WHEN v_batch.remaining = 0 THEN 'empty'
                                           WHEN v_batch.expires_at > v_at THEN 'not_expired'
                                           ELSE 'destination' END));
                    CONTINUE;
                END IF;
                s_bucket := s_bucket || v_p.buckets[k]; s_batch := s_batch || v_batch.id;
                s_amt := s_amt || v_batch.remaining;
                amounts[k] := -v_batch.remaining;
                amounts[j] := v_batch.remaining;
            END IF;

            -- A refund puts spent promo back into the batches it came from.
            IF v_p.refund_of IS NOT NULL THEN
                FOR v_batch IN
                    SELECT s.bucket, s.batch_id, sum(s.amount) AS amount FROM ledger.promo_spends s
                     WHERE s.bucket = ANY (v_parts) AND s.transaction_id = v_p.refund_of
                     GROUP BY s.bucket, s.batch_id ORDER BY s.bucket, s.batch_id
                LOOP
                    s_bucket := s_bucket || v_batch.bucket; s_batch := s_batch || v_batch.batch_id;
                    s_amt := s_amt || -v_batch.amount;
                END LOOP;
            END IF;
        END IF;

        -- Transit legs (placeholders of 0) take what makes their bucket's part balance by
        -- itself, now that every other amount is final. First, the legs without them must
        -- balance: with transit legs the balance trigger sees one part at a time, so only this
        -- function, which sees every leg, can check the whole.
        IF v_p.options ? 'transit_legs' THEN
            PERFORM ledger.assert_balanced(v_p.id, amounts, v_p.currencies);
            FOR k IN SELECT (jsonb_array_elements_text(v_p.options -> 'transit_legs'))::int LOOP
                v_net := 0;
                FOR m IN 1 .. n_legs LOOP
                    IF m <> k AND v_p.buckets[m] = v_p.buckets[k] AND v_p.currencies[m] = v_p.currencies[k] THEN
                        v_net := v_net - amounts[m];
                    END IF;
                END LOOP;
                amounts[k] := v_net;
            END LOOP;
        END IF;

        -- 3d. Customers' money: each debited customer account's net move in this posting
        --     against what it has, less what stays held; the first short one in lock order.
        v_fail := NULL;
        FOR k IN 1 .. n_legs LOOP
            j := l_acc[k];
            CONTINUE WHEN amounts[k] >= 0 OR a_role[j] <> 'user_wallet' OR j = v_fail;
            v_net := 0;
            v_debit := 0;
            FOR m IN 1 .. n_legs LOOP
                IF l_acc[m] = j THEN
                    v_net := v_net + amounts[m];
                    IF amounts[m] < 0 THEN
                        v_debit := v_debit - amounts[m];
                    END IF;
                END IF;
            END LOOP;
            v_held := a_held[j] - CASE WHEN j = v_hold_acc THEN v_hold_amount ELSE 0 END;
            IF a_bal[j] + v_net - v_held < 0 AND (v_fail IS NULL OR j < v_fail) THEN
                v_fail := j;
                v_refusal := ledger.refusal('HW001', format('insufficient funds on %s', a_id[j]),
                    jsonb_build_object('account', a_id[j], 'balance', a_bal[j],
                                       'available', a_bal[j] - v_held, 'amount', v_debit));
            END IF;
        END LOOP;
        IF v_fail IS NOT NULL THEN
            results := results || v_refusal;
            CONTINUE;
        END IF;

        -- 3e. Apply: lines with balance, version and hash in leg order; its part rows.
        v_lines := '[]';
        FOR k IN 1 .. n_legs LOOP
            CONTINUE WHEN amounts[k] = 0;  -- a promo or cash share, or a transit leg, that came to nothing
            j := l_acc[k];
            a_bal[j] := a_bal[j] + amounts[k];
            a_ver[j] := a_ver[j] + 1;
            a_moved[j] := true;
            a_hash[j] := ledger.line_hash(a_hash[j], a_id[j], a_ver[j], v_p.id, amounts[k], a_cur[j],
                                          a_bal[j], v_p.type, v_p.ref, v_at);
            o_bucket := o_bucket || a_bucket[j]; o_acc := o_acc || a_id[j]; o_ver := o_ver || a_ver[j];
            o_tx := o_tx || v_p.id; o_amt := o_amt || amounts[k]; o_cur := o_cur || a_cur[j];
            o_bal := o_bal || a_bal[j]; o_type := o_type || v_p.type; o_ref := o_ref || v_p.ref;
            o_hash := o_hash || a_hash[j];
            v_lines := v_lines || jsonb_build_object('account', a_id[j], 'version', a_ver[j],
                                                     'amount', amounts[k], 'balance_after', a_bal[j]);
        END LOOP;
        IF v_lines = '[]' THEN
            RAISE EXCEPTION 'posting % moves nothing', v_p.id USING ERRCODE = 'HW008',
                DETAIL = jsonb_build_object('reason', 'empty')::text;
        END IF;
        IF v_hold_acc IS NOT NULL THEN
            a_held[v_hold_acc] := a_held[v_hold_acc] - v_hold_amount;
            a_dheld[v_hold_acc] := a_dheld[v_hold_acc] - v_hold_amount;
        END IF;
        IF NOT v_claim THEN
            t_at := t_at || i;
            t_parts := t_parts || v_parts::text;
        END IF;
        IF v_options THEN
            w_opt := i;
            w_amounts := amounts;
        END IF;
        w_count := w_count + 1;
        results := results || jsonb_build_object('id', v_p.id, 'replayed', false, 'posted_at', v_at_json,
                                                  'lines', v_lines);
    END LOOP;
    RETURN results;
END $$;

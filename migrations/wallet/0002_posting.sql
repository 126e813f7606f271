-- The one posting operation. Everything that moves money calls ledger.post once, in one
-- database transaction: lock the accounts in (bucket, id) order, decide and check everything,
-- then claim the id and append the lines with their balance, version and hash, and update the
-- balances.
--
-- Why one server-side function: it is one round trip instead of about eight, no row lock is
-- held across a network round trip, and on Citus it can be delegated to the worker that owns
-- the home bucket (docs/ledger-citus.md).
--
-- Why it answers a refusal instead of raising it: every check runs before the first write, so
-- a refused posting has written nothing and the caller's transaction stays usable (to record
-- the refusal as an idempotent answer, or to go on with the next posting of a batch, without a
-- subtransaction per posting). The answer is {"error": {"sqlstate", "message", "detail"}}:
--   HW001 insufficient funds     HW002 account not found      HW003 id reused
--   HW004 currency mismatch      HW005 hold not usable        HW007 promo batch not usable
-- Malformed calls raise HW008; the append-only and balance triggers raise HW010 and HW011.
--
-- Why it is written the way it is: each SQL statement inside PL/pgSQL costs an executor run,
-- so the function keeps to one statement per job (one lock per bucket, one insert of all
-- lines, one update of all balances) and does the rest in plain PL/pgSQL expressions.

-- The hash of a line: over its content and the previous line of its account. STABLE, not
-- IMMUTABLE, because concat_ws and extract are: so declared, the planner inlines it into the
-- posting function's expression instead of running a SQL function per line.
CREATE FUNCTION ledger.line_hash(
    p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint,
    p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamptz
) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT sha256(p_prev || convert_to(concat_ws(E'\x1f',
        p_account_id, p_version::text, p_transaction_id, p_amount::text, p_currency,
        p_balance_after::text, p_type, p_ref,
        (extract(epoch FROM p_posted_at) * 1000000)::bigint::text), 'UTF8'))
$$;

-- System accounts of one bucket and currency: per-bucket sub-accounts of the hot system
-- accounts, and in bucket 0 the central ones. Idempotent.
CREATE FUNCTION ledger.ensure_system_accounts(p_bucket smallint, p_currency text, p_providers text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_prefix text := lpad(p_bucket::text, 4, '0') || ':sys:';
BEGIN
    INSERT INTO ledger.accounts (bucket, id, role, currency, created_at)
    SELECT p_bucket, v_prefix || r.name || ':' || p_currency, r.role::ledger.account_role, p_currency,
           clock_timestamp()
      FROM (
        SELECT 'clearing:' || p AS name, 'clearing' AS role FROM unnest(p_providers) AS p
        UNION ALL SELECT 'revenue', 'revenue'
        UNION ALL SELECT 'promo_expense', 'promo_expense'
        UNION ALL SELECT 'promo_breakage', 'promo_breakage'
        UNION ALL SELECT 'transit', 'transit'
        UNION ALL SELECT 'nostro', 'nostro' WHERE p_bucket = 0
        UNION ALL SELECT 'provider_expense', 'provider_expense' WHERE p_bucket = 0
      ) AS r
    ON CONFLICT (bucket, id) DO NOTHING;
END $$;

CREATE FUNCTION ledger.refusal(p_state text, p_message text, p_detail jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('error', jsonb_build_object('sqlstate', p_state, 'message', p_message,
                                                          'detail', p_detail))
$$;

-- The answer to a post whose id exists: the stored transaction if the request is the same,
-- a refusal (HW003) if it is not.
CREATE FUNCTION ledger.replay(p_home_bucket smallint, p_id text, p_request_hash bytea)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_tx record;
BEGIN
    SELECT buckets, request_hash, posted_at INTO v_tx
      FROM ledger.transactions WHERE bucket = p_home_bucket AND id = p_id;
    IF v_tx.request_hash <> p_request_hash THEN
        RETURN ledger.refusal('HW003', format('transaction id %s was used for another request', p_id),
                              jsonb_build_object('id', p_id));
    END IF;
    RETURN jsonb_build_object(
        'id', p_id, 'replayed', true, 'posted_at', v_tx.posted_at,
        'lines', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'account', l.account_id, 'version', l.version, 'amount', l.amount,
                        'balance_after', l.balance_after) ORDER BY l.bucket, l.account_id, l.version), '[]'::jsonb)
                    FROM ledger.lines l
                   WHERE l.bucket = ANY (v_tx.buckets) AND l.transaction_id = p_id));
END $$;

CREATE FUNCTION ledger.assert_balanced(p_id text, p_amounts bigint[], p_currencies text[])
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_sum bigint;
    v_cur text;
BEGIN
    FOREACH v_cur IN ARRAY ARRAY(SELECT DISTINCT c FROM unnest(p_currencies) AS c) LOOP
        v_sum := 0;
        FOR i IN 1 .. array_length(p_amounts, 1) LOOP
            IF p_currencies[i] = v_cur THEN
                v_sum := v_sum + p_amounts[i];
            END IF;
        END LOOP;
        IF v_sum <> 0 THEN
            RAISE EXCEPTION 'transaction % is unbalanced: % sums to %', p_id, v_cur, v_sum
                USING ERRCODE = 'HW011', CONSTRAINT = 'lines_balanced';
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION ledger.post(
    p_id text, p_home_bucket smallint, p_type text, p_actor text, p_ref text,
    p_request_hash bytea, p_parts_balanced boolean, p_refund_of text, p_metadata jsonb,
    p_buckets smallint[], p_accounts text[], p_amounts bigint[], p_currencies text[],
    p_options jsonb
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    n_legs   int := coalesce(array_length(p_accounts, 1), 0);
    v_parts  smallint[];
    v_b      smallint;
    v_row    record;
    v_at     timestamptz;
    -- the locked accounts, in lock order
    a_bucket smallint[] := '{}';
    a_id     text[] := '{}';
    a_role   text[] := '{}';
    a_cur    text[] := '{}';
    a_bal    bigint[] := '{}';
    a_bal0   bigint[] := '{}';
    a_held   bigint[] := '{}';
    a_dheld  bigint[] := '{}';
    a_ver    bigint[] := '{}';
    a_hash   bytea[] := '{}';
    a_debit  bigint[] := '{}';
    a_moved  boolean[] := '{}';
    n_acc    int := 0;
    l_acc    int[] := '{}';          -- per leg: index into the a_ arrays
    amounts  bigint[] := p_amounts;  -- the legs' amounts as decided under the locks
    i int; j int; k int;
    v_missing text;
    v_opt    jsonb;
    v_left   bigint;
    v_take   bigint;
    v_total  bigint;
    v_hold   record;
    v_batch  record;
    v_hold_leg int;
    -- batch changes: remaining -= amount (a refund restores with a negative amount)
    s_bucket smallint[] := '{}'; s_batch text[] := '{}'; s_amt bigint[] := '{}';
    -- the lines to append
    o_bucket smallint[] := '{}'; o_acc text[] := '{}'; o_ver bigint[] := '{}';
    o_amt bigint[] := '{}'; o_cur text[] := '{}'; o_bal bigint[] := '{}'; o_hash bytea[] := '{}';
    v_lines  jsonb := '[]';
BEGIN
    IF n_legs = 0 OR array_length(p_amounts, 1) IS DISTINCT FROM n_legs
       OR array_length(p_buckets, 1) IS DISTINCT FROM n_legs
       OR array_length(p_currencies, 1) IS DISTINCT FROM n_legs THEN
        RAISE EXCEPTION 'a posting needs legs of equal length arrays' USING ERRCODE = 'HW008',
            DETAIL = jsonb_build_object('reason', 'legs')::text;
    END IF;

    -- 1. A known id is a replay (or a reused id), answered before any lock is taken.
    PERFORM 1 FROM ledger.transactions WHERE bucket = p_home_bucket AND id = p_id;
    IF FOUND THEN
        RETURN ledger.replay(p_home_bucket, p_id, p_request_hash);
    END IF;

    -- 2. Lock every account, bucket by bucket in ascending order and by id within a bucket:
    --    one global order, so two postings over the same accounts can never wait on each
    --    other in a cycle. One locking statement per bucket keeps each single-shard on Citus.
    --    (An id names its bucket in its first four digits, so `id = ANY (p_accounts)` finds
    --    only this bucket's accounts.)
    v_parts := ARRAY[p_home_bucket];
    FOR i IN 1 .. n_legs LOOP
        IF NOT p_buckets[i] = ANY (v_parts) THEN
            v_parts := v_parts || p_buckets[i];
        END IF;
    END LOOP;
    IF array_length(v_parts, 1) > 1 THEN
        v_parts := ARRAY(SELECT b FROM unnest(v_parts) AS b ORDER BY b);
    END IF;
    FOREACH v_b IN ARRAY v_parts LOOP
        FOR v_row IN
            SELECT id, role, currency, balance, held, version, last_hash
              FROM ledger.accounts WHERE bucket = v_b AND id = ANY (p_accounts) ORDER BY id FOR UPDATE
        LOOP
            n_acc := n_acc + 1;
            a_bucket[n_acc] := v_b; a_id[n_acc] := v_row.id; a_role[n_acc] := v_row.role;
            a_cur[n_acc] := v_row.currency; a_bal[n_acc] := v_row.balance; a_bal0[n_acc] := v_row.balance;
            a_held[n_acc] := v_row.held; a_dheld[n_acc] := 0; a_ver[n_acc] := v_row.version;
            a_hash[n_acc] := v_row.last_hash; a_debit[n_acc] := 0; a_moved[n_acc] := false;
        END LOOP;
    END LOOP;

    FOR i IN 1 .. n_legs LOOP
        l_acc[i] := NULL;
        FOR j IN 1 .. n_acc LOOP
            IF a_id[j] = p_accounts[i] AND a_bucket[j] = p_buckets[i] THEN
                l_acc[i] := j;
                EXIT;
            END IF;
        END LOOP;
        -- a customer's missing account is the likelier news than a system one
        IF l_acc[i] IS NULL AND (v_missing IS NULL OR position(':sys:' IN v_missing) > 0) THEN
            v_missing := p_accounts[i];
        END IF;
    END LOOP;
    IF v_missing IS NOT NULL THEN
        RETURN ledger.refusal('HW002', format('no account %s', v_missing),
                              jsonb_build_object('account', v_missing));
    END IF;
    FOR i IN 1 .. n_legs LOOP
        IF a_cur[l_acc[i]] <> p_currencies[i] THEN
            RETURN ledger.refusal('HW004',
                format('account %s holds %s, not %s', p_accounts[i], a_cur[l_acc[i]], p_currencies[i]),
                jsonb_build_object('account', p_accounts[i], 'account_currency', a_cur[l_acc[i]],
                                   'currency', p_currencies[i]));
        END IF;
    END LOOP;

    -- The time of the posting is read after the locks: every later posting on these accounts
    -- waited for this one to commit, so posted_at grows with the accounts' versions.
    v_at := clock_timestamp();

    -- 3. Options that decide amounts under the locks. They read; writing waits for step 5.
    IF p_options IS NOT NULL AND p_options <> '{}'::jsonb THEN
        -- A hold captured by this posting: its whole amount leaves `held` as the leg takes
        -- (at most) that much.
        v_opt := p_options -> 'capture_hold';
        IF v_opt IS NOT NULL THEN
            v_hold_leg := (v_opt ->> 'leg')::int;
            i := v_hold_leg;
            SELECT amount, status INTO v_hold FROM ledger.holds
             WHERE bucket = p_buckets[i] AND account_id = p_accounts[i] AND key = v_opt ->> 'key' FOR UPDATE;
            IF NOT FOUND OR v_hold.status <> 'pending' THEN
                RETURN ledger.refusal('HW005', format('hold %s on %s is not pending', v_opt ->> 'key', p_accounts[i]),
                    jsonb_build_object('account', p_accounts[i], 'key', v_opt ->> 'key',
                                       'status', coalesce(v_hold.status, 'missing')));
            END IF;
            IF -amounts[i] > v_hold.amount THEN
                RETURN ledger.refusal('HW005', format('capture of %s exceeds hold of %s', -amounts[i], v_hold.amount),
                    jsonb_build_object('account', p_accounts[i], 'key', v_opt ->> 'key',
                                       'status', 'exceeded', 'held', v_hold.amount));
            END IF;
            a_dheld[l_acc[i]] := a_dheld[l_acc[i]] - v_hold.amount;
        END IF;

        -- A payment that spends promo first: the promo leg takes what the live batches hold,
        -- earliest expiry first, and the cash leg the rest.
        v_opt := p_options -> 'spend_promo';
        IF v_opt IS NOT NULL THEN
            i := (v_opt ->> 'promo_leg')::int;
            j := (v_opt ->> 'cash_leg')::int;
            v_total := (v_opt ->> 'total')::bigint;
            v_left := v_total;
            FOR v_batch IN
                SELECT id, remaining FROM ledger.promo_batches
                 WHERE bucket = p_buckets[i] AND account_id = p_accounts[i] AND remaining > 0
                   AND expires_at > v_at
                 ORDER BY expires_at, id FOR UPDATE
            LOOP
                EXIT WHEN v_left = 0;
                v_take := least(v_left, v_batch.remaining);
                s_bucket := s_bucket || p_buckets[i]; s_batch := s_batch || v_batch.id; s_amt := s_amt || v_take;
                v_left := v_left - v_take;
            END LOOP;
            amounts[i] := -(v_total - v_left);
            amounts[j] := -v_left;
        END IF;

        -- Promo expiry: what is left in the batch goes back to its funder or to breakage.
        v_opt := p_options -> 'expire_promo';
        IF v_opt IS NOT NULL THEN
            i := (v_opt ->> 'promo_leg')::int;
            j := (v_opt ->> 'funder_leg')::int;
            SELECT id, remaining, expires_at, expire_to_bucket, expire_to_account INTO v_batch
              FROM ledger.promo_batches
             WHERE bucket = p_buckets[i] AND id = v_opt ->> 'batch_id' AND account_id = p_accounts[i] FOR UPDATE;
            IF NOT FOUND OR v_batch.remaining = 0 OR v_batch.expires_at > v_at
               OR v_batch.expire_to_account <> p_accounts[j] OR v_batch.expire_to_bucket <> p_buckets[j] THEN
                RETURN ledger.refusal('HW007', format('promo batch %s has nothing to expire', v_opt ->> 'batch_id'),
                    jsonb_build_object('batch', v_opt ->> 'batch_id',
                        'reason', CASE WHEN v_batch.id IS NULL THEN 'missing' WHEN v_batch.remaining = 0 THEN 'empty'
                                       WHEN v_batch.expires_at > v_at THEN 'not_expired' ELSE 'destination' END));
            END IF;
            s_bucket := s_bucket || p_buckets[i]; s_batch := s_batch || v_batch.id; s_amt := s_amt || v_batch.remaining;
            amounts[i] := -v_batch.remaining;
            amounts[j] := v_batch.remaining;
        END IF;

        -- Transit legs (placeholders of 0) take what makes their bucket's part balance by
        -- itself, now that every other amount is final. First, the legs without them must
        -- balance: with transit legs the deferred trigger sees one part at a time, so only
        -- this function, which sees every leg, can check the whole.
        IF p_options ? 'transit_legs' THEN
            PERFORM ledger.assert_balanced(p_id, amounts, p_currencies);
            FOR i IN SELECT (jsonb_array_elements_text(p_options -> 'transit_legs'))::int LOOP
                v_take := 0;
                FOR k IN 1 .. n_legs LOOP
                    IF k <> i AND p_buckets[k] = p_buckets[i] AND p_currencies[k] = p_currencies[i] THEN
                        v_take := v_take - amounts[k];
                    END IF;
                END LOOP;
                amounts[i] := v_take;
            END LOOP;
        END IF;
    END IF;

    -- A refund puts spent promo back into the batches it came from.
    IF p_refund_of IS NOT NULL THEN
        FOR v_batch IN
            SELECT s.bucket, s.batch_id, sum(s.amount) AS amount FROM ledger.promo_spends s
             WHERE s.bucket = ANY (v_parts) AND s.transaction_id = p_refund_of
             GROUP BY s.bucket, s.batch_id ORDER BY s.bucket, s.batch_id
        LOOP
            s_bucket := s_bucket || v_batch.bucket; s_batch := s_batch || v_batch.batch_id;
            s_amt := s_amt || -v_batch.amount;
        END LOOP;
    END IF;

    -- 4. Lines: apply each leg to its account in leg order, then check customers' money.
    FOR i IN 1 .. n_legs LOOP
        CONTINUE WHEN amounts[i] = 0;  -- a promo or cash share, or a transit leg, that came to nothing
        j := l_acc[i];
        IF amounts[i] < 0 THEN
            a_debit[j] := a_debit[j] - amounts[i];
        END IF;
        a_moved[j] := true;
        a_bal[j] := a_bal[j] + amounts[i];
        a_ver[j] := a_ver[j] + 1;
        a_hash[j] := ledger.line_hash(a_hash[j], a_id[j], a_ver[j], p_id, amounts[i], a_cur[j],
                                      a_bal[j], p_type, p_ref, v_at);
        o_bucket := o_bucket || a_bucket[j]; o_acc := o_acc || a_id[j]; o_ver := o_ver || a_ver[j];
        o_amt := o_amt || amounts[i]; o_cur := o_cur || a_cur[j]; o_bal := o_bal || a_bal[j];
        o_hash := o_hash || a_hash[j];
        v_lines := v_lines || jsonb_build_object('account', a_id[j], 'version', a_ver[j],
                                                 'amount', amounts[i], 'balance_after', a_bal[j]);
    END LOOP;
    FOR j IN 1 .. n_acc LOOP
        IF a_role[j] = 'user_wallet' AND a_debit[j] > 0 AND a_bal[j] - (a_held[j] + a_dheld[j]) < 0 THEN
            RETURN ledger.refusal('HW001', format('insufficient funds on %s', a_id[j]),
                jsonb_build_object('account', a_id[j], 'balance', a_bal0[j],
                                   'available', a_bal0[j] - a_held[j] - a_dheld[j], 'amount', a_debit[j]));
        END IF;
    END LOOP;
    IF o_acc = '{}' THEN
        RAISE EXCEPTION 'posting % moves nothing', p_id USING ERRCODE = 'HW008',
            DETAIL = jsonb_build_object('reason', 'empty')::text;
    END IF;

    -- 5. Claim the id, then write. A concurrent post of the same id that got here first has
    --    committed by now (we waited on its locks) or is still running on other accounts (the
    --    insert waits for it); either way ON CONFLICT tells us, and it is answered as a replay.
    INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref, request_hash,
                                     parts_balanced, refund_of, metadata, posted_at)
    VALUES (p_home_bucket, p_id, p_home_bucket, v_parts, p_type::ledger.tx_type, p_actor, p_ref, p_request_hash,
            p_parts_balanced, p_refund_of, coalesce(p_metadata, '{}'::jsonb), v_at)
    ON CONFLICT (bucket, id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN ledger.replay(p_home_bucket, p_id, p_request_hash);
    END IF;
    IF array_length(v_parts, 1) > 1 THEN
        INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref, request_hash,
                                         parts_balanced, refund_of, metadata, posted_at)
        SELECT b, p_id, p_home_bucket, v_parts, p_type::ledger.tx_type, p_actor, p_ref, p_request_hash, p_parts_balanced,
               NULL, '{}'::jsonb, v_at
          FROM unnest(v_parts) AS b WHERE b <> p_home_bucket;
    END IF;

    INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,
                              balance_after, type, ref, posted_at, hash)
    SELECT b, acc, ver, p_id, amt, cur, bal, p_type::ledger.tx_type, p_ref, v_at, h
      FROM unnest(o_bucket, o_acc, o_ver, o_amt, o_cur, o_bal, o_hash) AS t(b, acc, ver, amt, cur, bal, h);

    UPDATE ledger.accounts AS a
       SET balance = t.bal, held = a.held + t.dh, version = t.ver, last_hash = t.h
      FROM unnest(a_bucket, a_id, a_bal, a_ver, a_hash, a_dheld, a_moved) AS t(b, id, bal, ver, h, dh, moved)
     WHERE a.bucket = t.b AND a.id = t.id AND (t.moved OR t.dh <> 0);

    IF v_hold_leg IS NOT NULL THEN
        UPDATE ledger.holds SET status = 'captured', transaction_id = p_id, closed_at = v_at
         WHERE bucket = p_buckets[v_hold_leg] AND account_id = p_accounts[v_hold_leg]
           AND key = p_options -> 'capture_hold' ->> 'key';
    END IF;

    IF s_batch <> '{}' THEN
        UPDATE ledger.promo_batches AS pb SET remaining = pb.remaining - t.amt
          FROM unnest(s_bucket, s_batch, s_amt) AS t(b, id, amt)
         WHERE pb.bucket = t.b AND pb.id = t.id;
        INSERT INTO ledger.promo_spends (bucket, transaction_id, batch_id, amount)
        SELECT b, p_id, bid, amt FROM unnest(s_bucket, s_batch, s_amt) AS t(b, bid, amt);
    END IF;

    -- A promo grant opens a batch with the amount its promo leg carried.
    v_opt := p_options -> 'grant_promo';
    IF v_opt IS NOT NULL THEN
        i := (v_opt ->> 'promo_leg')::int;
        j := (v_opt ->> 'funder_leg')::int;
        INSERT INTO ledger.promo_batches (bucket, id, account_id, funder_bucket, funder_account, funded_by,
                                          expire_to_bucket, expire_to_account,
                                          amount, remaining, expires_at, grant_transaction_id, created_at)
        VALUES (p_buckets[i], v_opt ->> 'batch_id', p_accounts[i], p_buckets[j], p_accounts[j],
                v_opt ->> 'funded_by', (v_opt ->> 'expire_to_bucket')::smallint, v_opt ->> 'expire_to',
                amounts[i], amounts[i], (v_opt ->> 'expires_at')::timestamptz, p_id, v_at);
    END IF;

    RETURN jsonb_build_object('id', p_id, 'replayed', false, 'posted_at', v_at, 'lines', v_lines);
END $$;

-- Every statement in ledger.post is an index lookup or a small insert whose best plan does not
-- depend on its parameters; planning them afresh on each call (the custom plans PostgreSQL
-- tries first) cost about a third of a posting when measured.
ALTER FUNCTION ledger.post SET plan_cache_mode = force_generic_plan;

CREATE FUNCTION ledger.place_hold(p_bucket smallint, p_account text, p_key text, p_amount bigint)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_acc  record;
    v_hold record;
    v_at   timestamptz;
BEGIN
    SELECT role, balance, held INTO v_acc FROM ledger.accounts
     WHERE bucket = p_bucket AND id = p_account FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no account %', p_account USING ERRCODE = 'HW002',
            DETAIL = jsonb_build_object('account', p_account)::text;
    END IF;
    SELECT * INTO v_hold FROM ledger.holds WHERE bucket = p_bucket AND account_id = p_account AND key = p_key;
    IF FOUND THEN
        IF v_hold.amount <> p_amount THEN
            RAISE EXCEPTION 'hold key % was used for another amount', p_key USING ERRCODE = 'HW003',
                DETAIL = jsonb_build_object('id', p_key)::text;
        END IF;
        RETURN jsonb_build_object('replayed', true, 'status', v_hold.status, 'amount', v_hold.amount,
                                  'held', v_acc.held, 'balance', v_acc.balance);
    END IF;
    IF v_acc.role <> 'user_wallet' THEN
        RAISE EXCEPTION 'holds are for customer accounts' USING ERRCODE = 'HW008',
            DETAIL = jsonb_build_object('reason', 'hold_on_system_account')::text;
    END IF;
    IF v_acc.balance - v_acc.held < p_amount THEN
        RAISE EXCEPTION 'insufficient funds on %', p_account USING ERRCODE = 'HW001',
            DETAIL = jsonb_build_object('account', p_account, 'balance', v_acc.balance,
                                        'available', v_acc.balance - v_acc.held, 'amount', p_amount)::text;
    END IF;
    v_at := clock_timestamp();
    INSERT INTO ledger.holds (bucket, account_id, key, amount, created_at)
    VALUES (p_bucket, p_account, p_key, p_amount, v_at);
    UPDATE ledger.accounts SET held = held + p_amount WHERE bucket = p_bucket AND id = p_account;
    RETURN jsonb_build_object('replayed', false, 'status', 'pending', 'amount', p_amount,
                              'held', v_acc.held + p_amount, 'balance', v_acc.balance);
END $$;

-- Release a pending hold, once. Releasing a released hold answers as before; a captured hold
-- cannot be released.
CREATE FUNCTION ledger.release_hold(p_bucket smallint, p_account text, p_key text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_acc  record;
    v_hold record;
BEGIN
    -- The account first, then the hold: the same order as ledger.post, so no deadlock.
    SELECT balance, held INTO v_acc FROM ledger.accounts
     WHERE bucket = p_bucket AND id = p_account FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no account %', p_account USING ERRCODE = 'HW002',
            DETAIL = jsonb_build_object('account', p_account)::text;
    END IF;
    SELECT * INTO v_hold FROM ledger.holds
     WHERE bucket = p_bucket AND account_id = p_account AND key = p_key FOR UPDATE;
    IF NOT FOUND OR v_hold.status = 'captured' THEN
        RAISE EXCEPTION 'hold % on % cannot be released', p_key, p_account USING ERRCODE = 'HW005',
            DETAIL = jsonb_build_object('account', p_account, 'key', p_key,
                                        'status', coalesce(v_hold.status, 'missing'))::text;
    END IF;
    IF v_hold.status = 'released' THEN
        RETURN jsonb_build_object('replayed', true, 'status', 'released', 'amount', v_hold.amount,
                                  'held', v_acc.held, 'balance', v_acc.balance);
    END IF;
    UPDATE ledger.holds SET status = 'released', closed_at = clock_timestamp()
     WHERE bucket = p_bucket AND account_id = p_account AND key = p_key;
    UPDATE ledger.accounts SET held = held - v_hold.amount WHERE bucket = p_bucket AND id = p_account;
    RETURN jsonb_build_object('replayed', false, 'status', 'released', 'amount', v_hold.amount,
                              'held', v_acc.held - v_hold.amount, 'balance', v_acc.balance);
END $$;

-- Plain postings (no promo, hold or refund options) as one set: one statement locks every
-- account of the batch, the postings are applied in order in memory, then one insert writes
-- all part rows, one all lines and one update all balances. Per posting that leaves the
-- arithmetic and the rows themselves; the statements are paid once per batch. Each posting is
-- answered exactly as ledger.post would answer it, in order: a later posting sees what an
-- earlier one of the batch moved, a refused one moves nothing, and an id repeated in the batch
-- is a replay (or reused) of the earlier posting unless that one was refused.
CREATE FUNCTION ledger.post_many(
    p_ids text[], p_homes smallint[], p_types text[], p_actors text[], p_refs text[],
    p_hashes bytea[], p_parts_balanced boolean, p_metadata jsonb[],
    p_leg_counts int[], p_buckets smallint[], p_accounts text[], p_amounts bigint[],
    p_currencies text[], p_options jsonb[]
) RETURNS jsonb[] LANGUAGE plpgsql AS $$
DECLARE
    n        int := coalesce(array_length(p_ids, 1), 0);
    results  jsonb[] := '{}';
    v_at     timestamptz;
    v_row    record;
    -- the locked accounts
    a_bucket smallint[] := '{}'; a_id text[] := '{}'; a_role text[] := '{}'; a_cur text[] := '{}';
    a_bal bigint[] := '{}'; a_held bigint[] := '{}'; a_ver bigint[] := '{}'; a_hash bytea[] := '{}';
    a_moved boolean[] := '{}';
    n_acc    int := 0;
    -- per posting
    l_acc    int[];
    amounts  bigint[];
    v_parts  smallint[];
    v_lines  jsonb;
    v_refusal jsonb;
    v_net    bigint;
    v_debit  bigint;
    -- ids answered in this batch, and by which posting
    done_ids text[] := '{}';
    done_at  int[] := '{}';
    -- rows to write
    t_bucket smallint[] := '{}'; t_id text[] := '{}'; t_home smallint[] := '{}'; t_buckets text[] := '{}';
    t_type text[] := '{}'; t_actor text[] := '{}'; t_ref text[] := '{}'; t_hash bytea[] := '{}';
    t_meta jsonb[] := '{}';
    o_bucket smallint[] := '{}'; o_acc text[] := '{}'; o_ver bigint[] := '{}'; o_tx text[] := '{}';
    o_amt bigint[] := '{}'; o_cur text[] := '{}'; o_bal bigint[] := '{}'; o_type text[] := '{}';
    o_ref text[] := '{}'; o_hash bytea[] := '{}';
    s int := 1; e int; i int; j int; k int; m int; x int;
BEGIN
    -- Every account of the batch, locked in (bucket, id) order by one statement: the same
    -- global order as ledger.post, so batches and single postings cannot deadlock.
    FOR v_row IN
        SELECT a.bucket, a.id, a.role, a.currency, a.balance, a.held, a.version, a.last_hash
          FROM ledger.accounts a
          JOIN (SELECT DISTINCT b, id FROM unnest(p_buckets, p_accounts) AS k(b, id)) AS k
            ON a.bucket = k.b AND a.id = k.id
         ORDER BY a.bucket, a.id
           FOR UPDATE OF a
    LOOP
        n_acc := n_acc + 1;
        a_bucket[n_acc] := v_row.bucket; a_id[n_acc] := v_row.id; a_role[n_acc] := v_row.role;
        a_cur[n_acc] := v_row.currency; a_bal[n_acc] := v_row.balance; a_held[n_acc] := v_row.held;
        a_ver[n_acc] := v_row.version; a_hash[n_acc] := v_row.last_hash; a_moved[n_acc] := false;
    END LOOP;
    v_at := clock_timestamp();

    FOR i IN 1 .. n LOOP
        e := s + p_leg_counts[i] - 1;
        v_refusal := NULL;

        -- 1. A repeated id: answered by its earlier posting in this batch (unless that one was
        --    refused, which left the id free), or by the ledger.
        x := array_position(done_ids, p_ids[i]);
        IF x IS NOT NULL AND NOT results[done_at[x]] ? 'error' THEN
            IF p_hashes[done_at[x]] = p_hashes[i] THEN
                results := results || (results[done_at[x]] || '{"replayed": true}'::jsonb);
            ELSE
                results := results || ledger.refusal('HW003',
                    format('transaction id %s was used for another request', p_ids[i]),
                    jsonb_build_object('id', p_ids[i]));
            END IF;
            s := e + 1;
            CONTINUE;
        ELSIF x IS NULL THEN
            PERFORM 1 FROM ledger.transactions WHERE bucket = p_homes[i] AND id = p_ids[i];
            IF FOUND THEN
                results := results || ledger.replay(p_homes[i], p_ids[i], p_hashes[i]);
                s := e + 1;
                CONTINUE;
            END IF;
            done_ids := done_ids || p_ids[i];
            done_at := done_at || i;
        ELSE
            done_at[x] := i;  -- a new attempt of an id whose earlier posting was refused
        END IF;

        -- 2. Its legs: accounts (an id names its bucket, so the id alone finds it), currencies.
        l_acc := '{}';
        amounts := p_amounts[s:e];
        v_parts := ARRAY[p_homes[i]];
        FOR k IN s .. e LOOP
            j := array_position(a_id, p_accounts[k]);
            IF j IS NULL OR a_bucket[j] <> p_buckets[k] THEN
                v_refusal := ledger.refusal('HW002', format('no account %s', p_accounts[k]),
                                            jsonb_build_object('account', p_accounts[k]));
                EXIT;
            END IF;
            IF a_cur[j] <> p_currencies[k] THEN
                v_refusal := ledger.refusal('HW004',
                    format('account %s holds %s, not %s', p_accounts[k], a_cur[j], p_currencies[k]),
                    jsonb_build_object('account', p_accounts[k], 'account_currency', a_cur[j],
                                       'currency', p_currencies[k]));
                EXIT;
            END IF;
            l_acc := l_acc || j;
            IF NOT p_buckets[k] = ANY (v_parts) THEN
                v_parts := v_parts || p_buckets[k];
            END IF;
        END LOOP;

        -- Transit legs take what makes their bucket's part balance by itself, once the legs
        -- without them are seen to balance (as in ledger.post).
        IF v_refusal IS NULL AND p_options[i] ? 'transit_legs' THEN
            PERFORM ledger.assert_balanced(p_ids[i], amounts, p_currencies[s:e]);
            FOR k IN SELECT (jsonb_array_elements_text(p_options[i] -> 'transit_legs'))::int LOOP
                v_net := 0;
                FOR m IN 1 .. p_leg_counts[i] LOOP
                    IF m <> k AND p_buckets[s + m - 1] = p_buckets[s + k - 1]
                       AND p_currencies[s + m - 1] = p_currencies[s + k - 1] THEN
                        v_net := v_net - amounts[m];
                    END IF;
                END LOOP;
                amounts[k] := v_net;
            END LOOP;
        END IF;

        -- 3. Customers' money: each account's net move in this posting against what it has.
        IF v_refusal IS NULL THEN
            FOR k IN 1 .. p_leg_counts[i] LOOP
                j := l_acc[k];
                CONTINUE WHEN a_role[j] <> 'user_wallet';
                v_net := 0;
                v_debit := 0;
                FOR m IN 1 .. p_leg_counts[i] LOOP
                    IF l_acc[m] = j THEN
                        v_net := v_net + amounts[m];
                        IF amounts[m] < 0 THEN
                            v_debit := v_debit - amounts[m];
                        END IF;
                    END IF;
                END LOOP;
                IF v_debit > 0 AND a_bal[j] + v_net - a_held[j] < 0 THEN
                    v_refusal := ledger.refusal('HW001', format('insufficient funds on %s', a_id[j]),
                        jsonb_build_object('account', a_id[j], 'balance', a_bal[j],
                                           'available', a_bal[j] - a_held[j], 'amount', v_debit));
                    EXIT;
                END IF;
            END LOOP;
        END IF;

        IF v_refusal IS NOT NULL THEN
            results := results || v_refusal;
            s := e + 1;
            CONTINUE;
        END IF;

        -- 4. Apply: lines with balance, version and hash; one part row per bucket.
        v_lines := '[]';
        FOR k IN 1 .. p_leg_counts[i] LOOP
            CONTINUE WHEN amounts[k] = 0;
            j := l_acc[k];
            a_bal[j] := a_bal[j] + amounts[k];
            a_ver[j] := a_ver[j] + 1;
            a_moved[j] := true;
            a_hash[j] := ledger.line_hash(a_hash[j], a_id[j], a_ver[j], p_ids[i], amounts[k], a_cur[j],
                                          a_bal[j], p_types[i], p_refs[i], v_at);
            o_bucket := o_bucket || a_bucket[j]; o_acc := o_acc || a_id[j]; o_ver := o_ver || a_ver[j];
            o_tx := o_tx || p_ids[i]; o_amt := o_amt || amounts[k]; o_cur := o_cur || a_cur[j];
            o_bal := o_bal || a_bal[j]; o_type := o_type || p_types[i]; o_ref := o_ref || p_refs[i];
            o_hash := o_hash || a_hash[j];
            v_lines := v_lines || jsonb_build_object('account', a_id[j], 'version', a_ver[j],
                                                     'amount', amounts[k], 'balance_after', a_bal[j]);
        END LOOP;
        IF array_length(v_parts, 1) > 1 THEN
            v_parts := ARRAY(SELECT b FROM unnest(v_parts) AS b ORDER BY b);
        END IF;
        FOREACH x IN ARRAY v_parts LOOP
            t_bucket := t_bucket || x::smallint; t_id := t_id || p_ids[i]; t_home := t_home || p_homes[i];
            t_buckets := t_buckets || v_parts::text; t_type := t_type || p_types[i];
            t_actor := t_actor || p_actors[i]; t_ref := t_ref || p_refs[i]; t_hash := t_hash || p_hashes[i];
            t_meta := t_meta || CASE WHEN x = p_homes[i] THEN coalesce(p_metadata[i], '{}'::jsonb)
                                     ELSE '{}'::jsonb END;
        END LOOP;
        results := results || jsonb_build_object('id', p_ids[i], 'replayed', false, 'posted_at', v_at,
                                                  'lines', v_lines);
        s := e + 1;
    END LOOP;

    -- 5. Write it all. A concurrent writer of one of these ids makes the insert fail, and the
    --    caller posts the batch again one posting at a time.
    IF t_id <> '{}' THEN
        INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref, request_hash,
                                         parts_balanced, refund_of, metadata, posted_at)
        SELECT b, id, home, bs::smallint[], ty::ledger.tx_type, act, rf, h, p_parts_balanced, NULL, md, v_at
          FROM unnest(t_bucket, t_id, t_home, t_buckets, t_type, t_actor, t_ref, t_hash, t_meta)
            AS t(b, id, home, bs, ty, act, rf, h, md);
        INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,
                                  balance_after, type, ref, posted_at, hash)
        SELECT b, acc, ver, tx, amt, cur, bal, ty::ledger.tx_type, rf, v_at, h
          FROM unnest(o_bucket, o_acc, o_ver, o_tx, o_amt, o_cur, o_bal, o_type, o_ref, o_hash)
            AS t(b, acc, ver, tx, amt, cur, bal, ty, rf, h);
        UPDATE ledger.accounts AS a
           SET balance = t.bal, version = t.ver, last_hash = t.h
          FROM unnest(a_bucket, a_id, a_bal, a_ver, a_hash, a_moved) AS t(b, id, bal, ver, h, moved)
         WHERE a.bucket = t.b AND a.id = t.id AND t.moved;
    END IF;
    RETURN results;
END $$;

ALTER FUNCTION ledger.post_many SET plan_cache_mode = force_generic_plan;

-- Many postings in one database transaction and one round trip, with an answer for each (a
-- result or a refusal). A refused posting wrote nothing (see ledger.post), so no subtransaction
-- is needed; any other error aborts the batch. The legs of all postings come flattened, with
-- p_leg_counts saying how many belong to each. Plain postings go through ledger.post_many; a
-- batch with promo, hold or refund options is posted one posting at a time.
CREATE FUNCTION ledger.post_batch(
    p_ids text[], p_homes smallint[], p_types text[], p_actors text[], p_refs text[],
    p_hashes bytea[], p_parts_balanced boolean, p_refund_ofs text[], p_metadata jsonb[],
    p_leg_counts int[], p_buckets smallint[], p_accounts text[], p_amounts bigint[],
    p_currencies text[], p_options jsonb[]
) RETURNS jsonb[] LANGUAGE plpgsql AS $$
DECLARE
    results jsonb[] := '{}';
    s int := 1;
    e int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM unnest(p_refund_ofs) AS r WHERE r IS NOT NULL)
       AND NOT EXISTS (SELECT 1 FROM unnest(p_options) AS o WHERE (o - 'transit_legs') <> '{}'::jsonb) THEN
        RETURN ledger.post_many(p_ids, p_homes, p_types, p_actors, p_refs, p_hashes, p_parts_balanced,
                                p_metadata, p_leg_counts, p_buckets, p_accounts, p_amounts, p_currencies,
                                p_options);
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        e := s + p_leg_counts[i] - 1;
        results := results || ledger.post(
            p_ids[i], p_homes[i], p_types[i], p_actors[i], p_refs[i], p_hashes[i], p_parts_balanced,
            p_refund_ofs[i], p_metadata[i], p_buckets[s:e], p_accounts[s:e], p_amounts[s:e],
            p_currencies[s:e], p_options[i]);
        s := e + 1;
    END LOOP;
    RETURN results;
END $$;

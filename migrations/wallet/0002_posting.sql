-- The one posting operation. Everything that moves money calls ledger.post once, in one
-- database transaction: claim the id, lock the accounts in (bucket, id) order, check balances,
-- append the lines with their balance, version and hash, and update the balances.
--
-- Why one server-side function: it is one round trip instead of about eight, no row lock is
-- held across a network round trip, and on Citus it can be delegated to the worker that owns
-- the home bucket (docs/ledger-citus.md).
--
-- Errors carry a HiWallet SQLSTATE (class HW) and a JSON detail that the Python store turns
-- into typed errors:
--   HW001 insufficient funds     HW002 account not found      HW003 id reused
--   HW004 currency mismatch      HW005 hold not usable        HW006 not refundable
--   HW007 promo batch not usable HW008 bad posting           (HW010, HW011 in 0001)

-- The hash of a line: over its content and the previous line of its account.
CREATE FUNCTION ledger.line_hash(
    p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint,
    p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamptz
) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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
    SELECT p_bucket, v_prefix || r.name || ':' || p_currency, r.role, p_currency, clock_timestamp()
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

-- The answer to a post whose id exists: the stored transaction if the request is the same,
-- HW003 if it is not.
CREATE FUNCTION ledger.replay(p_home_bucket smallint, p_id text, p_request_hash bytea)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_tx record;
BEGIN
    SELECT * INTO v_tx FROM ledger.transactions WHERE bucket = p_home_bucket AND id = p_id;
    IF v_tx.request_hash <> p_request_hash THEN
        RAISE EXCEPTION 'transaction id % was used for another request', p_id
            USING ERRCODE = 'HW003', DETAIL = jsonb_build_object('id', p_id)::text;
    END IF;
    RETURN jsonb_build_object(
        'id', v_tx.id, 'replayed', true, 'posted_at', v_tx.posted_at,
        'lines', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'account', l.account_id, 'version', l.version, 'amount', l.amount,
                        'balance_after', l.balance_after) ORDER BY l.bucket, l.account_id, l.version), '[]'::jsonb)
                    FROM ledger.lines l
                   WHERE l.bucket = ANY (v_tx.buckets) AND l.transaction_id = p_id));
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
    a_ver    bigint[] := '{}';
    a_hash   bytea[] := '{}';
    a_debit  bigint[] := '{}';
    n_acc    int := 0;
    -- per leg: index into the a_ arrays
    l_acc    int[] := '{}';
    amounts  bigint[] := p_amounts;
    i int; j int;
    v_ids    text[];
    v_found  int;
    v_opt    jsonb;
    v_left   bigint;
    v_take   bigint;
    v_total  bigint;
    v_hold   record;
    v_batch  record;
    -- lines to insert
    o_bucket smallint[] := '{}'; o_acc text[] := '{}'; o_ver bigint[] := '{}';
    o_amt bigint[] := '{}'; o_cur text[] := '{}'; o_bal bigint[] := '{}'; o_hash bytea[] := '{}';
    spends_batch text[] := '{}'; spends_bucket smallint[] := '{}'; spends_amt bigint[] := '{}';
    v_held_change bigint[] := '{}';
BEGIN
    IF n_legs = 0 OR array_length(p_amounts, 1) <> n_legs OR array_length(p_buckets, 1) <> n_legs
       OR array_length(p_currencies, 1) <> n_legs THEN
        RAISE EXCEPTION 'a posting needs legs of equal length arrays' USING ERRCODE = 'HW008',
            DETAIL = jsonb_build_object('reason', 'legs')::text;
    END IF;

    -- 1. A known id is a replay (or a reused id). Checked before any lock: a replay costs
    --    one index lookup.
    PERFORM 1 FROM ledger.transactions WHERE bucket = p_home_bucket AND id = p_id;
    IF FOUND THEN
        RETURN ledger.replay(p_home_bucket, p_id, p_request_hash);
    END IF;

    -- 2. Lock every account, bucket by bucket in ascending order and by id within a bucket:
    --    one global order, so two postings over the same accounts can never wait on each
    --    other in a cycle. One locking statement per bucket keeps each single-shard on Citus.
    v_parts := ARRAY(SELECT DISTINCT b FROM unnest(p_buckets) AS b ORDER BY b);
    IF NOT p_home_bucket = ANY (v_parts) THEN
        v_parts := ARRAY(SELECT DISTINCT b FROM unnest(v_parts || p_home_bucket) AS b ORDER BY b);
    END IF;
    FOREACH v_b IN ARRAY v_parts LOOP
        v_ids := ARRAY(SELECT DISTINCT p_accounts[k] FROM generate_subscripts(p_accounts, 1) AS k
                        WHERE p_buckets[k] = v_b);
        v_found := 0;
        FOR v_row IN
            SELECT id, role, currency, balance, held, version, last_hash
              FROM ledger.accounts WHERE bucket = v_b AND id = ANY (v_ids) ORDER BY id FOR UPDATE
        LOOP
            n_acc := n_acc + 1; v_found := v_found + 1;
            a_bucket[n_acc] := v_b; a_id[n_acc] := v_row.id; a_role[n_acc] := v_row.role;
            a_cur[n_acc] := v_row.currency; a_bal[n_acc] := v_row.balance; a_bal0[n_acc] := v_row.balance; a_held[n_acc] := v_row.held;
            a_ver[n_acc] := v_row.version; a_hash[n_acc] := v_row.last_hash; a_debit[n_acc] := 0;
            v_held_change[n_acc] := 0;
        END LOOP;
        IF v_found < coalesce(array_length(v_ids, 1), 0) THEN
            SELECT x INTO v_row FROM unnest(v_ids) AS x
             WHERE NOT EXISTS (SELECT 1 FROM ledger.accounts WHERE bucket = v_b AND id = x)
             ORDER BY split_part(x, ':', 2) = 'sys', x  -- a customer's account is the likelier news
             LIMIT 1;
            RAISE EXCEPTION 'no account %', v_row.x USING ERRCODE = 'HW002',
                DETAIL = jsonb_build_object('account', v_row.x)::text;
        END IF;
    END LOOP;

    FOR i IN 1 .. n_legs LOOP
        FOR j IN 1 .. n_acc LOOP
            IF a_bucket[j] = p_buckets[i] AND a_id[j] = p_accounts[i] THEN
                l_acc[i] := j;
                EXIT;
            END IF;
        END LOOP;
        IF a_cur[l_acc[i]] <> p_currencies[i] THEN
            RAISE EXCEPTION 'account % holds %, not %', p_accounts[i], a_cur[l_acc[i]], p_currencies[i]
                USING ERRCODE = 'HW004', DETAIL = jsonb_build_object('account', p_accounts[i],
                    'account_currency', a_cur[l_acc[i]], 'currency', p_currencies[i])::text;
        END IF;
    END LOOP;

    -- The time of the posting is read after the locks: every later posting on these accounts
    -- waited for this one to commit, so posted_at grows with the accounts' versions.
    v_at := clock_timestamp();

    -- 3. The id, claimed after the locks. A concurrent post of the same id that got here first
    --    has committed by now (we waited on its locks) or is still running on other accounts
    --    (the insert waits for it); either way ON CONFLICT tells us, and it becomes a replay.
    INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref, request_hash,
                                     parts_balanced, refund_of, metadata, posted_at)
    VALUES (p_home_bucket, p_id, p_home_bucket, v_parts, p_type, p_actor, p_ref, p_request_hash,
            p_parts_balanced, p_refund_of, coalesce(p_metadata, '{}'::jsonb), v_at)
    ON CONFLICT (bucket, id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN ledger.replay(p_home_bucket, p_id, p_request_hash);
    END IF;
    INSERT INTO ledger.transactions (bucket, id, home_bucket, buckets, type, actor, ref, request_hash,
                                     parts_balanced, refund_of, metadata, posted_at)
    SELECT b, p_id, p_home_bucket, v_parts, p_type, p_actor, p_ref, p_request_hash, p_parts_balanced,
           NULL, '{}'::jsonb, v_at
      FROM unnest(v_parts) AS b WHERE b <> p_home_bucket;

    -- 4. Options that decide amounts under the locks.
    -- A hold captured by this posting: its amount leaves `held` as the leg takes the money.
    v_opt := p_options -> 'capture_hold';
    IF v_opt IS NOT NULL THEN
        i := (v_opt ->> 'leg')::int;
        SELECT * INTO v_hold FROM ledger.holds
         WHERE bucket = p_buckets[i] AND account_id = p_accounts[i] AND key = v_opt ->> 'key' FOR UPDATE;
        IF NOT FOUND OR v_hold.status <> 'pending' THEN
            RAISE EXCEPTION 'hold % on % is not pending', v_opt ->> 'key', p_accounts[i]
                USING ERRCODE = 'HW005', DETAIL = jsonb_build_object('account', p_accounts[i],
                    'key', v_opt ->> 'key', 'status', coalesce(v_hold.status, 'missing'))::text;
        END IF;
        IF -amounts[i] > v_hold.amount THEN
            RAISE EXCEPTION 'capture of % exceeds hold of %', -amounts[i], v_hold.amount
                USING ERRCODE = 'HW005', DETAIL = jsonb_build_object('account', p_accounts[i],
                    'key', v_opt ->> 'key', 'status', 'exceeded', 'held', v_hold.amount)::text;
        END IF;
        UPDATE ledger.holds SET status = 'captured', transaction_id = p_id, closed_at = v_at
         WHERE bucket = p_buckets[i] AND account_id = p_accounts[i] AND key = v_opt ->> 'key';
        v_held_change[l_acc[i]] := v_held_change[l_acc[i]] - v_hold.amount;
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
            UPDATE ledger.promo_batches SET remaining = remaining - v_take
             WHERE bucket = p_buckets[i] AND id = v_batch.id;
            spends_batch := spends_batch || v_batch.id; spends_bucket := spends_bucket || p_buckets[i];
            spends_amt := spends_amt || v_take;
            v_left := v_left - v_take;
        END LOOP;
        amounts[i] := -(v_total - v_left);
        amounts[j] := -v_left;
    END IF;

    -- Promo expiry: what is left in the batch goes back to its funder.
    v_opt := p_options -> 'expire_promo';
    IF v_opt IS NOT NULL THEN
        i := (v_opt ->> 'promo_leg')::int;
        j := (v_opt ->> 'funder_leg')::int;
        SELECT * INTO v_batch FROM ledger.promo_batches
         WHERE bucket = p_buckets[i] AND id = v_opt ->> 'batch_id' AND account_id = p_accounts[i] FOR UPDATE;
        IF NOT FOUND OR v_batch.remaining = 0 OR v_batch.expires_at > v_at
           OR v_batch.expire_to_account <> p_accounts[j] OR v_batch.expire_to_bucket <> p_buckets[j] THEN
            RAISE EXCEPTION 'promo batch % has nothing to expire', v_opt ->> 'batch_id'
                USING ERRCODE = 'HW007', DETAIL = jsonb_build_object('batch', v_opt ->> 'batch_id',
                    'reason', CASE WHEN NOT FOUND THEN 'missing' WHEN v_batch.remaining = 0 THEN 'empty'
                                   WHEN v_batch.expires_at > v_at THEN 'not_expired' ELSE 'destination' END)::text;
        END IF;
        UPDATE ledger.promo_batches SET remaining = 0 WHERE bucket = p_buckets[i] AND id = v_batch.id;
        spends_batch := spends_batch || v_batch.id; spends_bucket := spends_bucket || p_buckets[i];
        spends_amt := spends_amt || v_batch.remaining;
        amounts[i] := -v_batch.remaining;
        amounts[j] := v_batch.remaining;
    END IF;

    -- A refund puts spent promo back into the batches it came from.
    IF p_refund_of IS NOT NULL THEN
        FOR v_batch IN
            SELECT s.bucket, s.batch_id, sum(s.amount) AS amount FROM ledger.promo_spends s
             WHERE s.bucket = ANY (v_parts) AND s.transaction_id = p_refund_of
             GROUP BY s.bucket, s.batch_id ORDER BY s.bucket, s.batch_id
        LOOP
            UPDATE ledger.promo_batches SET remaining = remaining + v_batch.amount
             WHERE bucket = v_batch.bucket AND id = v_batch.batch_id;
            spends_batch := spends_batch || v_batch.batch_id; spends_bucket := spends_bucket || v_batch.bucket;
            spends_amt := spends_amt || -v_batch.amount;
        END LOOP;
    END IF;

    -- Transit legs (placeholders of 0) take what makes their bucket's part balance by itself,
    -- now that every other amount is final.
    IF p_options ? 'transit_legs' THEN
        FOR i IN SELECT (jsonb_array_elements_text(p_options -> 'transit_legs'))::int LOOP
            SELECT -coalesce(sum(amounts[k]), 0) INTO v_take FROM generate_subscripts(p_accounts, 1) AS k
             WHERE p_buckets[k] = p_buckets[i] AND p_currencies[k] = p_currencies[i] AND k <> i;
            amounts[i] := v_take;
        END LOOP;
    END IF;

    -- 5. Lines: apply each leg to its account in leg order, checking customers' money.
    FOR i IN 1 .. n_legs LOOP
        CONTINUE WHEN amounts[i] = 0;  -- a promo or cash share that came to nothing
        j := l_acc[i];
        IF amounts[i] < 0 THEN
            a_debit[j] := a_debit[j] - amounts[i];
        END IF;
        a_bal[j] := a_bal[j] + amounts[i];
        a_ver[j] := a_ver[j] + 1;
        a_hash[j] := ledger.line_hash(a_hash[j], a_id[j], a_ver[j], p_id, amounts[i], a_cur[j],
                                      a_bal[j], p_type, p_ref, v_at);
        o_bucket := o_bucket || a_bucket[j]; o_acc := o_acc || a_id[j]; o_ver := o_ver || a_ver[j];
        o_amt := o_amt || amounts[i]; o_cur := o_cur || a_cur[j]; o_bal := o_bal || a_bal[j];
        o_hash := o_hash || a_hash[j];
    END LOOP;

    FOR j IN 1 .. n_acc LOOP
        IF a_role[j] = 'user_wallet' AND a_debit[j] > 0
           AND a_bal[j] - (a_held[j] + v_held_change[j]) < 0 THEN
            RAISE EXCEPTION 'insufficient funds on %', a_id[j] USING ERRCODE = 'HW001',
                DETAIL = jsonb_build_object(
                    'account', a_id[j],
                    'balance', a_bal0[j],
                    'available', a_bal0[j] - a_held[j] - v_held_change[j],
                    'amount', a_debit[j])::text;
        END IF;
    END LOOP;

    IF array_length(o_acc, 1) IS NULL THEN
        RAISE EXCEPTION 'posting % moves nothing', p_id USING ERRCODE = 'HW008',
            DETAIL = jsonb_build_object('reason', 'empty')::text;
    END IF;

    INSERT INTO ledger.lines (bucket, account_id, version, transaction_id, amount, currency,
                              balance_after, type, ref, posted_at, hash)
    SELECT b, acc, ver, p_id, amt, cur, bal, p_type, p_ref, v_at, h
      FROM unnest(o_bucket, o_acc, o_ver, o_amt, o_cur, o_bal, o_hash) AS t(b, acc, ver, amt, cur, bal, h);

    UPDATE ledger.accounts AS a
       SET balance = t.bal, held = a.held + t.dh, version = t.ver, last_hash = t.h
      FROM unnest(a_bucket, a_id, a_bal, a_ver, a_hash, v_held_change) AS t(b, id, bal, ver, h, dh)
     WHERE a.bucket = t.b AND a.id = t.id AND (a.version <> t.ver OR t.dh <> 0);

    IF array_length(spends_batch, 1) IS NOT NULL THEN
        INSERT INTO ledger.promo_spends (bucket, transaction_id, batch_id, amount)
        SELECT b, p_id, bid, amt FROM unnest(spends_bucket, spends_batch, spends_amt) AS t(b, bid, amt);
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

    RETURN jsonb_build_object(
        'id', p_id, 'replayed', false, 'posted_at', v_at,
        'lines', (SELECT coalesce(jsonb_agg(jsonb_build_object('account', acc, 'version', ver,
                          'amount', amt, 'balance_after', bal) ORDER BY b, acc, ver), '[]'::jsonb)
                    FROM unnest(o_bucket, o_acc, o_ver, o_amt, o_bal) AS t(b, acc, ver, amt, bal)));
END $$;

-- A hold: money set aside on a customer's cash account, keyed by what it is for. The same key
-- with the same amount is answered as it was placed; with another amount it is refused.
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

-- Many postings in one database transaction, with a result for each: a posting refused for a
-- ledger reason (an HW error) is rolled back alone (its own subtransaction) and reported; any
-- other error aborts the batch. One round trip for the whole batch.
CREATE FUNCTION ledger.post_batch(p_items jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    item     jsonb;
    results  jsonb[] := '{}';
    v_state  text;
    v_msg    text;
    v_detail text;
BEGIN
    FOR item IN SELECT value FROM jsonb_array_elements(p_items) LOOP
        BEGIN
            results := results || jsonb_build_object('ok', ledger.post(
                item ->> 'id', (item ->> 'home')::smallint, item ->> 'type', item ->> 'actor',
                item ->> 'ref', decode(item ->> 'hash', 'hex'), (item ->> 'parts_balanced')::boolean,
                item ->> 'refund_of', item -> 'metadata',
                ARRAY(SELECT x::smallint FROM jsonb_array_elements_text(item -> 'buckets') WITH ORDINALITY AS t(x, n) ORDER BY n),
                ARRAY(SELECT x FROM jsonb_array_elements_text(item -> 'accounts') WITH ORDINALITY AS t(x, n) ORDER BY n),
                ARRAY(SELECT x::bigint FROM jsonb_array_elements_text(item -> 'amounts') WITH ORDINALITY AS t(x, n) ORDER BY n),
                ARRAY(SELECT x FROM jsonb_array_elements_text(item -> 'currencies') WITH ORDINALITY AS t(x, n) ORDER BY n),
                item -> 'options'));
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
            IF v_state NOT LIKE 'HW%' THEN
                RAISE;
            END IF;
            results := results || jsonb_build_object('error', jsonb_build_object(
                'sqlstate', v_state, 'message', v_msg, 'detail', coalesce(v_detail, '{}')::jsonb));
        END;
    END LOOP;
    RETURN to_jsonb(results);
END $$;

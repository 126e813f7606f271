-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: ledger; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA ledger;

-- Name: ledger_api; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA ledger_api;

-- Name: wallet; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA wallet;

-- Name: account_role; Type: TYPE; Schema: ledger; Owner: -

CREATE TYPE ledger.account_role AS ENUM (
    'user_wallet',
    'clearing',
    'nostro',
    'revenue',
    'provider_expense',
    'promo_expense',
    'promo_breakage',
    'transit',
    'goodwill_expense'
);

-- Name: posting_in; Type: TYPE; Schema: ledger; Owner: -

CREATE TYPE ledger.posting_in AS (
	id text,
	home smallint,
	type text,
	actor text,
	ref text,
	request_hash bytea,
	parts_balanced boolean,
	refund_of text,
	metadata jsonb,
	buckets smallint[],
	accounts text[],
	amounts bigint[],
	currencies text[],
	options jsonb
);

-- Name: purse; Type: TYPE; Schema: ledger; Owner: -

CREATE TYPE ledger.purse AS ENUM (
    'cash',
    'promo'
);

-- Name: tx_type; Type: TYPE; Schema: ledger; Owner: -

CREATE TYPE ledger.tx_type AS ENUM (
    'topup',
    'p2p',
    'payment',
    'b2p',
    'b2b',
    'promo_grant',
    'promo_expiry',
    'withdrawal',
    'refund',
    'settlement_topup',
    'settlement_withdrawal',
    'provider_invoice',
    'hold_capture',
    'debit',
    'sweep',
    'goodwill'
);

-- Name: posting_in; Type: DOMAIN; Schema: ledger_api; Owner: -

CREATE DOMAIN ledger_api.posting_in AS ledger.posting_in;

-- Name: assert_balanced(text, bigint[], text[]); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.assert_balanced(p_id text, p_amounts bigint[], p_currencies text[]) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
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

-- Name: check_balanced(); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.check_balanced() RETURNS trigger
    LANGUAGE plpgsql
    SET jit TO 'off'
    AS $$
DECLARE
    v record;
BEGIN
    -- One pass, two index probes a line: each line names an existing account and transaction
    -- part (probes, not foreign keys: an FK check locks the referenced row for every line),
    -- and the statement's lines of each transaction (of each part, with transit legs) sum to
    -- zero per currency. The probes are scalar subqueries behind OFFSET 0 on purpose: the
    -- plan is cached for the session, and a join or a hashed EXISTS planned for a batch of
    -- 1,000 lines scans whole tables, which it would go on doing for the batches of two that
    -- follow (measured: 3 ms a call); a scalar subquery is always an index probe per line.
    SELECT x.transaction_id, x.currency, sum(x.amount) AS total,
           min(x.account_id || ' v' || x.version) FILTER (WHERE x.has_account IS NULL) AS no_account,
           min(x.account_id || ' v' || x.version) FILTER (WHERE x.parts_balanced IS NULL) AS no_part
      INTO v
      FROM (SELECT n.transaction_id, n.currency, n.amount, n.account_id, n.version, n.bucket,
                   (SELECT true FROM ledger.accounts a
                     WHERE a.bucket = n.bucket AND a.id = n.account_id) AS has_account,
                   -- not null in the table: null here means no such part
                   (SELECT t.parts_balanced FROM ledger.transactions t
                     WHERE t.bucket = n.bucket AND t.id = n.transaction_id) AS parts_balanced
              FROM new_lines n
            OFFSET 0) AS x
     GROUP BY x.transaction_id, x.currency, CASE WHEN x.parts_balanced THEN x.bucket END
    HAVING sum(x.amount) <> 0 OR bool_or(x.has_account IS NULL) OR bool_or(x.parts_balanced IS NULL)
     ORDER BY bool_or(x.has_account IS NULL OR x.parts_balanced IS NULL) DESC
     LIMIT 1;
    IF v.no_account IS NOT NULL OR v.no_part IS NOT NULL THEN
        RAISE EXCEPTION 'line % names no %', coalesce(v.no_account, v.no_part),
            CASE WHEN v.no_account IS NOT NULL THEN 'account' ELSE 'transaction part ' || v.transaction_id END
            USING ERRCODE = 'HW012', CONSTRAINT = 'lines_belong';
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'transaction % is unbalanced: % sums to %', v.transaction_id, v.currency, v.total
            USING ERRCODE = 'HW011', CONSTRAINT = 'lines_balanced';
    END IF;
    RETURN NULL;
END $$;

-- Name: ensure_system_accounts(smallint, text, text[]); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.ensure_system_accounts(p_bucket smallint, p_currency text, p_providers text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
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
        UNION ALL SELECT 'goodwill_expense', 'goodwill_expense' WHERE p_bucket = 0
      ) AS r
    ON CONFLICT (bucket, id) DO NOTHING;
END $$;

-- Name: line_hash(bytea, text, bigint, text, bigint, text, bigint, text, text, timestamp with time zone); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.line_hash(p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint, p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamp with time zone) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT sha256(p_prev || convert_to(concat_ws(E'\x1f',
        p_account_id, p_version::text, p_transaction_id, p_amount::text, p_currency,
        p_balance_after::text, p_type, p_ref,
        (extract(epoch FROM p_posted_at) * 1000000)::bigint::text), 'UTF8'))
$$;

-- Name: open_account(smallint, text, text, text, text); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.open_account(p_bucket smallint, p_id text, p_purse text, p_currency text, p_owner text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
    INSERT INTO ledger.accounts (bucket, id, role, purse, currency, owner, created_at)
    VALUES (p_bucket, p_id, 'user_wallet', p_purse::ledger.purse, p_currency, p_owner, clock_timestamp())
    ON CONFLICT (bucket, id) DO NOTHING
$$;

-- Name: open_accounts(smallint[], text[], text[], text, text); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.open_accounts(p_buckets smallint[], p_ids text[], p_purses text[], p_currency text, p_owner text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
    INSERT INTO ledger.accounts (bucket, id, role, purse, currency, owner, created_at)
    SELECT a.bucket, a.id, 'user_wallet', a.purse::ledger.purse, p_currency, p_owner, clock_timestamp()
      FROM unnest(p_buckets, p_ids, p_purses) AS a (bucket, id, purse)
     ORDER BY a.bucket, a.id
    ON CONFLICT (bucket, id) DO NOTHING
$$;

-- Name: place_hold(smallint, text, text, bigint); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.place_hold(p_bucket smallint, p_account text, p_key text, p_amount bigint) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
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

-- Name: post(text, smallint, text, text, text, bytea, boolean, text, jsonb, smallint[], text[], bigint[], text[], jsonb); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.post(p_id text, p_home_bucket smallint, p_type text, p_actor text, p_ref text, p_request_hash bytea, p_parts_balanced boolean, p_refund_of text, p_metadata jsonb, p_buckets smallint[], p_accounts text[], p_amounts bigint[], p_currencies text[], p_options jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
BEGIN
    RETURN (ledger.post_batch(ARRAY[ROW(
        p_id, p_home_bucket, p_type, p_actor, p_ref, p_request_hash, p_parts_balanced, p_refund_of,
        p_metadata, p_buckets, p_accounts, p_amounts, p_currencies, p_options)::ledger.posting_in], true))[1];
END $$;

-- Name: post_batch(ledger.posting_in[], boolean); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.post_batch(p_postings ledger.posting_in[], p_replay_on_conflict boolean DEFAULT false) RETURNS jsonb[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET plan_cache_mode TO 'force_generic_plan'
    SET jit TO 'off'
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
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

-- Name: refusal(text, text, jsonb); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.refusal(p_state text, p_message text, p_detail jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT jsonb_build_object('error', jsonb_build_object('sqlstate', p_state, 'message', p_message,
                                                          'detail', p_detail))
$$;

-- Name: refuse_change(); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'ledger.% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'HW010';
END $$;

-- Name: release_hold(smallint, text, text); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.release_hold(p_bucket smallint, p_account text, p_key text) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
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

-- Name: replay(smallint, text, bytea); Type: FUNCTION; Schema: ledger; Owner: -

CREATE FUNCTION ledger.replay(p_home_bucket smallint, p_id text, p_request_hash bytea) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
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

-- Name: post_batch(ledger.posting_in[]); Type: FUNCTION; Schema: ledger_api; Owner: -

CREATE FUNCTION ledger_api.post_batch(p_postings ledger.posting_in[]) RETURNS jsonb[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'ledger', 'wallet', 'pg_temp'
    AS $$
BEGIN
    RETURN ledger.post_batch(p_postings);
END $$;

-- Name: account_contracts_guard(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.account_contracts_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'a contract record is never changed or deleted' USING ERRCODE = 'insufficient_privilege';
END $$;

-- Name: count_withdrawal(smallint, text, text, date, text, bigint, bigint); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.count_withdrawal(p_bucket smallint, p_command_id text, p_account text, p_month date, p_currency text, p_amount bigint, p_limit bigint) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'wallet', 'pg_temp'
    AS $$
DECLARE
    v_used bigint;
BEGIN
    IF p_amount IS NULL OR p_amount <= 0 OR p_limit IS NULL OR p_limit < 0 THEN
        RAISE EXCEPTION 'count_withdrawal: the amount must be positive and the limit not negative'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
        format('withdrawal-limit|%s|%s|%s|%s', p_bucket, p_account, p_month, p_currency), 0));
    SELECT u.used INTO v_used FROM wallet.limit_usage u
     WHERE u.bucket = p_bucket AND u.account_id = p_account AND u.month = p_month
       AND u.kind = 'withdrawal' AND u.currency = p_currency;
    v_used := coalesce(v_used, 0) + p_amount;
    IF v_used > p_limit THEN
        RETURN jsonb_build_object('counted', false, 'used', v_used, 'limit', p_limit);
    END IF;
    -- a debit is counted once (its primary key); a second count of it is a defect: it raises
    INSERT INTO wallet.withdrawal_counts (bucket, command_id, account_id, month, currency, amount, counted_at)
    VALUES (p_bucket, p_command_id, p_account, p_month, p_currency, p_amount, clock_timestamp());
    INSERT INTO wallet.limit_usage AS u (bucket, account_id, month, kind, currency, used)
    VALUES (p_bucket, p_account, p_month, 'withdrawal', p_currency, p_amount)
    ON CONFLICT (bucket, account_id, month, kind, currency) DO UPDATE SET used = u.used + EXCLUDED.used;
    RETURN jsonb_build_object('counted', true, 'used', v_used, 'limit', p_limit);
END $$;

-- Name: goodwill_credits_guard(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.goodwill_credits_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.status = 'posted' THEN
        RAISE EXCEPTION 'goodwill credit % is posted; a correction is another movement', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.bucket, NEW.wallet_id, NEW.currency, NEW.amount_minor, NEW.reason,
        NEW.requested_by, NEW.requested_at)
       IS DISTINCT FROM
       (OLD.id, OLD.bucket, OLD.wallet_id, OLD.currency, OLD.amount_minor, OLD.reason,
        OLD.requested_by, OLD.requested_at) THEN
        RAISE EXCEPTION 'a goodwill credit''s request is never changed' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;

-- Name: outbox_keeps_unsent(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.outbox_keeps_unsent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

-- Name: processed_messages_append_only(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.processed_messages_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'a stored command response is never changed or deleted'
        USING ERRCODE = 'insufficient_privilege';
END $$;

-- Name: promo_programmes_guard(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.promo_programmes_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.status <> 'proposed' AND NEW.status <> OLD.status THEN
        RAISE EXCEPTION 'programme % was decided already', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.bucket, NEW.account_id, NEW.wallet_id, NEW.name, NEW.currency,
        NEW.amount_per_customer, NEW.budget_minor, NEW.expires_at, NEW.proposed_by, NEW.proposed_at)
       IS DISTINCT FROM
       (OLD.id, OLD.bucket, OLD.account_id, OLD.wallet_id, OLD.name, OLD.currency,
        OLD.amount_per_customer, OLD.budget_minor, OLD.expires_at, OLD.proposed_by, OLD.proposed_at) THEN
        RAISE EXCEPTION 'a programme''s terms are never changed' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;

-- Name: reconciliation_findings_keep_resolution(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.reconciliation_findings_keep_resolution() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.status = 'resolved' THEN
        RAISE EXCEPTION 'reconciliation finding % is resolved already', OLD.id
            USING ERRCODE = 'HW030', CONSTRAINT = 'reconciliation_findings_resolved_once';
    END IF;
    IF NEW.kind <> OLD.kind OR NEW.subject <> OLD.subject OR NEW.found_at <> OLD.found_at THEN
        RAISE EXCEPTION 'a finding''s kind, subject and found_at are kept'
            USING ERRCODE = 'HW030', CONSTRAINT = 'reconciliation_findings_resolved_once';
    END IF;
    RETURN NEW;
END $$;

-- Name: return_withdrawal(smallint, text); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.return_withdrawal(p_bucket smallint, p_command_id text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'wallet', 'pg_temp'
    AS $$
DECLARE
    v_count wallet.withdrawal_counts;
BEGIN
    SELECT * INTO v_count FROM wallet.withdrawal_counts
     WHERE bucket = p_bucket AND command_id = p_command_id AND returned_at IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
        format('withdrawal-limit|%s|%s|%s|%s', v_count.bucket, v_count.account_id, v_count.month,
               v_count.currency), 0));
    UPDATE wallet.withdrawal_counts SET returned_at = clock_timestamp()
     WHERE bucket = p_bucket AND command_id = p_command_id;
    UPDATE wallet.limit_usage SET used = used - v_count.amount
     WHERE bucket = v_count.bucket AND account_id = v_count.account_id AND month = v_count.month
       AND kind = 'withdrawal' AND currency = v_count.currency;
    RETURN v_count.amount;
END $$;

-- Name: transfer_batch(smallint[], text[], text[], bigint[], bytea[], text[], text[], text[], text[], smallint[], text[], text[], date[], text[], bigint[], text[], bigint[], bigint[], jsonb[], ledger_api.posting_in[]); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.transfer_batch(w_buckets smallint[], w_scopes text[], w_keys text[], w_locks bigint[], w_hashes bytea[], w_issuers text[], w_subjects text[], w_src_accounts text[], w_src_tiers text[], w_dst_buckets smallint[], w_dst_accounts text[], w_dst_tiers text[], w_months date[], w_limit_kinds text[], w_limit_locks bigint[], w_currencies text[], w_amounts bigint[], w_limits bigint[], w_views jsonb[], p_postings ledger_api.posting_in[]) RETURNS jsonb[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET jit TO 'off'
    SET search_path TO 'pg_catalog', 'wallet', 'pg_temp'
    AS $$
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

-- Name: unattributed_topups_attributed_once(); Type: FUNCTION; Schema: wallet; Owner: -

CREATE FUNCTION wallet.unattributed_topups_attributed_once() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.attributed_wallet IS NOT NULL THEN
        RAISE EXCEPTION 'top-up % was attributed already', OLD.payment_id USING ERRCODE = 'HW013';
    END IF;
    RETURN NEW;
END $$;

-- Name: accounts; Type: TABLE; Schema: ledger; Owner: -

CREATE TABLE ledger.accounts (
    bucket smallint NOT NULL,
    id text NOT NULL,
    role ledger.account_role NOT NULL,
    purse ledger.purse,
    currency character(3) NOT NULL,
    owner text,
    balance bigint DEFAULT 0 NOT NULL,
    held bigint DEFAULT 0 NOT NULL,
    version bigint DEFAULT 0 NOT NULL,
    last_hash bytea DEFAULT '\x'::bytea NOT NULL,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT accounts_bucket_range CHECK (((bucket >= 0) AND (bucket <= 1023))),
    CONSTRAINT accounts_currency_format CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT accounts_customer_not_negative CHECK (((role <> 'user_wallet'::ledger.account_role) OR (balance >= 0))),
    CONSTRAINT accounts_held_within_balance CHECK (((held >= 0) AND ((role <> 'user_wallet'::ledger.account_role) OR (held <= balance)))),
    CONSTRAINT accounts_id_has_bucket CHECK ((substr(id, 1, 4) = lpad((bucket)::text, 4, '0'::text))),
    CONSTRAINT accounts_id_length CHECK ((length(id) <= 120)),
    CONSTRAINT accounts_purse_for_wallets CHECK (((role = 'user_wallet'::ledger.account_role) = (purse IS NOT NULL))),
    CONSTRAINT accounts_version_not_negative CHECK ((version >= 0))
)
WITH (fillfactor='70');

-- Name: holds; Type: TABLE; Schema: ledger; Owner: -

CREATE TABLE ledger.holds (
    bucket smallint NOT NULL,
    account_id text NOT NULL,
    key text NOT NULL,
    amount bigint NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    transaction_id text,
    created_at timestamp with time zone NOT NULL,
    closed_at timestamp with time zone,
    CONSTRAINT holds_amount_positive CHECK ((amount > 0)),
    CONSTRAINT holds_closed_consistent CHECK (((status = 'pending'::text) = (closed_at IS NULL))),
    CONSTRAINT holds_key_length CHECK (((length(key) >= 1) AND (length(key) <= 200))),
    CONSTRAINT holds_status_known CHECK ((status = ANY (ARRAY['pending'::text, 'captured'::text, 'released'::text])))
);

-- Name: lines; Type: TABLE; Schema: ledger; Owner: -

CREATE TABLE ledger.lines (
    bucket smallint NOT NULL,
    account_id text NOT NULL,
    version bigint NOT NULL,
    transaction_id text NOT NULL,
    amount bigint NOT NULL,
    currency character(3) NOT NULL,
    balance_after bigint NOT NULL,
    type ledger.tx_type NOT NULL,
    ref text NOT NULL,
    posted_at timestamp with time zone NOT NULL,
    hash bytea NOT NULL,
    CONSTRAINT lines_amount_not_zero CHECK ((amount <> 0)),
    CONSTRAINT lines_version_positive CHECK ((version > 0))
);

-- Name: promo_batches; Type: TABLE; Schema: ledger; Owner: -

CREATE TABLE ledger.promo_batches (
    bucket smallint NOT NULL,
    id text NOT NULL,
    account_id text NOT NULL,
    funder_bucket smallint NOT NULL,
    funder_account text NOT NULL,
    funded_by text NOT NULL,
    expire_to_bucket smallint NOT NULL,
    expire_to_account text NOT NULL,
    amount bigint NOT NULL,
    remaining bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    grant_transaction_id text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT promo_batches_amount_positive CHECK ((amount > 0)),
    CONSTRAINT promo_batches_funded_by_known CHECK ((funded_by = ANY (ARRAY['business'::text, 'platform'::text]))),
    CONSTRAINT promo_batches_remaining_range CHECK (((remaining >= 0) AND (remaining <= amount)))
);

-- Name: promo_spends; Type: TABLE; Schema: ledger; Owner: -

CREATE TABLE ledger.promo_spends (
    bucket smallint NOT NULL,
    transaction_id text NOT NULL,
    batch_id text NOT NULL,
    amount bigint NOT NULL,
    CONSTRAINT promo_spends_amount_not_zero CHECK ((amount <> 0))
);

-- Name: transactions; Type: TABLE; Schema: ledger; Owner: -

CREATE TABLE ledger.transactions (
    bucket smallint NOT NULL,
    id text NOT NULL,
    home_bucket smallint NOT NULL,
    buckets smallint[] NOT NULL,
    type ledger.tx_type NOT NULL,
    actor text NOT NULL,
    ref text NOT NULL,
    request_hash bytea NOT NULL,
    parts_balanced boolean NOT NULL,
    refund_of text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    posted_at timestamp with time zone NOT NULL,
    CONSTRAINT transactions_actor_length CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT transactions_bucket_listed CHECK (((bucket = ANY (buckets)) AND (home_bucket = ANY (buckets)))),
    CONSTRAINT transactions_id_length CHECK (((length(id) >= 1) AND (length(id) <= 100))),
    CONSTRAINT transactions_metadata_size CHECK ((pg_column_size(metadata) <= 4096)),
    CONSTRAINT transactions_ref_length CHECK (((length(ref) >= 1) AND (length(ref) <= 200)))
);

-- Name: accounts; Type: VIEW; Schema: ledger_api; Owner: -

CREATE VIEW ledger_api.accounts AS
 SELECT a.bucket,
    a.id,
    a.currency
   FROM ledger.accounts a;

-- Name: lines; Type: VIEW; Schema: ledger_api; Owner: -

CREATE VIEW ledger_api.lines AS
 SELECT l.bucket,
    l.account_id,
    l.version,
    l.transaction_id,
    (l.type)::text AS type,
    l.ref,
    l.amount,
    l.currency,
    l.balance_after,
    l.posted_at
   FROM ledger.lines l;

-- Name: promo_batches; Type: VIEW; Schema: ledger_api; Owner: -

CREATE VIEW ledger_api.promo_batches AS
 SELECT b.bucket,
    b.id,
    b.account_id,
    b.funded_by,
    b.amount,
    b.remaining,
    b.expires_at,
    b.grant_transaction_id
   FROM ledger.promo_batches b;

-- Name: transaction_wallet_accounts; Type: VIEW; Schema: ledger_api; Owner: -

CREATE VIEW ledger_api.transaction_wallet_accounts AS
 SELECT t.bucket,
    t.id AS transaction_id,
    l.bucket AS account_bucket,
    l.account_id
   FROM ((ledger.transactions t
     JOIN ledger.lines l ON (((l.bucket = ANY (t.buckets)) AND (l.transaction_id = t.id))))
     JOIN ledger.accounts a ON (((a.bucket = l.bucket) AND (a.id = l.account_id))))
  WHERE (a.role = 'user_wallet'::ledger.account_role);

-- Name: transactions; Type: VIEW; Schema: ledger_api; Owner: -

CREATE VIEW ledger_api.transactions AS
 SELECT t.bucket,
    t.id,
    (t.type)::text AS type,
    t.ref,
    t.metadata,
    t.posted_at
   FROM ledger.transactions t;

-- Name: wallet_purses; Type: VIEW; Schema: ledger_api; Owner: -

CREATE VIEW ledger_api.wallet_purses AS
 SELECT a.bucket,
    a.id,
    (a.purse)::text AS purse,
    a.currency,
    a.balance,
    a.held,
        CASE
            WHEN (a.purse = 'promo'::ledger.purse) THEN ( SELECT COALESCE(sum(b.remaining), (0)::numeric) AS "coalesce"
               FROM ledger.promo_batches b
              WHERE ((b.bucket = a.bucket) AND (b.account_id = a.id) AND (b.remaining > 0) AND (b.expires_at <= clock_timestamp())))
            ELSE (0)::numeric
        END AS expired
   FROM ledger.accounts a;

-- Name: processed_events; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.processed_events (
    consumer text NOT NULL,
    message_id text NOT NULL,
    processed_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome jsonb DEFAULT '{}'::jsonb NOT NULL
);

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: account_contracts; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.account_contracts (
    bucket smallint NOT NULL,
    account_id text NOT NULL,
    evidence text NOT NULL,
    evidence_ref text NOT NULL,
    previous_tier text NOT NULL,
    recorded_by text NOT NULL,
    recorded_at timestamp with time zone NOT NULL,
    CONSTRAINT account_contracts_by_staff CHECK ((recorded_by ~~ 'staff:_%'::text)),
    CONSTRAINT account_contracts_evidence_known CHECK ((evidence = ANY (ARRAY['remote_identity_verification'::text, 'signed_agreement'::text]))),
    CONSTRAINT account_contracts_evidence_ref_length CHECK (((length(evidence_ref) >= 1) AND (length(evidence_ref) <= 200))),
    CONSTRAINT account_contracts_is_a_raise CHECK ((previous_tier = ANY (ARRAY['unknown'::text, 'unverified'::text, 'verified'::text])))
);

-- Name: accounts; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.accounts (
    bucket smallint NOT NULL,
    id text NOT NULL,
    kind text NOT NULL,
    tier text,
    name text,
    opened_by text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT accounts_bucket_range CHECK (((bucket >= 1) AND (bucket <= 1023))),
    CONSTRAINT accounts_id_has_bucket CHECK ((substr(id, 1, 4) = lpad((bucket)::text, 4, '0'::text))),
    CONSTRAINT accounts_kind_known CHECK ((kind = ANY (ARRAY['personal'::text, 'business'::text]))),
    CONSTRAINT accounts_name_length CHECK (((name IS NULL) OR ((length(name) >= 1) AND (length(name) <= 200)))),
    CONSTRAINT accounts_tier_known CHECK ((((kind = 'personal'::text) AND (tier = ANY (ARRAY['unknown'::text, 'unverified'::text, 'verified'::text, 'contracted'::text]))) OR ((kind = 'business'::text) AND (tier IS NULL))))
);

-- Name: bank_statement_lines; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.bank_statement_lines (
    day date NOT NULL,
    currency text NOT NULL,
    "position" integer NOT NULL,
    bank_reference text NOT NULL,
    customer_reference text,
    amount_minor bigint NOT NULL,
    booked_on date NOT NULL,
    saga_id text,
    CONSTRAINT bank_statement_lines_amount_not_zero CHECK ((amount_minor <> 0)),
    CONSTRAINT bank_statement_lines_reference_length CHECK (((length(bank_reference) >= 1) AND (length(bank_reference) <= 200)))
);

-- Name: bank_statements; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.bank_statements (
    day date NOT NULL,
    currency text NOT NULL,
    opening_minor bigint NOT NULL,
    closing_minor bigint NOT NULL,
    lines integer NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT bank_statements_currency_format CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT bank_statements_lines_not_negative CHECK ((lines >= 0))
);

-- Name: campaign_grants; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.campaign_grants (
    campaign_id text NOT NULL,
    transaction_id text NOT NULL,
    wallet_id text NOT NULL,
    amount_minor bigint NOT NULL,
    granted_by text NOT NULL,
    granted_at timestamp with time zone NOT NULL,
    CONSTRAINT campaign_grants_amount_positive CHECK ((amount_minor > 0))
);

-- Name: campaigns; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.campaigns (
    id text NOT NULL,
    name text NOT NULL,
    currency character(3) NOT NULL,
    budget_minor bigint NOT NULL,
    remaining_minor bigint NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT campaigns_budget_positive CHECK ((budget_minor > 0)),
    CONSTRAINT campaigns_currency_format CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT campaigns_name_length CHECK (((length(name) >= 1) AND (length(name) <= 140))),
    CONSTRAINT campaigns_never_overspent CHECK (((remaining_minor >= 0) AND (remaining_minor <= budget_minor)))
);

-- Name: daily_summary; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.daily_summary (
    day date NOT NULL,
    currency character(3) NOT NULL,
    account_id text NOT NULL,
    transactions bigint NOT NULL,
    volume_in_minor bigint NOT NULL,
    volume_out_minor bigint NOT NULL,
    fees_minor bigint NOT NULL,
    computed_at timestamp with time zone NOT NULL,
    CONSTRAINT daily_summary_account_length CHECK ((length(account_id) <= 120)),
    CONSTRAINT daily_summary_currency_format CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT daily_summary_figures_not_negative CHECK (((transactions >= 0) AND (volume_in_minor >= 0) AND (volume_out_minor >= 0)))
);

-- Name: goodwill_credits; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.goodwill_credits (
    id text NOT NULL,
    bucket smallint NOT NULL,
    wallet_id text NOT NULL,
    currency character(3) NOT NULL,
    amount_minor bigint NOT NULL,
    reason text NOT NULL,
    status text NOT NULL,
    requested_by text NOT NULL,
    requested_at timestamp with time zone NOT NULL,
    approved_by text,
    approved_at timestamp with time zone,
    transaction_id text,
    CONSTRAINT goodwill_credits_amount_positive CHECK ((amount_minor > 0)),
    CONSTRAINT goodwill_credits_approval_consistent CHECK (((approved_by IS NULL) = (approved_at IS NULL))),
    CONSTRAINT goodwill_credits_four_eyes CHECK (((approved_by IS NULL) OR (approved_by <> requested_by))),
    CONSTRAINT goodwill_credits_posted_has_transaction CHECK (((status = 'posted'::text) = (transaction_id IS NOT NULL))),
    CONSTRAINT goodwill_credits_reason_length CHECK (((length(reason) >= 1) AND (length(reason) <= 500))),
    CONSTRAINT goodwill_credits_status_known CHECK ((status = ANY (ARRAY['pending'::text, 'posted'::text])))
);

-- Name: idempotency_keys; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.idempotency_keys (
    bucket smallint NOT NULL,
    scope text NOT NULL,
    key text NOT NULL,
    request_hash bytea NOT NULL,
    status smallint NOT NULL,
    body jsonb,
    created_at timestamp with time zone NOT NULL,
    posted jsonb,
    CONSTRAINT idempotency_keys_one_answer CHECK (((body IS NULL) <> (posted IS NULL)))
);

-- Name: identity_accounts; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.identity_accounts (
    issuer text NOT NULL,
    subject text NOT NULL,
    account_id text NOT NULL,
    bucket smallint NOT NULL,
    kind text NOT NULL,
    created_at timestamp with time zone NOT NULL
);

-- Name: limit_usage; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.limit_usage (
    bucket smallint NOT NULL,
    account_id text NOT NULL,
    month date NOT NULL,
    kind text NOT NULL,
    currency character(3) NOT NULL,
    used bigint NOT NULL,
    CONSTRAINT limit_usage_kind_known CHECK ((kind = ANY (ARRAY['transfer'::text, 'payment'::text, 'withdrawal'::text]))),
    CONSTRAINT limit_usage_used_not_negative CHECK ((used >= 0))
);

-- Name: members; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.members (
    bucket smallint NOT NULL,
    account_id text NOT NULL,
    issuer text NOT NULL,
    subject text NOT NULL,
    added_by text NOT NULL,
    created_at timestamp with time zone NOT NULL
);

-- Name: outbox; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.outbox (
    id bigint NOT NULL,
    message_id text NOT NULL,
    exchange text NOT NULL,
    routing_key text NOT NULL,
    message_type text NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone
);

-- Name: outbox_id_seq; Type: SEQUENCE; Schema: wallet; Owner: -

ALTER TABLE wallet.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME wallet.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: processed_messages; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.processed_messages (
    command_id text NOT NULL,
    command_type text NOT NULL,
    saga_id text NOT NULL,
    response_type text NOT NULL,
    response jsonb NOT NULL,
    processed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT processed_messages_ids_length CHECK ((((length(command_id) >= 1) AND (length(command_id) <= 200)) AND ((length(saga_id) >= 1) AND (length(saga_id) <= 200)))),
    CONSTRAINT processed_messages_response_fits_command CHECK ((((command_type = 'DebitForWithdrawal'::text) AND (response_type = ANY (ARRAY['WithdrawalDebited'::text, 'WithdrawalDebitRejected'::text]))) OR ((command_type = 'SettleWithdrawal'::text) AND (response_type = 'WithdrawalSettled'::text)) OR ((command_type = 'RefundWithdrawal'::text) AND (response_type = 'WithdrawalRefunded'::text)))),
    CONSTRAINT processed_messages_response_object CHECK ((jsonb_typeof(response) = 'object'::text))
);

-- Name: promo_programme_receivers; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.promo_programme_receivers (
    programme_id text NOT NULL,
    wallet_id text NOT NULL,
    granted_minor bigint NOT NULL,
    CONSTRAINT promo_programme_receivers_positive CHECK ((granted_minor > 0))
);

-- Name: promo_programmes; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.promo_programmes (
    id text NOT NULL,
    bucket smallint NOT NULL,
    account_id text NOT NULL,
    wallet_id text NOT NULL,
    name text NOT NULL,
    currency character(3) NOT NULL,
    amount_per_customer bigint NOT NULL,
    budget_minor bigint NOT NULL,
    remaining_minor bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    status text NOT NULL,
    proposed_by text NOT NULL,
    proposed_at timestamp with time zone NOT NULL,
    decided_by text,
    decided_at timestamp with time zone,
    decision_reason text,
    CONSTRAINT promo_programmes_amounts_positive CHECK (((amount_per_customer > 0) AND (budget_minor > 0))),
    CONSTRAINT promo_programmes_decision_consistent CHECK ((((status = 'proposed'::text) = (decided_by IS NULL)) AND ((decided_by IS NULL) = (decided_at IS NULL)))),
    CONSTRAINT promo_programmes_name_length CHECK (((length(name) >= 1) AND (length(name) <= 140))),
    CONSTRAINT promo_programmes_never_overspent CHECK (((remaining_minor >= 0) AND (remaining_minor <= budget_minor))),
    CONSTRAINT promo_programmes_reason_length CHECK (((length(decision_reason) >= 1) AND (length(decision_reason) <= 500))),
    CONSTRAINT promo_programmes_spent_only_accepted CHECK (((status = 'accepted'::text) OR (remaining_minor = budget_minor))),
    CONSTRAINT promo_programmes_status_known CHECK ((status = ANY (ARRAY['proposed'::text, 'accepted'::text, 'refused'::text])))
);

-- Name: reconciliation_findings; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.reconciliation_findings (
    id text NOT NULL,
    kind text NOT NULL,
    subject text NOT NULL,
    details jsonb DEFAULT '{}'::jsonb NOT NULL,
    found_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    status text DEFAULT 'open'::text NOT NULL,
    resolved_by text,
    resolution_note text,
    resolved_at timestamp with time zone,
    CONSTRAINT reconciliation_findings_details_size CHECK ((pg_column_size(details) <= 8192)),
    CONSTRAINT reconciliation_findings_kind_format CHECK ((kind ~ '^[a-z][a-z0-9_]{0,62}$'::text)),
    CONSTRAINT reconciliation_findings_note_length CHECK (((resolution_note IS NULL) OR ((length(resolution_note) >= 1) AND (length(resolution_note) <= 2000)))),
    CONSTRAINT reconciliation_findings_resolution_complete CHECK ((((status = 'open'::text) = ((resolved_by IS NULL) AND (resolution_note IS NULL) AND (resolved_at IS NULL))) AND ((status = 'open'::text) OR ((resolved_by IS NOT NULL) AND (resolution_note IS NOT NULL) AND (resolved_at IS NOT NULL))))),
    CONSTRAINT reconciliation_findings_seen_after_found CHECK ((last_seen_at >= found_at)),
    CONSTRAINT reconciliation_findings_status_known CHECK ((status = ANY (ARRAY['open'::text, 'resolved'::text]))),
    CONSTRAINT reconciliation_findings_subject_length CHECK (((length(subject) >= 1) AND (length(subject) <= 300)))
);

-- Name: settled_topups; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.settled_topups (
    payment_id text NOT NULL,
    provider text NOT NULL,
    payout_id text NOT NULL,
    line_id text NOT NULL,
    gross_minor bigint NOT NULL,
    fee_minor bigint NOT NULL,
    settled_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT settled_topups_fee_in_range CHECK (((fee_minor >= 0) AND (fee_minor < gross_minor))),
    CONSTRAINT settled_topups_gross_positive CHECK ((gross_minor > 0))
);

-- Name: staff_daily_usage; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.staff_daily_usage (
    actor text NOT NULL,
    day date NOT NULL,
    kind text NOT NULL,
    currency character(3) NOT NULL,
    used bigint NOT NULL,
    CONSTRAINT staff_daily_usage_kind_known CHECK ((kind = ANY (ARRAY['goodwill'::text, 'promo'::text]))),
    CONSTRAINT staff_daily_usage_used_positive CHECK ((used > 0))
);

-- Name: unattributed_topups; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.unattributed_topups (
    payment_id text NOT NULL,
    provider text NOT NULL,
    provider_payment_id text NOT NULL,
    reference text,
    amount_minor bigint NOT NULL,
    currency character(3) NOT NULL,
    reason text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    attributed_wallet text,
    attributed_by text,
    attributed_at timestamp with time zone,
    CONSTRAINT unattributed_topups_amount_positive CHECK ((amount_minor > 0)),
    CONSTRAINT unattributed_topups_attribution_whole CHECK ((((attributed_wallet IS NULL) = (attributed_by IS NULL)) AND ((attributed_wallet IS NULL) = (attributed_at IS NULL)))),
    CONSTRAINT unattributed_topups_currency_format CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT unattributed_topups_reason_known CHECK ((reason = ANY (ARRAY['no-reference'::text, 'malformed-reference'::text, 'unknown-wallet'::text, 'closed-wallet'::text, 'currency-mismatch'::text]))),
    CONSTRAINT unattributed_topups_reference_length CHECK (((reference IS NULL) OR (length(reference) <= 500)))
);

-- Name: wallets; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.wallets (
    bucket smallint NOT NULL,
    id text NOT NULL,
    account_id text NOT NULL,
    currency character(3) NOT NULL,
    number text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    closed_at timestamp with time zone,
    CONSTRAINT wallets_currency_format CHECK ((currency ~ '^[A-Z]{3}$'::text)),
    CONSTRAINT wallets_number_format CHECK (((number ~ '^[0-9]{16}$'::text) AND (substr(number, 1, 4) = lpad((bucket)::text, 4, '0'::text))))
);

-- Name: webhook_attempts; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.webhook_attempts (
    bucket smallint NOT NULL,
    delivery_id text NOT NULL,
    n bigint NOT NULL,
    attempted_at timestamp with time zone NOT NULL,
    status_code integer,
    error text,
    duration_ms integer NOT NULL
);

-- Name: webhook_attempts_n_seq; Type: SEQUENCE; Schema: wallet; Owner: -

ALTER TABLE wallet.webhook_attempts ALTER COLUMN n ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME wallet.webhook_attempts_n_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: webhook_deliveries; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.webhook_deliveries (
    bucket smallint NOT NULL,
    id text NOT NULL,
    endpoint_id text NOT NULL,
    event_id text NOT NULL,
    event_seq bigint NOT NULL,
    event_type text NOT NULL,
    resource_id text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    last_status_code integer,
    last_error text,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    delivered_at timestamp with time zone,
    CONSTRAINT webhook_deliveries_status CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);

-- Name: webhook_endpoints; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.webhook_endpoints (
    bucket smallint NOT NULL,
    id text NOT NULL,
    account_id text NOT NULL,
    url text NOT NULL,
    event_types text[] NOT NULL,
    description text,
    enabled boolean DEFAULT true NOT NULL,
    disabled_reason text,
    disabled_at timestamp with time zone,
    secret_sealed bytea NOT NULL,
    previous_secret_sealed bytea,
    previous_secret_until timestamp with time zone,
    failing_since timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT webhook_endpoints_disabled_reason CHECK (((enabled AND (disabled_reason IS NULL)) OR ((NOT enabled) AND (disabled_reason = ANY (ARRAY['member'::text, 'failing'::text]))))),
    CONSTRAINT webhook_endpoints_event_types_count CHECK (((cardinality(event_types) >= 1) AND (cardinality(event_types) <= 16))),
    CONSTRAINT webhook_endpoints_previous_secret CHECK (((previous_secret_sealed IS NULL) = (previous_secret_until IS NULL))),
    CONSTRAINT webhook_endpoints_url_length CHECK (((length(url) >= 1) AND (length(url) <= 2048)))
);

-- Name: webhook_events; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.webhook_events (
    bucket smallint NOT NULL,
    id text NOT NULL,
    seq bigint NOT NULL,
    account_id text NOT NULL,
    type text NOT NULL,
    resource_id text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone NOT NULL,
    dispatched_at timestamp with time zone,
    CONSTRAINT webhook_events_payload_object CHECK ((jsonb_typeof(payload) = 'object'::text)),
    CONSTRAINT webhook_events_type CHECK ((type = ANY (ARRAY['payment.received'::text, 'payment.refunded'::text, 'withdrawal.completed'::text, 'withdrawal.failed'::text, 'promo.granted'::text, 'endpoint.disabled'::text])))
);

-- Name: webhook_events_seq_seq; Type: SEQUENCE; Schema: wallet; Owner: -

ALTER TABLE wallet.webhook_events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME wallet.webhook_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: withdrawal_counts; Type: TABLE; Schema: wallet; Owner: -

CREATE TABLE wallet.withdrawal_counts (
    bucket smallint NOT NULL,
    command_id text NOT NULL,
    account_id text NOT NULL,
    month date NOT NULL,
    currency character(3) NOT NULL,
    amount bigint NOT NULL,
    counted_at timestamp with time zone NOT NULL,
    returned_at timestamp with time zone,
    CONSTRAINT withdrawal_counts_amount_positive CHECK ((amount > 0))
);

-- Name: accounts accounts_pkey; Type: CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (bucket, id);

-- Name: holds holds_pkey; Type: CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.holds
    ADD CONSTRAINT holds_pkey PRIMARY KEY (bucket, account_id, key);

-- Name: lines lines_pkey; Type: CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.lines
    ADD CONSTRAINT lines_pkey PRIMARY KEY (bucket, account_id, version);

-- Name: promo_batches promo_batches_pkey; Type: CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.promo_batches
    ADD CONSTRAINT promo_batches_pkey PRIMARY KEY (bucket, id);

-- Name: promo_spends promo_spends_pkey; Type: CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.promo_spends
    ADD CONSTRAINT promo_spends_pkey PRIMARY KEY (bucket, transaction_id, batch_id);

-- Name: transactions transactions_pkey; Type: CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.transactions
    ADD CONSTRAINT transactions_pkey PRIMARY KEY (bucket, id);

-- Name: processed_events processed_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.processed_events
    ADD CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: account_contracts account_contracts_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.account_contracts
    ADD CONSTRAINT account_contracts_pkey PRIMARY KEY (bucket, account_id);

-- Name: accounts accounts_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (bucket, id);

-- Name: bank_statement_lines bank_statement_lines_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.bank_statement_lines
    ADD CONSTRAINT bank_statement_lines_pkey PRIMARY KEY (day, currency, "position");

-- Name: bank_statements bank_statements_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.bank_statements
    ADD CONSTRAINT bank_statements_pkey PRIMARY KEY (day, currency);

-- Name: campaign_grants campaign_grants_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.campaign_grants
    ADD CONSTRAINT campaign_grants_pkey PRIMARY KEY (campaign_id, transaction_id);

-- Name: campaigns campaigns_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.campaigns
    ADD CONSTRAINT campaigns_pkey PRIMARY KEY (id);

-- Name: daily_summary daily_summary_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.daily_summary
    ADD CONSTRAINT daily_summary_pkey PRIMARY KEY (day, currency, account_id);

-- Name: goodwill_credits goodwill_credits_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.goodwill_credits
    ADD CONSTRAINT goodwill_credits_pkey PRIMARY KEY (id);

-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (bucket, scope, key);

-- Name: identity_accounts identity_accounts_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.identity_accounts
    ADD CONSTRAINT identity_accounts_pkey PRIMARY KEY (issuer, subject, account_id);

-- Name: limit_usage limit_usage_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.limit_usage
    ADD CONSTRAINT limit_usage_pkey PRIMARY KEY (bucket, account_id, month, kind, currency);

-- Name: members members_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.members
    ADD CONSTRAINT members_pkey PRIMARY KEY (bucket, account_id, issuer, subject);

-- Name: outbox outbox_message_id_unique; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.outbox
    ADD CONSTRAINT outbox_message_id_unique UNIQUE (message_id);

-- Name: outbox outbox_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);

-- Name: processed_messages processed_messages_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.processed_messages
    ADD CONSTRAINT processed_messages_pkey PRIMARY KEY (command_id);

-- Name: promo_programme_receivers promo_programme_receivers_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.promo_programme_receivers
    ADD CONSTRAINT promo_programme_receivers_pkey PRIMARY KEY (programme_id, wallet_id);

-- Name: promo_programmes promo_programmes_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.promo_programmes
    ADD CONSTRAINT promo_programmes_pkey PRIMARY KEY (id);

-- Name: reconciliation_findings reconciliation_findings_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.reconciliation_findings
    ADD CONSTRAINT reconciliation_findings_pkey PRIMARY KEY (id);

-- Name: settled_topups settled_topups_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.settled_topups
    ADD CONSTRAINT settled_topups_pkey PRIMARY KEY (payment_id);

-- Name: staff_daily_usage staff_daily_usage_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.staff_daily_usage
    ADD CONSTRAINT staff_daily_usage_pkey PRIMARY KEY (actor, day, kind, currency);

-- Name: unattributed_topups unattributed_topups_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.unattributed_topups
    ADD CONSTRAINT unattributed_topups_pkey PRIMARY KEY (payment_id);

-- Name: wallets wallets_number_unique; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.wallets
    ADD CONSTRAINT wallets_number_unique UNIQUE (bucket, number);

-- Name: wallets wallets_one_per_currency; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.wallets
    ADD CONSTRAINT wallets_one_per_currency UNIQUE (bucket, account_id, currency);

-- Name: wallets wallets_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.wallets
    ADD CONSTRAINT wallets_pkey PRIMARY KEY (bucket, id);

-- Name: webhook_attempts webhook_attempts_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_attempts
    ADD CONSTRAINT webhook_attempts_pkey PRIMARY KEY (bucket, delivery_id, n);

-- Name: webhook_deliveries webhook_deliveries_once; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_once UNIQUE (bucket, endpoint_id, event_id);

-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (bucket, id);

-- Name: webhook_endpoints webhook_endpoints_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (bucket, id);

-- Name: webhook_events webhook_events_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_events
    ADD CONSTRAINT webhook_events_pkey PRIMARY KEY (bucket, id);

-- Name: withdrawal_counts withdrawal_counts_pkey; Type: CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.withdrawal_counts
    ADD CONSTRAINT withdrawal_counts_pkey PRIMARY KEY (bucket, command_id);

-- Name: lines_by_time; Type: INDEX; Schema: ledger; Owner: -

CREATE INDEX lines_by_time ON ledger.lines USING btree (bucket, account_id, posted_at, version);

-- Name: lines_by_transaction; Type: INDEX; Schema: ledger; Owner: -

CREATE INDEX lines_by_transaction ON ledger.lines USING btree (bucket, transaction_id);

-- Name: promo_batches_spend_order; Type: INDEX; Schema: ledger; Owner: -

CREATE INDEX promo_batches_spend_order ON ledger.promo_batches USING btree (bucket, account_id, expires_at, id) WHERE (remaining > 0);

-- Name: transactions_refunded_once; Type: INDEX; Schema: ledger; Owner: -

CREATE UNIQUE INDEX transactions_refunded_once ON ledger.transactions USING btree (bucket, refund_of) WHERE ((refund_of IS NOT NULL) AND (bucket = home_bucket));

-- Name: daily_summary_by_account; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX daily_summary_by_account ON wallet.daily_summary USING btree (account_id, day);

-- Name: goodwill_credits_pending; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX goodwill_credits_pending ON wallet.goodwill_credits USING btree (requested_at) WHERE (status = 'pending'::text);

-- Name: goodwill_credits_wallet; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX goodwill_credits_wallet ON wallet.goodwill_credits USING btree (bucket, wallet_id);

-- Name: idempotency_keys_created; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX idempotency_keys_created ON wallet.idempotency_keys USING btree (created_at);

-- Name: identity_accounts_one_personal; Type: INDEX; Schema: wallet; Owner: -

CREATE UNIQUE INDEX identity_accounts_one_personal ON wallet.identity_accounts USING btree (issuer, subject) WHERE (kind = 'personal'::text);

-- Name: outbox_unsent; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX outbox_unsent ON wallet.outbox USING btree (id) WHERE (sent_at IS NULL);

-- Name: processed_messages_saga; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX processed_messages_saga ON wallet.processed_messages USING btree (saga_id);

-- Name: promo_programmes_account; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX promo_programmes_account ON wallet.promo_programmes USING btree (bucket, account_id);

-- Name: promo_programmes_proposed; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX promo_programmes_proposed ON wallet.promo_programmes USING btree (proposed_at) WHERE (status = 'proposed'::text);

-- Name: reconciliation_findings_by_status; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX reconciliation_findings_by_status ON wallet.reconciliation_findings USING btree (status, found_at DESC, id DESC);

-- Name: reconciliation_findings_one_open; Type: INDEX; Schema: wallet; Owner: -

CREATE UNIQUE INDEX reconciliation_findings_one_open ON wallet.reconciliation_findings USING btree (kind, subject) WHERE (status = 'open'::text);

-- Name: unattributed_topups_open; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX unattributed_topups_open ON wallet.unattributed_topups USING btree (created_at) WHERE (attributed_wallet IS NULL);

-- Name: webhook_deliveries_due; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_deliveries_due ON wallet.webhook_deliveries USING btree (next_attempt_at) WHERE (status = 'pending'::text);

-- Name: webhook_deliveries_endpoint; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_deliveries_endpoint ON wallet.webhook_deliveries USING btree (bucket, endpoint_id, created_at, id);

-- Name: webhook_deliveries_event; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_deliveries_event ON wallet.webhook_deliveries USING btree (bucket, event_id);

-- Name: webhook_deliveries_pending_order; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_deliveries_pending_order ON wallet.webhook_deliveries USING btree (bucket, endpoint_id, resource_id, event_seq) WHERE (status = 'pending'::text);

-- Name: webhook_endpoints_account; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_endpoints_account ON wallet.webhook_endpoints USING btree (bucket, account_id);

-- Name: webhook_events_dispatched_created; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_events_dispatched_created ON wallet.webhook_events USING btree (created_at) WHERE (dispatched_at IS NOT NULL);

-- Name: webhook_events_undispatched; Type: INDEX; Schema: wallet; Owner: -

CREATE INDEX webhook_events_undispatched ON wallet.webhook_events USING btree (seq) WHERE (dispatched_at IS NULL);

-- Name: accounts accounts_never_deleted; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER accounts_never_deleted BEFORE DELETE ON ledger.accounts FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();

-- Name: accounts accounts_no_truncate; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER accounts_no_truncate BEFORE TRUNCATE ON ledger.accounts FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change();

-- Name: lines lines_append_only; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER lines_append_only BEFORE DELETE OR UPDATE ON ledger.lines FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();

-- Name: lines lines_balanced; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER lines_balanced AFTER INSERT ON ledger.lines REFERENCING NEW TABLE AS new_lines FOR EACH STATEMENT EXECUTE FUNCTION ledger.check_balanced();

-- Name: lines lines_no_truncate; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER lines_no_truncate BEFORE TRUNCATE ON ledger.lines FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change();

-- Name: promo_spends promo_spends_append_only; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER promo_spends_append_only BEFORE DELETE OR UPDATE ON ledger.promo_spends FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();

-- Name: transactions transactions_append_only; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER transactions_append_only BEFORE DELETE OR UPDATE ON ledger.transactions FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change();

-- Name: transactions transactions_no_truncate; Type: TRIGGER; Schema: ledger; Owner: -

CREATE TRIGGER transactions_no_truncate BEFORE TRUNCATE ON ledger.transactions FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change();

-- Name: account_contracts account_contracts_guard; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER account_contracts_guard BEFORE DELETE OR UPDATE ON wallet.account_contracts FOR EACH ROW EXECUTE FUNCTION wallet.account_contracts_guard();

-- Name: goodwill_credits goodwill_credits_guard; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER goodwill_credits_guard BEFORE DELETE OR UPDATE ON wallet.goodwill_credits FOR EACH ROW EXECUTE FUNCTION wallet.goodwill_credits_guard();

-- Name: outbox outbox_keeps_unsent; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON wallet.outbox FOR EACH ROW EXECUTE FUNCTION wallet.outbox_keeps_unsent();

-- Name: processed_messages processed_messages_append_only; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER processed_messages_append_only BEFORE DELETE OR UPDATE ON wallet.processed_messages FOR EACH ROW EXECUTE FUNCTION wallet.processed_messages_append_only();

-- Name: promo_programmes promo_programmes_guard; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER promo_programmes_guard BEFORE UPDATE ON wallet.promo_programmes FOR EACH ROW EXECUTE FUNCTION wallet.promo_programmes_guard();

-- Name: reconciliation_findings reconciliation_findings_keep_resolution; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER reconciliation_findings_keep_resolution BEFORE UPDATE ON wallet.reconciliation_findings FOR EACH ROW EXECUTE FUNCTION wallet.reconciliation_findings_keep_resolution();

-- Name: reconciliation_findings reconciliation_findings_never_deleted; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER reconciliation_findings_never_deleted BEFORE DELETE ON wallet.reconciliation_findings FOR EACH ROW EXECUTE FUNCTION wallet.reconciliation_findings_keep_resolution();

-- Name: unattributed_topups unattributed_topups_attributed_once; Type: TRIGGER; Schema: wallet; Owner: -

CREATE TRIGGER unattributed_topups_attributed_once BEFORE UPDATE ON wallet.unattributed_topups FOR EACH ROW EXECUTE FUNCTION wallet.unattributed_topups_attributed_once();

-- Name: holds holds_account_fk; Type: FK CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.holds
    ADD CONSTRAINT holds_account_fk FOREIGN KEY (bucket, account_id) REFERENCES ledger.accounts(bucket, id);

-- Name: promo_batches promo_batches_account_fk; Type: FK CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.promo_batches
    ADD CONSTRAINT promo_batches_account_fk FOREIGN KEY (bucket, account_id) REFERENCES ledger.accounts(bucket, id);

-- Name: promo_spends promo_spends_batch_fk; Type: FK CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.promo_spends
    ADD CONSTRAINT promo_spends_batch_fk FOREIGN KEY (bucket, batch_id) REFERENCES ledger.promo_batches(bucket, id);

-- Name: promo_spends promo_spends_transaction_fk; Type: FK CONSTRAINT; Schema: ledger; Owner: -

ALTER TABLE ONLY ledger.promo_spends
    ADD CONSTRAINT promo_spends_transaction_fk FOREIGN KEY (bucket, transaction_id) REFERENCES ledger.transactions(bucket, id);

-- Name: account_contracts account_contracts_account_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.account_contracts
    ADD CONSTRAINT account_contracts_account_fkey FOREIGN KEY (bucket, account_id) REFERENCES wallet.accounts(bucket, id);

-- Name: bank_statement_lines bank_statement_lines_statement_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.bank_statement_lines
    ADD CONSTRAINT bank_statement_lines_statement_fkey FOREIGN KEY (day, currency) REFERENCES wallet.bank_statements(day, currency);

-- Name: campaign_grants campaign_grants_campaign_id_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.campaign_grants
    ADD CONSTRAINT campaign_grants_campaign_id_fkey FOREIGN KEY (campaign_id) REFERENCES wallet.campaigns(id);

-- Name: limit_usage limit_usage_account_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.limit_usage
    ADD CONSTRAINT limit_usage_account_fkey FOREIGN KEY (bucket, account_id) REFERENCES wallet.accounts(bucket, id);

-- Name: members members_account_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.members
    ADD CONSTRAINT members_account_fkey FOREIGN KEY (bucket, account_id) REFERENCES wallet.accounts(bucket, id);

-- Name: promo_programme_receivers promo_programme_receivers_programme_id_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.promo_programme_receivers
    ADD CONSTRAINT promo_programme_receivers_programme_id_fkey FOREIGN KEY (programme_id) REFERENCES wallet.promo_programmes(id);

-- Name: wallets wallets_account_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.wallets
    ADD CONSTRAINT wallets_account_fkey FOREIGN KEY (bucket, account_id) REFERENCES wallet.accounts(bucket, id);

-- Name: webhook_attempts webhook_attempts_delivery_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_attempts
    ADD CONSTRAINT webhook_attempts_delivery_fkey FOREIGN KEY (bucket, delivery_id) REFERENCES wallet.webhook_deliveries(bucket, id) ON DELETE CASCADE;

-- Name: webhook_deliveries webhook_deliveries_endpoint_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint_fkey FOREIGN KEY (bucket, endpoint_id) REFERENCES wallet.webhook_endpoints(bucket, id) ON DELETE CASCADE;

-- Name: webhook_deliveries webhook_deliveries_event_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (bucket, event_id) REFERENCES wallet.webhook_events(bucket, id);

-- Name: webhook_endpoints webhook_endpoints_account_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_account_fkey FOREIGN KEY (bucket, account_id) REFERENCES wallet.accounts(bucket, id);

-- Name: withdrawal_counts withdrawal_counts_account_fkey; Type: FK CONSTRAINT; Schema: wallet; Owner: -

ALTER TABLE ONLY wallet.withdrawal_counts
    ADD CONSTRAINT withdrawal_counts_account_fkey FOREIGN KEY (bucket, account_id) REFERENCES wallet.accounts(bucket, id);

-- Name: SCHEMA ledger; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA ledger TO hiwallet_wallet_app;
GRANT USAGE ON SCHEMA ledger TO hiwallet_wallet_consumer_app;
GRANT USAGE ON SCHEMA ledger TO hiwallet_wallet_readonly;

-- Name: SCHEMA ledger_api; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA ledger_api TO hiwallet_wallet_app;
GRANT USAGE ON SCHEMA ledger_api TO hiwallet_wallet_consumer_app;
GRANT USAGE ON SCHEMA ledger_api TO hiwallet_wallet_readonly;

-- Name: SCHEMA wallet; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA wallet TO hiwallet_wallet_app;
GRANT USAGE ON SCHEMA wallet TO hiwallet_wallet_consumer_app;
GRANT USAGE ON SCHEMA wallet TO hiwallet_wallet_readonly;
GRANT USAGE ON SCHEMA wallet TO hiwallet_merchant_webhooks_app;

-- Name: FUNCTION assert_balanced(p_id text, p_amounts bigint[], p_currencies text[]); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.assert_balanced(p_id text, p_amounts bigint[], p_currencies text[]) FROM PUBLIC;

-- Name: FUNCTION check_balanced(); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.check_balanced() FROM PUBLIC;

-- Name: FUNCTION ensure_system_accounts(p_bucket smallint, p_currency text, p_providers text[]); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.ensure_system_accounts(p_bucket smallint, p_currency text, p_providers text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.ensure_system_accounts(p_bucket smallint, p_currency text, p_providers text[]) TO hiwallet_wallet_app;

-- Name: FUNCTION line_hash(p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint, p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamp with time zone); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.line_hash(p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint, p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.line_hash(p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint, p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamp with time zone) TO hiwallet_wallet_app;
GRANT ALL ON FUNCTION ledger.line_hash(p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint, p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamp with time zone) TO hiwallet_wallet_readonly;
GRANT ALL ON FUNCTION ledger.line_hash(p_prev bytea, p_account_id text, p_version bigint, p_transaction_id text, p_amount bigint, p_currency text, p_balance_after bigint, p_type text, p_ref text, p_posted_at timestamp with time zone) TO hiwallet_wallet_consumer_app;

-- Name: FUNCTION open_account(p_bucket smallint, p_id text, p_purse text, p_currency text, p_owner text); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.open_account(p_bucket smallint, p_id text, p_purse text, p_currency text, p_owner text) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.open_account(p_bucket smallint, p_id text, p_purse text, p_currency text, p_owner text) TO hiwallet_wallet_app;

-- Name: FUNCTION open_accounts(p_buckets smallint[], p_ids text[], p_purses text[], p_currency text, p_owner text); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.open_accounts(p_buckets smallint[], p_ids text[], p_purses text[], p_currency text, p_owner text) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.open_accounts(p_buckets smallint[], p_ids text[], p_purses text[], p_currency text, p_owner text) TO hiwallet_wallet_app;

-- Name: FUNCTION place_hold(p_bucket smallint, p_account text, p_key text, p_amount bigint); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.place_hold(p_bucket smallint, p_account text, p_key text, p_amount bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.place_hold(p_bucket smallint, p_account text, p_key text, p_amount bigint) TO hiwallet_wallet_app;

-- Name: FUNCTION post(p_id text, p_home_bucket smallint, p_type text, p_actor text, p_ref text, p_request_hash bytea, p_parts_balanced boolean, p_refund_of text, p_metadata jsonb, p_buckets smallint[], p_accounts text[], p_amounts bigint[], p_currencies text[], p_options jsonb); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.post(p_id text, p_home_bucket smallint, p_type text, p_actor text, p_ref text, p_request_hash bytea, p_parts_balanced boolean, p_refund_of text, p_metadata jsonb, p_buckets smallint[], p_accounts text[], p_amounts bigint[], p_currencies text[], p_options jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.post(p_id text, p_home_bucket smallint, p_type text, p_actor text, p_ref text, p_request_hash bytea, p_parts_balanced boolean, p_refund_of text, p_metadata jsonb, p_buckets smallint[], p_accounts text[], p_amounts bigint[], p_currencies text[], p_options jsonb) TO hiwallet_wallet_app;

-- Name: FUNCTION post_batch(p_postings ledger.posting_in[], p_replay_on_conflict boolean); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.post_batch(p_postings ledger.posting_in[], p_replay_on_conflict boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.post_batch(p_postings ledger.posting_in[], p_replay_on_conflict boolean) TO hiwallet_wallet_app;
GRANT ALL ON FUNCTION ledger.post_batch(p_postings ledger.posting_in[], p_replay_on_conflict boolean) TO hiwallet_wallet_consumer_app;

-- Name: FUNCTION refusal(p_state text, p_message text, p_detail jsonb); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.refusal(p_state text, p_message text, p_detail jsonb) FROM PUBLIC;

-- Name: FUNCTION refuse_change(); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.refuse_change() FROM PUBLIC;

-- Name: FUNCTION release_hold(p_bucket smallint, p_account text, p_key text); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.release_hold(p_bucket smallint, p_account text, p_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger.release_hold(p_bucket smallint, p_account text, p_key text) TO hiwallet_wallet_app;

-- Name: FUNCTION replay(p_home_bucket smallint, p_id text, p_request_hash bytea); Type: ACL; Schema: ledger; Owner: -

REVOKE ALL ON FUNCTION ledger.replay(p_home_bucket smallint, p_id text, p_request_hash bytea) FROM PUBLIC;

-- Name: FUNCTION post_batch(p_postings ledger.posting_in[]); Type: ACL; Schema: ledger_api; Owner: -

REVOKE ALL ON FUNCTION ledger_api.post_batch(p_postings ledger.posting_in[]) FROM PUBLIC;
GRANT ALL ON FUNCTION ledger_api.post_batch(p_postings ledger.posting_in[]) TO hiwallet_wallet_app;
GRANT ALL ON FUNCTION ledger_api.post_batch(p_postings ledger.posting_in[]) TO hiwallet_wallet_consumer_app;

-- Name: FUNCTION account_contracts_guard(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.account_contracts_guard() FROM PUBLIC;

-- Name: FUNCTION count_withdrawal(p_bucket smallint, p_command_id text, p_account text, p_month date, p_currency text, p_amount bigint, p_limit bigint); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.count_withdrawal(p_bucket smallint, p_command_id text, p_account text, p_month date, p_currency text, p_amount bigint, p_limit bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION wallet.count_withdrawal(p_bucket smallint, p_command_id text, p_account text, p_month date, p_currency text, p_amount bigint, p_limit bigint) TO hiwallet_wallet_consumer_app;

-- Name: FUNCTION goodwill_credits_guard(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.goodwill_credits_guard() FROM PUBLIC;

-- Name: FUNCTION outbox_keeps_unsent(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.outbox_keeps_unsent() FROM PUBLIC;

-- Name: FUNCTION processed_messages_append_only(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.processed_messages_append_only() FROM PUBLIC;

-- Name: FUNCTION promo_programmes_guard(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.promo_programmes_guard() FROM PUBLIC;

-- Name: FUNCTION reconciliation_findings_keep_resolution(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.reconciliation_findings_keep_resolution() FROM PUBLIC;

-- Name: FUNCTION return_withdrawal(p_bucket smallint, p_command_id text); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.return_withdrawal(p_bucket smallint, p_command_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION wallet.return_withdrawal(p_bucket smallint, p_command_id text) TO hiwallet_wallet_consumer_app;

-- Name: FUNCTION transfer_batch(w_buckets smallint[], w_scopes text[], w_keys text[], w_locks bigint[], w_hashes bytea[], w_issuers text[], w_subjects text[], w_src_accounts text[], w_src_tiers text[], w_dst_buckets smallint[], w_dst_accounts text[], w_dst_tiers text[], w_months date[], w_limit_kinds text[], w_limit_locks bigint[], w_currencies text[], w_amounts bigint[], w_limits bigint[], w_views jsonb[], p_postings ledger_api.posting_in[]); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.transfer_batch(w_buckets smallint[], w_scopes text[], w_keys text[], w_locks bigint[], w_hashes bytea[], w_issuers text[], w_subjects text[], w_src_accounts text[], w_src_tiers text[], w_dst_buckets smallint[], w_dst_accounts text[], w_dst_tiers text[], w_months date[], w_limit_kinds text[], w_limit_locks bigint[], w_currencies text[], w_amounts bigint[], w_limits bigint[], w_views jsonb[], p_postings ledger_api.posting_in[]) FROM PUBLIC;
GRANT ALL ON FUNCTION wallet.transfer_batch(w_buckets smallint[], w_scopes text[], w_keys text[], w_locks bigint[], w_hashes bytea[], w_issuers text[], w_subjects text[], w_src_accounts text[], w_src_tiers text[], w_dst_buckets smallint[], w_dst_accounts text[], w_dst_tiers text[], w_months date[], w_limit_kinds text[], w_limit_locks bigint[], w_currencies text[], w_amounts bigint[], w_limits bigint[], w_views jsonb[], p_postings ledger_api.posting_in[]) TO hiwallet_wallet_app;

-- Name: FUNCTION unattributed_topups_attributed_once(); Type: ACL; Schema: wallet; Owner: -

REVOKE ALL ON FUNCTION wallet.unattributed_topups_attributed_once() FROM PUBLIC;

-- Name: TABLE accounts; Type: ACL; Schema: ledger; Owner: -

GRANT SELECT ON TABLE ledger.accounts TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger.accounts TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger.accounts TO hiwallet_wallet_readonly;

-- Name: TABLE holds; Type: ACL; Schema: ledger; Owner: -

GRANT SELECT ON TABLE ledger.holds TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger.holds TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger.holds TO hiwallet_wallet_readonly;

-- Name: TABLE lines; Type: ACL; Schema: ledger; Owner: -

GRANT SELECT ON TABLE ledger.lines TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger.lines TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger.lines TO hiwallet_wallet_readonly;

-- Name: TABLE promo_batches; Type: ACL; Schema: ledger; Owner: -

GRANT SELECT ON TABLE ledger.promo_batches TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger.promo_batches TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger.promo_batches TO hiwallet_wallet_readonly;

-- Name: TABLE promo_spends; Type: ACL; Schema: ledger; Owner: -

GRANT SELECT ON TABLE ledger.promo_spends TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger.promo_spends TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger.promo_spends TO hiwallet_wallet_readonly;

-- Name: TABLE transactions; Type: ACL; Schema: ledger; Owner: -

GRANT SELECT ON TABLE ledger.transactions TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger.transactions TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger.transactions TO hiwallet_wallet_readonly;

-- Name: TABLE accounts; Type: ACL; Schema: ledger_api; Owner: -

GRANT SELECT ON TABLE ledger_api.accounts TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger_api.accounts TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger_api.accounts TO hiwallet_wallet_readonly;

-- Name: TABLE lines; Type: ACL; Schema: ledger_api; Owner: -

GRANT SELECT ON TABLE ledger_api.lines TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger_api.lines TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger_api.lines TO hiwallet_wallet_readonly;

-- Name: TABLE promo_batches; Type: ACL; Schema: ledger_api; Owner: -

GRANT SELECT ON TABLE ledger_api.promo_batches TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger_api.promo_batches TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger_api.promo_batches TO hiwallet_wallet_readonly;

-- Name: TABLE transaction_wallet_accounts; Type: ACL; Schema: ledger_api; Owner: -

GRANT SELECT ON TABLE ledger_api.transaction_wallet_accounts TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger_api.transaction_wallet_accounts TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger_api.transaction_wallet_accounts TO hiwallet_wallet_readonly;

-- Name: TABLE transactions; Type: ACL; Schema: ledger_api; Owner: -

GRANT SELECT ON TABLE ledger_api.transactions TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger_api.transactions TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger_api.transactions TO hiwallet_wallet_readonly;

-- Name: TABLE wallet_purses; Type: ACL; Schema: ledger_api; Owner: -

GRANT SELECT ON TABLE ledger_api.wallet_purses TO hiwallet_wallet_app;
GRANT SELECT ON TABLE ledger_api.wallet_purses TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE ledger_api.wallet_purses TO hiwallet_wallet_readonly;

-- Name: TABLE processed_events; Type: ACL; Schema: public; Owner: -

GRANT SELECT,INSERT ON TABLE public.processed_events TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE public.processed_events TO hiwallet_wallet_readonly;

-- Name: COLUMN processed_events.outcome; Type: ACL; Schema: public; Owner: -

GRANT UPDATE(outcome) ON TABLE public.processed_events TO hiwallet_wallet_consumer_app;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_wallet_readonly;

-- Name: TABLE account_contracts; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.account_contracts TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.account_contracts TO hiwallet_wallet_app;

-- Name: TABLE accounts; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.accounts TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.accounts TO hiwallet_wallet_app;

-- Name: COLUMN accounts.bucket; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(bucket) ON TABLE wallet.accounts TO hiwallet_wallet_consumer_app;

-- Name: COLUMN accounts.id; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(id) ON TABLE wallet.accounts TO hiwallet_wallet_consumer_app;

-- Name: COLUMN accounts.kind; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(kind) ON TABLE wallet.accounts TO hiwallet_wallet_consumer_app;

-- Name: COLUMN accounts.tier; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(tier) ON TABLE wallet.accounts TO hiwallet_wallet_app;
GRANT SELECT(tier) ON TABLE wallet.accounts TO hiwallet_wallet_consumer_app;

-- Name: COLUMN accounts.updated_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(updated_at) ON TABLE wallet.accounts TO hiwallet_wallet_app;

-- Name: TABLE bank_statement_lines; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.bank_statement_lines TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.bank_statement_lines TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE wallet.bank_statement_lines TO hiwallet_wallet_app;

-- Name: TABLE bank_statements; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.bank_statements TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.bank_statements TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE wallet.bank_statements TO hiwallet_wallet_app;

-- Name: TABLE campaign_grants; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.campaign_grants TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.campaign_grants TO hiwallet_wallet_app;

-- Name: TABLE campaigns; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.campaigns TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.campaigns TO hiwallet_wallet_app;

-- Name: COLUMN campaigns.remaining_minor; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(remaining_minor) ON TABLE wallet.campaigns TO hiwallet_wallet_app;

-- Name: TABLE daily_summary; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.daily_summary TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.daily_summary TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE wallet.daily_summary TO hiwallet_wallet_app;

-- Name: COLUMN daily_summary.transactions; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(transactions) ON TABLE wallet.daily_summary TO hiwallet_wallet_consumer_app;

-- Name: COLUMN daily_summary.volume_in_minor; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(volume_in_minor) ON TABLE wallet.daily_summary TO hiwallet_wallet_consumer_app;

-- Name: COLUMN daily_summary.volume_out_minor; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(volume_out_minor) ON TABLE wallet.daily_summary TO hiwallet_wallet_consumer_app;

-- Name: COLUMN daily_summary.fees_minor; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(fees_minor) ON TABLE wallet.daily_summary TO hiwallet_wallet_consumer_app;

-- Name: COLUMN daily_summary.computed_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(computed_at) ON TABLE wallet.daily_summary TO hiwallet_wallet_consumer_app;

-- Name: TABLE goodwill_credits; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.goodwill_credits TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.goodwill_credits TO hiwallet_wallet_app;

-- Name: COLUMN goodwill_credits.status; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(status) ON TABLE wallet.goodwill_credits TO hiwallet_wallet_app;

-- Name: COLUMN goodwill_credits.approved_by; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(approved_by) ON TABLE wallet.goodwill_credits TO hiwallet_wallet_app;

-- Name: COLUMN goodwill_credits.approved_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(approved_at) ON TABLE wallet.goodwill_credits TO hiwallet_wallet_app;

-- Name: COLUMN goodwill_credits.transaction_id; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(transaction_id) ON TABLE wallet.goodwill_credits TO hiwallet_wallet_app;

-- Name: TABLE idempotency_keys; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.idempotency_keys TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT,DELETE ON TABLE wallet.idempotency_keys TO hiwallet_wallet_app;

-- Name: TABLE identity_accounts; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.identity_accounts TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.identity_accounts TO hiwallet_wallet_app;

-- Name: TABLE limit_usage; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.limit_usage TO hiwallet_wallet_readonly;
GRANT SELECT ON TABLE wallet.limit_usage TO hiwallet_wallet_app;
GRANT SELECT ON TABLE wallet.limit_usage TO hiwallet_wallet_consumer_app;

-- Name: TABLE members; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.members TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.members TO hiwallet_wallet_app;

-- Name: COLUMN members.bucket; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(bucket) ON TABLE wallet.members TO hiwallet_wallet_consumer_app;

-- Name: COLUMN members.account_id; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(account_id) ON TABLE wallet.members TO hiwallet_wallet_consumer_app;

-- Name: COLUMN members.issuer; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(issuer) ON TABLE wallet.members TO hiwallet_wallet_consumer_app;

-- Name: COLUMN members.subject; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(subject) ON TABLE wallet.members TO hiwallet_wallet_consumer_app;

-- Name: TABLE outbox; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.outbox TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT,DELETE ON TABLE wallet.outbox TO hiwallet_wallet_consumer_app;

-- Name: COLUMN outbox.sent_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(sent_at) ON TABLE wallet.outbox TO hiwallet_wallet_consumer_app;

-- Name: TABLE processed_messages; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.processed_messages TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.processed_messages TO hiwallet_wallet_consumer_app;

-- Name: TABLE promo_programme_receivers; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.promo_programme_receivers TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.promo_programme_receivers TO hiwallet_wallet_app;

-- Name: COLUMN promo_programme_receivers.granted_minor; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(granted_minor) ON TABLE wallet.promo_programme_receivers TO hiwallet_wallet_app;

-- Name: TABLE promo_programmes; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.promo_programmes TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.promo_programmes TO hiwallet_wallet_app;

-- Name: COLUMN promo_programmes.remaining_minor; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(remaining_minor) ON TABLE wallet.promo_programmes TO hiwallet_wallet_app;

-- Name: COLUMN promo_programmes.status; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(status) ON TABLE wallet.promo_programmes TO hiwallet_wallet_app;

-- Name: COLUMN promo_programmes.decided_by; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(decided_by) ON TABLE wallet.promo_programmes TO hiwallet_wallet_app;

-- Name: COLUMN promo_programmes.decided_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(decided_at) ON TABLE wallet.promo_programmes TO hiwallet_wallet_app;

-- Name: COLUMN promo_programmes.decision_reason; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(decision_reason) ON TABLE wallet.promo_programmes TO hiwallet_wallet_app;

-- Name: TABLE reconciliation_findings; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT SELECT,INSERT ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: COLUMN reconciliation_findings.details; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(details) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT UPDATE(details) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: COLUMN reconciliation_findings.last_seen_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(last_seen_at) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT UPDATE(last_seen_at) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: COLUMN reconciliation_findings.status; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(status) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT UPDATE(status) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: COLUMN reconciliation_findings.resolved_by; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(resolved_by) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT UPDATE(resolved_by) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: COLUMN reconciliation_findings.resolution_note; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(resolution_note) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT UPDATE(resolution_note) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: COLUMN reconciliation_findings.resolved_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(resolved_at) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_consumer_app;
GRANT UPDATE(resolved_at) ON TABLE wallet.reconciliation_findings TO hiwallet_wallet_app;

-- Name: TABLE settled_topups; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.settled_topups TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.settled_topups TO hiwallet_wallet_consumer_app;
GRANT SELECT ON TABLE wallet.settled_topups TO hiwallet_wallet_app;

-- Name: TABLE staff_daily_usage; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.staff_daily_usage TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.staff_daily_usage TO hiwallet_wallet_app;

-- Name: COLUMN staff_daily_usage.used; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(used) ON TABLE wallet.staff_daily_usage TO hiwallet_wallet_app;

-- Name: TABLE unattributed_topups; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.unattributed_topups TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.unattributed_topups TO hiwallet_wallet_consumer_app;

-- Name: COLUMN unattributed_topups.attributed_wallet; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(attributed_wallet) ON TABLE wallet.unattributed_topups TO hiwallet_wallet_consumer_app;

-- Name: COLUMN unattributed_topups.attributed_by; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(attributed_by) ON TABLE wallet.unattributed_topups TO hiwallet_wallet_consumer_app;

-- Name: COLUMN unattributed_topups.attributed_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(attributed_at) ON TABLE wallet.unattributed_topups TO hiwallet_wallet_consumer_app;

-- Name: TABLE wallets; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.wallets TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.wallets TO hiwallet_wallet_app;

-- Name: COLUMN wallets.bucket; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(bucket) ON TABLE wallet.wallets TO hiwallet_wallet_consumer_app;

-- Name: COLUMN wallets.id; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(id) ON TABLE wallet.wallets TO hiwallet_wallet_consumer_app;

-- Name: COLUMN wallets.account_id; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(account_id) ON TABLE wallet.wallets TO hiwallet_wallet_consumer_app;

-- Name: COLUMN wallets.currency; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(currency) ON TABLE wallet.wallets TO hiwallet_wallet_consumer_app;

-- Name: COLUMN wallets.closed_at; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT(closed_at) ON TABLE wallet.wallets TO hiwallet_wallet_consumer_app;

-- Name: TABLE webhook_attempts; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.webhook_attempts TO hiwallet_wallet_readonly;
GRANT SELECT ON TABLE wallet.webhook_attempts TO hiwallet_wallet_app;
GRANT SELECT,INSERT,DELETE ON TABLE wallet.webhook_attempts TO hiwallet_merchant_webhooks_app;

-- Name: TABLE webhook_deliveries; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.webhook_deliveries TO hiwallet_wallet_readonly;
GRANT SELECT ON TABLE wallet.webhook_deliveries TO hiwallet_wallet_app;
GRANT SELECT,INSERT,DELETE ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.status; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(status) ON TABLE wallet.webhook_deliveries TO hiwallet_wallet_app;
GRANT UPDATE(status) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.attempts; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(attempts) ON TABLE wallet.webhook_deliveries TO hiwallet_wallet_app;
GRANT UPDATE(attempts) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.next_attempt_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(next_attempt_at) ON TABLE wallet.webhook_deliveries TO hiwallet_wallet_app;
GRANT UPDATE(next_attempt_at) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.last_status_code; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(last_status_code) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.last_error; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(last_error) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.updated_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(updated_at) ON TABLE wallet.webhook_deliveries TO hiwallet_wallet_app;
GRANT UPDATE(updated_at) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_deliveries.delivered_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(delivered_at) ON TABLE wallet.webhook_deliveries TO hiwallet_merchant_webhooks_app;

-- Name: TABLE webhook_endpoints; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT,DELETE ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;
GRANT SELECT ON TABLE wallet.webhook_endpoints TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_endpoints.url; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(url) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;

-- Name: COLUMN webhook_endpoints.event_types; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(event_types) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;

-- Name: COLUMN webhook_endpoints.description; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(description) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;

-- Name: COLUMN webhook_endpoints.enabled; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(enabled) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;
GRANT UPDATE(enabled) ON TABLE wallet.webhook_endpoints TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_endpoints.disabled_reason; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(disabled_reason) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;
GRANT UPDATE(disabled_reason) ON TABLE wallet.webhook_endpoints TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_endpoints.disabled_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(disabled_at) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;
GRANT UPDATE(disabled_at) ON TABLE wallet.webhook_endpoints TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_endpoints.secret_sealed; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(secret_sealed) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;

-- Name: COLUMN webhook_endpoints.previous_secret_sealed; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(previous_secret_sealed) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;

-- Name: COLUMN webhook_endpoints.previous_secret_until; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(previous_secret_until) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;

-- Name: COLUMN webhook_endpoints.failing_since; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(failing_since) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;
GRANT UPDATE(failing_since) ON TABLE wallet.webhook_endpoints TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_endpoints.updated_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(updated_at) ON TABLE wallet.webhook_endpoints TO hiwallet_wallet_app;
GRANT UPDATE(updated_at) ON TABLE wallet.webhook_endpoints TO hiwallet_merchant_webhooks_app;

-- Name: TABLE webhook_events; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.webhook_events TO hiwallet_wallet_readonly;
GRANT SELECT,INSERT ON TABLE wallet.webhook_events TO hiwallet_wallet_app;
GRANT INSERT ON TABLE wallet.webhook_events TO hiwallet_wallet_consumer_app;
GRANT SELECT,INSERT,DELETE ON TABLE wallet.webhook_events TO hiwallet_merchant_webhooks_app;

-- Name: COLUMN webhook_events.dispatched_at; Type: ACL; Schema: wallet; Owner: -

GRANT UPDATE(dispatched_at) ON TABLE wallet.webhook_events TO hiwallet_merchant_webhooks_app;

-- Name: TABLE withdrawal_counts; Type: ACL; Schema: wallet; Owner: -

GRANT SELECT ON TABLE wallet.withdrawal_counts TO hiwallet_wallet_readonly;
GRANT SELECT ON TABLE wallet.withdrawal_counts TO hiwallet_wallet_consumer_app;

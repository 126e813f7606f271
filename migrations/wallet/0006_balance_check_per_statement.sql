-- The balance check, once per statement that writes lines instead of once per line at commit.
--
-- Why: the deferred row trigger of 0001 ran once per line, and each run summed the whole
-- transaction again: measured with track_functions, 54 µs a line, two lines a transfer, about
-- a third of the database's CPU per transfer in a batch of 1,000 (bench/). A statement-level
-- trigger sees every line the statement wrote in its transition table and checks each touched
-- transaction (or, with transit legs, each touched part) once, set-based.
--
-- The guarantee is the same and fails closed. Every statement that inserts lines must insert,
-- for each transaction it touches, lines that sum to zero per currency (per bucket part, with
-- transit legs). A transaction starts with no lines, so by induction its lines sum to zero
-- after every statement, whoever wrote them: a statement that wrote half a transaction is
-- refused at once. Only the statement's own lines are read (its transition table), so the
-- check costs the same whether a transaction has two lines or two hundred. Constraint
-- triggers are row-level only in PostgreSQL, hence an AFTER ... FOR EACH STATEMENT trigger; it
-- reads the tables only through (bucket, id), as the row trigger did.

DROP TRIGGER lines_balanced ON ledger.lines;
DROP FUNCTION ledger.check_balanced();

CREATE FUNCTION ledger.check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER lines_balanced AFTER INSERT ON ledger.lines
    REFERENCING NEW TABLE AS new_lines
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.check_balanced();

-- No JIT in the posting path: a batch of 1,000 postings crosses jit_above_cost, and compiling
-- its expressions took longer than running them (measured: 77 ms of a 130 ms balance check).
ALTER FUNCTION ledger.check_balanced() SET jit = off;
ALTER FUNCTION ledger.post SET jit = off;
ALTER FUNCTION ledger.post_many SET jit = off;
ALTER FUNCTION ledger.post_batch SET jit = off;
ALTER FUNCTION wallet.transfer_batch SET jit = off;

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
    -- zero per currency.
    SELECT n.transaction_id, n.currency, sum(n.amount) AS total,
           min(n.account_id || ' v' || n.version) FILTER (WHERE a.id IS NULL) AS no_account,
           min(n.account_id || ' v' || n.version) FILTER (WHERE t.id IS NULL) AS no_part
      INTO v
      FROM new_lines n
      LEFT JOIN ledger.accounts a ON a.bucket = n.bucket AND a.id = n.account_id
      LEFT JOIN ledger.transactions t ON t.bucket = n.bucket AND t.id = n.transaction_id
     GROUP BY n.transaction_id, n.currency, CASE WHEN t.parts_balanced THEN n.bucket END
    HAVING sum(n.amount) <> 0 OR bool_or(a.id IS NULL) OR bool_or(t.id IS NULL)
     ORDER BY bool_or(a.id IS NULL OR t.id IS NULL) DESC
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

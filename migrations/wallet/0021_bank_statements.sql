-- The bank's daily statements of our account (issue 24, the nostro against the bank's
-- statement; docs/operations.md): every movement the bank booked, as bank-adapter read it
-- (contracts/settlements.py, BankStatement), kept by wallet-consumer in the transaction that
-- settles the day's wires, once per day (the primary key; the message is also deduplicated by
-- processed_events). Reconciliation matches the lines against the nostro's movements and each
-- day's balances against the day before and the nostro. Never changed, never deleted (the
-- grants: no UPDATE, no DELETE). Local tables on Citus (a few rows a day, read by one job).
CREATE TABLE wallet.bank_statements (
    day           date        NOT NULL,
    currency      text        NOT NULL,
    opening_minor bigint      NOT NULL,
    closing_minor bigint      NOT NULL,
    lines         integer     NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT bank_statements_pkey PRIMARY KEY (day, currency),
    CONSTRAINT bank_statements_currency_format CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT bank_statements_lines_not_negative CHECK (lines >= 0)
);

-- One movement: signed as the bank sees it (+ credited to our account, − debited).
CREATE TABLE wallet.bank_statement_lines (
    day                date    NOT NULL,
    currency           text    NOT NULL,
    position           integer NOT NULL,
    bank_reference     text    NOT NULL,
    customer_reference text,
    amount_minor       bigint  NOT NULL,
    booked_on          date    NOT NULL,
    saga_id            text,
    CONSTRAINT bank_statement_lines_pkey PRIMARY KEY (day, currency, position),
    CONSTRAINT bank_statement_lines_statement_fkey FOREIGN KEY (day, currency)
        REFERENCES wallet.bank_statements (day, currency),
    CONSTRAINT bank_statement_lines_amount_not_zero CHECK (amount_minor <> 0),
    CONSTRAINT bank_statement_lines_reference_length CHECK (length(bank_reference) BETWEEN 1 AND 200)
);

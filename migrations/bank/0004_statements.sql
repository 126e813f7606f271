-- Our account's daily statements, as bank-adapter's statement importer read them (MT940,
-- docs/bank.md "Statements"): one row per day, written with its SettlementReported outbox row
-- (the wires the day's statement shows credited: the bank's top-ups settled) in the same
-- statement, only by bank.record_statement. The primary key makes a day announced once,
-- whichever instance, round or command read it.
CREATE TABLE bank.statements (
    day          date        NOT NULL,
    message_id   text        NOT NULL,
    currency     text        NOT NULL,
    amount_minor bigint      NOT NULL,
    lines        integer     NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT statements_pkey PRIMARY KEY (day),
    CONSTRAINT statements_message_id_unique UNIQUE (message_id),
    CONSTRAINT statements_amount_not_negative CHECK (amount_minor >= 0),
    CONSTRAINT statements_lines_not_negative CHECK (lines >= 0)
);

-- A day's statement and its announcement, or nothing when it was recorded before: true when
-- recorded now (grants.sql: SECURITY DEFINER; two concurrent calls of one day are one row).
CREATE FUNCTION bank.record_statement(
    p_day date,
    p_currency text,
    p_amount_minor bigint,
    p_lines integer,
    p_message_id text,
    p_exchange text,
    p_routing_key text,
    p_message_type text,
    p_headers jsonb,
    p_body jsonb
) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bank.statements (day, message_id, currency, amount_minor, lines)
    VALUES (p_day, p_message_id, p_currency, p_amount_minor, p_lines)
    ON CONFLICT ON CONSTRAINT statements_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO bank.outbox (message_id, exchange, routing_key, message_type, headers, body)
    VALUES (p_message_id, p_exchange, p_routing_key, p_message_type, p_headers, p_body);
    RETURN true;
END $$;

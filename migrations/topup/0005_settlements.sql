-- The providers' payouts, as topup-webhook's settlement importer read them (docs/topups.md,
-- "Settlement"): one row per (provider, payout), written with its SettlementReported outbox
-- row in the same statement, only by topup.record_settlement. The primary key is what makes a
-- payout announced once, whichever instance or operator command read it, however often.
CREATE TABLE topup.settlements (
    provider     text        NOT NULL,
    payout_id    text        NOT NULL,
    message_id   text        NOT NULL,
    currency     text        NOT NULL,
    amount_minor bigint      NOT NULL,
    lines        integer     NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT settlements_pkey PRIMARY KEY (provider, payout_id),
    CONSTRAINT settlements_message_id_unique UNIQUE (message_id),
    CONSTRAINT settlements_amount_not_negative CHECK (amount_minor >= 0),
    CONSTRAINT settlements_lines_not_negative CHECK (lines >= 0)
);

-- A payout and its announcement, or nothing when it was recorded before: true when recorded
-- now. grants.sql makes it SECURITY DEFINER: the service cannot announce a payout without its
-- record, nor twice. ON CONFLICT DO NOTHING makes two concurrent calls of one payout one row
-- (the loser waits for the winner's commit, then sees the conflict).
CREATE FUNCTION topup.record_settlement(
    p_provider text,
    p_payout_id text,
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
    INSERT INTO topup.settlements (provider, payout_id, message_id, currency, amount_minor, lines)
    VALUES (p_provider, p_payout_id, p_message_id, p_currency, p_amount_minor, p_lines)
    ON CONFLICT ON CONSTRAINT settlements_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO topup.outbox (message_id, exchange, routing_key, message_type, headers, body)
    VALUES (p_message_id, p_exchange, p_routing_key, p_message_type, p_headers, p_body);
    RETURN true;
END $$;

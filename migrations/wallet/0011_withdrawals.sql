-- wallet-consumer's withdrawal commands (issue 11, CONTRACT-11 part B): the response stored
-- for each command, the outbox that carries the responses to the orchestrator, and the monthly
-- withdrawal limit (wallet.limit_usage kind 'withdrawal', with the debits it counted).

-- The response to each command, under the command's id (core.withdrawals.command_id: the same
-- id every time the orchestrator publishes the step), written in the transaction of the
-- command's effect together with its outbox row. A command that comes again (the stuck saga
-- scan publishes it again under a new message id) finds its response here and has it
-- published again, instead of acting twice. Append-only: the application role may insert and
-- read (grants.sql), and a trigger refuses changing or deleting a response.
-- Not distributed by bucket (src/hiwallet/ledger/citus_tables.json: local): keyed by the
-- command, as public.processed_events by the message.
CREATE TABLE wallet.processed_messages (
    command_id    text        NOT NULL,
    command_type  text        NOT NULL,
    saga_id       text        NOT NULL,
    response_type text        NOT NULL,
    response      jsonb       NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT processed_messages_pkey PRIMARY KEY (command_id),
    CONSTRAINT processed_messages_response_fits_command CHECK (
        (command_type = 'DebitForWithdrawal'
            AND response_type IN ('WithdrawalDebited', 'WithdrawalDebitRejected'))
        OR (command_type = 'SettleWithdrawal' AND response_type = 'WithdrawalSettled')
        OR (command_type = 'RefundWithdrawal' AND response_type = 'WithdrawalRefunded')),
    CONSTRAINT processed_messages_response_object CHECK (jsonb_typeof(response) = 'object'),
    CONSTRAINT processed_messages_ids_length CHECK (
        length(command_id) BETWEEN 1 AND 200 AND length(saga_id) BETWEEN 1 AND 200)
);
-- A saga's responses (an operator's question: what did the wallet answer for saga X?)
CREATE INDEX processed_messages_saga ON wallet.processed_messages (saga_id);

CREATE FUNCTION wallet.processed_messages_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a stored command response is never changed or deleted'
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER processed_messages_append_only BEFORE UPDATE OR DELETE ON wallet.processed_messages
    FOR EACH ROW EXECUTE FUNCTION wallet.processed_messages_append_only();

-- The transactional outbox (core/outbox.py, outbox_table_sql('wallet.outbox', 'wallet_outbox')),
-- its relay inside wallet-consumer. With the NOTIFY trigger: the contract asked for none
-- (notify_trigger=False, as topup-webhook's), but the rows are written inside core's
-- Consumer's transaction, whose commit the handler does not see, so no RelayHint can follow
-- the commit; a NOTIFY at commit is the hint instead. Only withdrawal commands write here (a
-- few a second at most): the notify-queue lock that serialises trigger-notified commits
-- (docs/spine.md) costs them nothing, and top-ups never notify.
CREATE TABLE wallet.outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   text        NOT NULL CONSTRAINT outbox_message_id_unique UNIQUE,
    exchange     text        NOT NULL,
    routing_key  text        NOT NULL,
    message_type text        NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    body         jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz
);
-- The relay's claim and the lag gauge read only the unsent rows: a small index, however many
-- sent rows wait for the purge.
CREATE INDEX outbox_unsent ON wallet.outbox (id) WHERE sent_at IS NULL;

-- A hint to the relay that rows are due, sent at commit (LISTEN wallet_outbox); the relay
-- polls as well, so a lost notification only delays. Once per statement, not per row.
CREATE FUNCTION wallet.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wallet_outbox', '');
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON wallet.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION wallet.outbox_notify();

-- The relay may delete what it sent (core.outbox.purge_sent), never a message still to be
-- sent: that would be a saga that never moves on.
CREATE FUNCTION wallet.outbox_keeps_unsent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON wallet.outbox
    FOR EACH ROW EXECUTE FUNCTION wallet.outbox_keeps_unsent();

-- The kinds of monthly limit: wallet-api's two (transfer, payment) and the withdrawal.
ALTER TABLE wallet.limit_usage ADD CONSTRAINT limit_usage_kind_known
    CHECK (kind IN ('transfer', 'payment', 'withdrawal'));

-- Each debit counted against its account's monthly withdrawal limit, once (its command id),
-- and whether a refund gave it back (once). wallet.limit_usage's 'withdrawal' rows are the
-- sum of what these rows counted and did not give back; they change only through the two
-- functions below.
CREATE TABLE wallet.withdrawal_counts (
    bucket      smallint    NOT NULL,
    command_id  text        NOT NULL,
    account_id  text        NOT NULL,
    month       date        NOT NULL,
    currency    char(3)     NOT NULL,
    amount      bigint      NOT NULL,
    counted_at  timestamptz NOT NULL,
    returned_at timestamptz,
    CONSTRAINT withdrawal_counts_pkey PRIMARY KEY (bucket, command_id),
    CONSTRAINT withdrawal_counts_account_fkey FOREIGN KEY (bucket, account_id)
        REFERENCES wallet.accounts (bucket, id),
    CONSTRAINT withdrawal_counts_amount_positive CHECK (amount > 0)
);

-- Count a withdrawal of p_amount against the account's limit for p_month and p_currency,
-- unless the month's total would pass p_limit: then nothing is written. One decision at a time
-- per account, month and currency (a transaction-level advisory lock, as wallet.transfer_batch
-- takes for the other kinds), so two debits at the limit cannot both pass. Answers
-- {"counted": bool, "used": the total with this one, "limit": p_limit}.
CREATE FUNCTION wallet.count_withdrawal(
    p_bucket smallint, p_command_id text, p_account text, p_month date, p_currency text,
    p_amount bigint, p_limit bigint
) RETURNS jsonb LANGUAGE plpgsql AS $$
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

-- Give back what the debit p_command_id counted (a refunded withdrawal did not leave), to the
-- month it was counted in; at most once. Answers the amount given back (0: nothing was
-- counted, or it was given back before).
CREATE FUNCTION wallet.return_withdrawal(p_bucket smallint, p_command_id text) RETURNS bigint
LANGUAGE plpgsql AS $$
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

-- topup-webhook (issue 10): what the providers told us (topup.inbox, one row per notification,
-- the issue's "topup_inbox"), what was paid (topup.payments, one row per payment at a provider,
-- ever) and what is to be announced (topup.outbox, the transactional outbox of core/outbox.py).
--
-- The service writes all three through topup.ingest only (grants.sql: SECURITY DEFINER, no
-- INSERT or UPDATE on the tables for the application role). A payment row is never changed
-- but for appending the notification ids and routes that reported it, and an outbox row is
-- written only together with the payment row it announces: a compromised service cannot
-- announce a TopupRecorded (which credits a wallet) without a payment record behind it, nor
-- rewrite or erase the record of one.

CREATE SCHEMA IF NOT EXISTS topup;

-- Every verified notification, as it was sent (a repeat of one stores nothing new). Rows are
-- processed in the transaction that stores them (topup.ingest); the retention job deletes
-- processed rows after retention_days (topup.purge_inbox). payload holds what the provider
-- sent, personal data of a wire's sender included: it is read by nobody but an operator, and
-- kept no longer than the retention.
CREATE TABLE topup.inbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    provider     text        NOT NULL,
    -- the provider's id of the notification: Stripe's event id, Standard Webhooks' webhook-id;
    -- "reconciliation:<payment id at the provider>" for what the reconciliation found in a
    -- listing that names no notification (a bank's incoming wires)
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    -- webhook | reconciliation: how it reached us
    route        text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    payload      jsonb       NOT NULL,
    -- the topup.payments row it reported; NULL when it reports none (a type we do nothing
    -- with, or a payment whose fields could not be read)
    payment_id   text,
    processed_at timestamptz,
    CONSTRAINT inbox_pkey PRIMARY KEY (id),
    CONSTRAINT inbox_event_seen UNIQUE (provider, event_id),
    CONSTRAINT inbox_provider_known CHECK (provider IN ('stripe', 'bank')),
    CONSTRAINT inbox_route_known CHECK (route IN ('webhook', 'reconciliation')),
    CONSTRAINT inbox_event_id_length CHECK (length(event_id) BETWEEN 1 AND 255),
    CONSTRAINT inbox_event_type_length CHECK (length(event_type) BETWEEN 1 AND 255)
);
-- No index for the retention: it deletes the oldest processed rows first, which are the lowest
-- ids (received in order), so it reads from the head of the primary key; every index here is
-- paid by every notification stored.

-- One row per payment at a provider, under an id derived from the provider's id of the payment
-- (core.ids.derived_id("topup", provider, provider_payment_id)): every report of one payment,
-- by whichever notification or route, is addressed to this row, and only its creation is
-- announced (TopupRecorded, in the same transaction).
CREATE TABLE topup.payments (
    id                  text        NOT NULL,
    provider            text        NOT NULL,
    provider_payment_id text        NOT NULL,
    -- our wallet id when the notification named a well-formed one; NULL: wallet-consumer keeps
    -- the payment as unattributed
    wallet              text,
    -- what the payer gave as the reference (a wire's free text, a card payment's metadata)
    reference           text,
    amount_minor        bigint      NOT NULL,
    currency            text        NOT NULL,
    -- the ids of every notification that reported it (inbox.event_id), first one first
    reported_by         text[]      NOT NULL,
    -- every route that reported it: webhook, reconciliation, operator
    routes              text[]      NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payments_pkey PRIMARY KEY (id),
    CONSTRAINT payments_one_per_provider_payment UNIQUE (provider, provider_payment_id),
    CONSTRAINT payments_provider_known CHECK (provider IN ('stripe', 'bank')),
    CONSTRAINT payments_amount_positive CHECK (amount_minor > 0),
    CONSTRAINT payments_currency_code CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT payments_wallet_length CHECK (wallet IS NULL OR length(wallet) BETWEEN 1 AND 128),
    -- as the ledger and wallet-consumer bound them (providers.py): what is recorded can be credited
    CONSTRAINT payments_amount_bounded CHECK (amount_minor <= 1000000000000000),
    CONSTRAINT payments_reference_length CHECK (reference IS NULL OR length(reference) <= 500),
    CONSTRAINT payments_provider_payment_id_length CHECK (length(provider_payment_id) BETWEEN 1 AND 200),
    CONSTRAINT payments_reported CHECK (cardinality(reported_by) >= 1),
    CONSTRAINT payments_routes_known CHECK (
        cardinality(routes) >= 1 AND routes <@ ARRAY['webhook', 'reconciliation', 'operator'])
);

-- The transactional outbox, as core/outbox.py's OUTBOX_TABLE_SQL documents it (the same shape
-- in every database that publishes); its relay runs inside topup-webhook.
CREATE TABLE topup.outbox (
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
CREATE INDEX outbox_unsent ON topup.outbox (id) WHERE sent_at IS NULL;

-- A hint to the relay that rows are due, delivered at commit (LISTEN topup_outbox); the relay
-- polls as well, so a lost notification only delays. Once per statement, not per row.
CREATE FUNCTION topup.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('topup_outbox', '');
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_notify AFTER INSERT ON topup.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION topup.outbox_notify();

-- The relay may delete what it sent (core.outbox.purge_sent), never a message still to be sent:
-- that would be a top-up that is never credited.
CREATE FUNCTION topup.outbox_keeps_unsent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sent_at IS NULL THEN
        RAISE EXCEPTION 'outbox message % has not been sent; it may not be deleted', OLD.message_id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;

CREATE TRIGGER outbox_keeps_unsent BEFORE DELETE ON topup.outbox
    FOR EACH ROW EXECUTE FUNCTION topup.outbox_keeps_unsent();

-- One verified notification, in one statement (one round trip, one transaction): stored in the
-- inbox unless seen before (then 'duplicate' and nothing else); when it reports a payment
-- (p_payment_id not NULL), the payment recorded and its TopupRecorded put in the outbox
-- ('recorded'), or, when the payment was recorded before, the notification's id and route
-- appended to it and nothing announced ('reported'; 'mismatch' when it names another amount or
-- currency than the record, which stays as it is). 'stored': a notification that reports no
-- payment. The message is built here from the row it announces, so its type, amount, wallet
-- and routing key are the record's, whatever the caller passes; the exchange is the service's
-- setting (hiwallet.topups; the tests' own names).
CREATE FUNCTION topup.ingest(
    p_provider text, p_event_id text, p_event_type text, p_route text, p_payload jsonb,
    p_payment_id text, p_provider_payment_id text, p_wallet text, p_reference text,
    p_amount_minor bigint, p_currency text, p_message_id text, p_exchange text, p_request_id text
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_inbox bigint;
    v_payment topup.payments;
BEGIN
    INSERT INTO topup.inbox (provider, event_id, event_type, route, payload, payment_id, processed_at)
    VALUES (p_provider, p_event_id, p_event_type, p_route, p_payload, p_payment_id, now())
    ON CONFLICT ON CONSTRAINT inbox_event_seen DO NOTHING
    RETURNING id INTO v_inbox;
    IF v_inbox IS NULL THEN
        RETURN 'duplicate';
    END IF;
    IF p_payment_id IS NULL THEN
        RETURN 'stored';
    END IF;

    INSERT INTO topup.payments (id, provider, provider_payment_id, wallet, reference, amount_minor,
                                currency, reported_by, routes)
    VALUES (p_payment_id, p_provider, p_provider_payment_id, p_wallet, p_reference, p_amount_minor,
            p_currency, ARRAY[p_event_id], ARRAY[p_route])
    ON CONFLICT ON CONSTRAINT payments_pkey DO NOTHING
    RETURNING * INTO v_payment;
    IF v_payment.id IS NOT NULL THEN
        INSERT INTO topup.outbox (message_id, exchange, routing_key, message_type, headers, body)
        VALUES (
            p_message_id, p_exchange, coalesce(v_payment.wallet, v_payment.id), 'TopupRecorded',
            -- the correlation id travels in the headers document (core.outbox.CORRELATION_ID_KEY)
            jsonb_strip_nulls(jsonb_build_object('x-hiwallet-correlation-id', v_payment.id,
                                                 'x-request-id', p_request_id)),
            jsonb_build_object(
                'payment_id', v_payment.id,
                'provider', v_payment.provider,
                'provider_payment_id', v_payment.provider_payment_id,
                'wallet', v_payment.wallet,
                'reference', v_payment.reference,
                'amount_minor', v_payment.amount_minor,
                'currency', v_payment.currency,
                'recorded_at', to_char(v_payment.created_at AT TIME ZONE 'UTC',
                                       'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'route', p_route));
        RETURN 'recorded';
    END IF;

    -- Recorded before (by another notification, route, or a concurrent one that committed
    -- first: ON CONFLICT waited for it). Only the two lists grow.
    UPDATE topup.payments
       SET reported_by = CASE WHEN p_event_id = ANY (reported_by) THEN reported_by
                              ELSE reported_by || p_event_id END,
           routes = CASE WHEN p_route = ANY (routes) THEN routes ELSE routes || p_route END
     WHERE id = p_payment_id
    RETURNING * INTO v_payment;
    IF v_payment.provider IS DISTINCT FROM p_provider
       OR v_payment.provider_payment_id IS DISTINCT FROM p_provider_payment_id THEN
        -- a derived id names one (provider, payment) only; anything else is a defect
        RAISE EXCEPTION 'payment % is recorded for another provider payment', p_payment_id;
    END IF;
    IF v_payment.amount_minor <> p_amount_minor OR v_payment.currency <> p_currency THEN
        RETURN 'mismatch';
    END IF;
    RETURN 'reported';
END $$;

-- The retention job: processed inbox rows received more than p_older_than ago (never less than
-- a day, whatever the caller asks), at most p_batch of them, oldest first. Payments stay.
CREATE FUNCTION topup.purge_inbox(p_older_than interval, p_batch integer) RETURNS integer
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM topup.inbox
         WHERE id IN (SELECT id FROM topup.inbox
                       WHERE processed_at IS NOT NULL
                         AND received_at < now() - greatest(p_older_than, interval '1 day')
                       ORDER BY id
                       LIMIT least(greatest(p_batch, 0), 10000)
                         FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;

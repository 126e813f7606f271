-- wallet-consumer (issue 10): the messages it handled, the top-ups it could not attribute, and
-- a wallet's closing time.

-- What the consumer handled, written in the same transaction as the handler's effect (the
-- ledger posting), so a redelivered message is recognised and changes nothing. The DDL is
-- core.consumer.PROCESSED_EVENTS_SQL's, the same in every database whose service consumes.
-- In schema public, not wallet: core's Consumer names the table unqualified (its constructor
-- takes no table name), and public is on every role's default search path; it belongs to the
-- consumer machinery, not to wallet-api's records. `consumer` tells apart two consumers that
-- share one database (a message may be meant for both).
CREATE TABLE public.processed_events (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id)
);

-- A top-up that could not be credited to a wallet: no reference, a reference that is not a
-- wallet id, a wallet that does not exist, a closed one, or one in another currency. Stored,
-- not credited, not lost; an operator attributes it to a wallet (`hiwallet topups attribute`),
-- which credits it once under the same ledger key (the payment id) in the transaction that
-- fills attributed_*. One row per payment: the payment id is the key every route shares.
-- Not distributed by bucket: an unattributed payment has no wallet, hence no bucket
-- (src/hiwallet/ledger/citus_tables.json: local).
CREATE TABLE wallet.unattributed_topups (
    payment_id          text        NOT NULL,
    provider            text        NOT NULL,
    provider_payment_id text        NOT NULL,
    -- the notification's wallet reference as it came (a wire's free text, a malformed id)
    reference           text,
    amount_minor        bigint      NOT NULL,
    currency            char(3)     NOT NULL,
    reason              text        NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    attributed_wallet   text,
    attributed_by       text,
    attributed_at       timestamptz,
    CONSTRAINT unattributed_topups_pkey PRIMARY KEY (payment_id),
    CONSTRAINT unattributed_topups_amount_positive CHECK (amount_minor > 0),
    CONSTRAINT unattributed_topups_currency_format CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT unattributed_topups_reason_known CHECK (
        reason IN ('no-reference', 'malformed-reference', 'unknown-wallet', 'closed-wallet',
                   'currency-mismatch')),
    CONSTRAINT unattributed_topups_reference_length CHECK (reference IS NULL OR length(reference) <= 500),
    -- attributed all at once or not at all: who, to which wallet, when
    CONSTRAINT unattributed_topups_attribution_whole CHECK (
        (attributed_wallet IS NULL) = (attributed_by IS NULL)
        AND (attributed_wallet IS NULL) = (attributed_at IS NULL))
);
-- `hiwallet topups unattributed`: the open ones, oldest first
CREATE INDEX unattributed_topups_open ON wallet.unattributed_topups (created_at)
    WHERE attributed_wallet IS NULL;

-- An attribution is final: the application role may fill attributed_* once (its grant is on
-- those columns only), never clear or change them, so a second attribution cannot be made by
-- undoing the first. The ledger key guards a second credit only within one bucket (the
-- transaction id is the wallet's bucket and the payment id), so this row is the guard across
-- wallets.
CREATE FUNCTION wallet.unattributed_topups_attributed_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.attributed_wallet IS NOT NULL THEN
        RAISE EXCEPTION 'top-up % was attributed already', OLD.payment_id USING ERRCODE = 'HW013';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER unattributed_topups_attributed_once BEFORE UPDATE ON wallet.unattributed_topups
    FOR EACH ROW EXECUTE FUNCTION wallet.unattributed_topups_attributed_once();

-- A wallet is closed when closed_at is set. No close operation exists yet; the consumer reads
-- it to refuse crediting a closed wallet (the top-up goes to unattributed_topups).
ALTER TABLE wallet.wallets ADD COLUMN closed_at timestamptz;

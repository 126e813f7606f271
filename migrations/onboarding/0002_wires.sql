-- The first wire -> verified (onboarding/wires.py): the consumer of TopupCredited records each
-- message it handled (core.consumer.processed_events_sql) and, for a wire credited to one of
-- its customers, what the check of the sender found. Ids and results only: the sender's TCKN
-- is never stored here (it is compared through the keyed hash and forgotten).

-- What the wires consumer has processed, in the same transaction as its effect.
CREATE TABLE onboarding.processed_events (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, message_id)
);

-- Each wire checked against a customer's verified TCKN: one row per payment (the ledger's
-- key of the top-up), never changed. 'verified' raised the customer's tier; the others
-- changed nothing ('other-sender': a TCKN not the customer's; 'no-tckn': the bank gave none;
-- 'wire-unknown': the bank does not know the wire).
CREATE TABLE onboarding.wire_checks (
    payment_id  text        NOT NULL,
    customer_id text        NOT NULL,
    wire_id     text        NOT NULL,
    result      text        NOT NULL,
    checked_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT wire_checks_pkey PRIMARY KEY (payment_id),
    CONSTRAINT wire_checks_customer_fkey FOREIGN KEY (customer_id) REFERENCES onboarding.customers (id),
    CONSTRAINT wire_checks_result_check CHECK (result IN ('verified', 'other-sender', 'no-tckn', 'wire-unknown'))
);
-- Verified by a wire once: a second verifying wire of the same customer is refused here, whatever
-- the code above does.
CREATE UNIQUE INDEX wire_checks_verified_once ON onboarding.wire_checks (customer_id) WHERE result = 'verified';

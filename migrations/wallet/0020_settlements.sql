-- Settlement with the providers (docs/topups.md, "Settlement"), written by wallet-consumer in
-- the transaction that posts a payout (and its processed_events row).
--
-- wallet.settled_topups: each top-up a payout settled, once. The primary key is the last line
-- of defence against one payment settled by two payouts (clearing would be credited twice).
CREATE TABLE wallet.settled_topups (
    payment_id    text        NOT NULL,
    provider      text        NOT NULL,
    payout_id     text        NOT NULL,
    line_id       text        NOT NULL,
    gross_minor   bigint      NOT NULL,
    fee_minor     bigint      NOT NULL,
    settled_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT settled_topups_pkey PRIMARY KEY (payment_id),
    CONSTRAINT settled_topups_gross_positive CHECK (gross_minor > 0),
    CONSTRAINT settled_topups_fee_in_range CHECK (fee_minor >= 0 AND fee_minor < gross_minor)
);

-- What does not match is a finding of the books (wallet.reconciliation_findings, migration 0019):
-- one table, listed and resolved by staff in one place.

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

-- wallet.findings: what a check found that is not as it should be, kept for a person (the
-- settlement importer's lines that match no top-up or another amount; the reconciliation job
-- shares it). One row per (kind, subject): the same discrepancy found again is the same row.
-- Resolved once, by whom and why (the three columns together).
CREATE TABLE wallet.findings (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    kind        text        NOT NULL,
    subject     text        NOT NULL,
    details     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    found_by    text        NOT NULL,
    found_at    timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    resolved_by text,
    resolution  text,
    CONSTRAINT findings_pkey PRIMARY KEY (id),
    CONSTRAINT findings_kind_subject_unique UNIQUE (kind, subject),
    CONSTRAINT findings_kind_format CHECK (kind ~ '^[a-z][a-z0-9\-]{0,62}$'),
    CONSTRAINT findings_subject_length CHECK (length(subject) BETWEEN 1 AND 500),
    CONSTRAINT findings_resolved_together CHECK (
        (resolved_at IS NULL) = (resolved_by IS NULL) AND (resolved_at IS NULL) = (resolution IS NULL)
    )
);

CREATE INDEX findings_open ON wallet.findings (found_at) WHERE resolved_at IS NULL;

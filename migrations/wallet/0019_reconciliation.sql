-- Reconciliation and the daily operations summary (src/hiwallet/reconciliation, docs/operations.md,
-- "Reconciliation"): what the books' checks found, kept until someone resolves it, and the
-- summary of each day's movements per business and in total. Both are written by
-- wallet-consumer's jobs (and by wallet-api's staff, who resolve a finding or run a round on
-- demand); neither is ever deleted. Local tables on Citus (a few rows a day, read by staff).

-- A finding: one discrepancy, by its kind and what it is about (an account, a top-up, a
-- payout ...). The same discrepancy found again while it is open is the same finding (its
-- details and last_seen_at refreshed: reconciliation_findings_one_open); resolved, a later
-- finding of it is a new one.
CREATE TABLE wallet.reconciliation_findings (
    id              text        NOT NULL,
    kind            text        NOT NULL,
    subject         text        NOT NULL,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    found_at        timestamptz NOT NULL,
    last_seen_at    timestamptz NOT NULL,
    status          text        NOT NULL DEFAULT 'open',
    resolved_by     text,
    resolution_note text,
    resolved_at     timestamptz,
    CONSTRAINT reconciliation_findings_pkey PRIMARY KEY (id),
    CONSTRAINT reconciliation_findings_kind_format CHECK (kind ~ '^[a-z][a-z0-9_]{0,62}$'),
    CONSTRAINT reconciliation_findings_subject_length CHECK (length(subject) BETWEEN 1 AND 300),
    CONSTRAINT reconciliation_findings_details_size CHECK (pg_column_size(details) <= 8192),
    CONSTRAINT reconciliation_findings_status_known CHECK (status IN ('open', 'resolved')),
    -- resolved: by whom, why and when, all three; open: none of them
    CONSTRAINT reconciliation_findings_resolution_complete CHECK (
        (status = 'open') = (resolved_by IS NULL AND resolution_note IS NULL AND resolved_at IS NULL)
        AND (status = 'open' OR (resolved_by IS NOT NULL AND resolution_note IS NOT NULL
                                 AND resolved_at IS NOT NULL))),
    CONSTRAINT reconciliation_findings_note_length CHECK (
        resolution_note IS NULL OR length(resolution_note) BETWEEN 1 AND 2000),
    CONSTRAINT reconciliation_findings_seen_after_found CHECK (last_seen_at >= found_at)
);
-- The same discrepancy is one open finding, whoever finds it and however often.
CREATE UNIQUE INDEX reconciliation_findings_one_open
    ON wallet.reconciliation_findings (kind, subject) WHERE status = 'open';
-- The staff list: by status, newest first (keyset paging on found_at, id).
CREATE INDEX reconciliation_findings_by_status
    ON wallet.reconciliation_findings (status, found_at DESC, id DESC);

-- A resolved finding stays resolved: its resolution is never rewritten, and it never opens again.
CREATE FUNCTION wallet.reconciliation_findings_keep_resolution() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'resolved' THEN
        RAISE EXCEPTION 'reconciliation finding % is resolved already', OLD.id
            USING ERRCODE = 'HW030', CONSTRAINT = 'reconciliation_findings_resolved_once';
    END IF;
    IF NEW.kind <> OLD.kind OR NEW.subject <> OLD.subject OR NEW.found_at <> OLD.found_at THEN
        RAISE EXCEPTION 'a finding''s kind, subject and found_at are kept'
            USING ERRCODE = 'HW030', CONSTRAINT = 'reconciliation_findings_resolved_once';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER reconciliation_findings_keep_resolution
    BEFORE UPDATE ON wallet.reconciliation_findings
    FOR EACH ROW EXECUTE FUNCTION wallet.reconciliation_findings_keep_resolution();
CREATE TRIGGER reconciliation_findings_never_deleted BEFORE DELETE ON wallet.reconciliation_findings
    FOR EACH ROW EXECUTE FUNCTION wallet.reconciliation_findings_keep_resolution();

-- The daily operations summary: per UTC day, currency and business account ('' for the
-- total over every wallet), what moved through the wallets. Filled by the summary job from the
-- ledger's lines (an upsert per day: the same day computed again gives the same row).
CREATE TABLE wallet.daily_summary (
    day              date        NOT NULL,
    currency         char(3)     NOT NULL,
    account_id       text        NOT NULL,
    transactions     bigint      NOT NULL,
    volume_in_minor  bigint      NOT NULL,
    volume_out_minor bigint      NOT NULL,
    fees_minor       bigint      NOT NULL,
    computed_at      timestamptz NOT NULL,
    CONSTRAINT daily_summary_pkey PRIMARY KEY (day, currency, account_id),
    CONSTRAINT daily_summary_currency_format CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT daily_summary_account_length CHECK (length(account_id) <= 120),
    CONSTRAINT daily_summary_figures_not_negative CHECK (
        transactions >= 0 AND volume_in_minor >= 0 AND volume_out_minor >= 0)
);
-- A business reads its own days.
CREATE INDEX daily_summary_by_account ON wallet.daily_summary (account_id, day);

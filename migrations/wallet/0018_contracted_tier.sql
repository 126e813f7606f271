-- The Contracted tier (issue 24): the highest tier of a personal account, set after remote
-- identity verification or a signed agreement. An employee with customer.contract records
-- which, with the evidence's reference, through wallet-api (POST
-- /v1/staff/accounts/{id}/contract); wallet-api raises the tier in the same transaction.
--
-- One row per account: the record of who raised it to contracted, from which tier, on what
-- evidence and when (the audit of the raise). A tier only goes up, so an account is contracted
-- once: the primary key refuses a second record, the CHECKs a record that is not a raise
-- (previous tier below contracted) or not an employee's. Never changed, never deleted (a
-- trigger, and the application role has INSERT only: grants.sql).
CREATE TABLE wallet.account_contracts (
    bucket        smallint    NOT NULL,
    account_id    text        NOT NULL,
    evidence      text        NOT NULL,
    evidence_ref  text        NOT NULL,
    previous_tier text        NOT NULL,
    recorded_by   text        NOT NULL,
    recorded_at   timestamptz NOT NULL,
    CONSTRAINT account_contracts_pkey PRIMARY KEY (bucket, account_id),
    CONSTRAINT account_contracts_account_fkey FOREIGN KEY (bucket, account_id)
        REFERENCES wallet.accounts (bucket, id),
    CONSTRAINT account_contracts_evidence_known
        CHECK (evidence IN ('remote_identity_verification', 'signed_agreement')),
    CONSTRAINT account_contracts_evidence_ref_length CHECK (length(evidence_ref) BETWEEN 1 AND 200),
    CONSTRAINT account_contracts_is_a_raise CHECK (previous_tier IN ('unknown', 'unverified', 'verified')),
    CONSTRAINT account_contracts_by_staff CHECK (recorded_by LIKE 'staff:_%')
);

CREATE FUNCTION wallet.account_contracts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a contract record is never changed or deleted' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER account_contracts_guard BEFORE UPDATE OR DELETE ON wallet.account_contracts
    FOR EACH ROW EXECUTE FUNCTION wallet.account_contracts_guard();

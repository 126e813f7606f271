-- Issue 13, staff money (CONTRACT-13, helper staffmoney): the goodwill expense account, the
-- campaigns staff run with a budget, the promo programmes businesses propose and staff accept,
-- goodwill credits with their second approval, and what each employee spent today.
--
-- Every budget and ceiling here is a number in a row that the grant's own transaction changes
-- (UPDATE ... WHERE remaining >= amount), so concurrent grants queue on the row lock and none
-- can spend what another took; a CHECK holds the line again if a statement ever forgets.
-- These tables are written by wallet-api only, a few rows a minute: not distributed by bucket
-- (src/hiwallet/ledger/citus_tables.json: local).

-- 1. goodwill_expense: one central account per currency, created with the other central ones.
CREATE OR REPLACE FUNCTION ledger.ensure_system_accounts(p_bucket smallint, p_currency text, p_providers text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_prefix text := lpad(p_bucket::text, 4, '0') || ':sys:';
BEGIN
    INSERT INTO ledger.accounts (bucket, id, role, currency, created_at)
    SELECT p_bucket, v_prefix || r.name || ':' || p_currency, r.role::ledger.account_role, p_currency,
           clock_timestamp()
      FROM (
        SELECT 'clearing:' || p AS name, 'clearing' AS role FROM unnest(p_providers) AS p
        UNION ALL SELECT 'revenue', 'revenue'
        UNION ALL SELECT 'promo_expense', 'promo_expense'
        UNION ALL SELECT 'promo_breakage', 'promo_breakage'
        UNION ALL SELECT 'transit', 'transit'
        UNION ALL SELECT 'nostro', 'nostro' WHERE p_bucket = 0
        UNION ALL SELECT 'provider_expense', 'provider_expense' WHERE p_bucket = 0
        UNION ALL SELECT 'goodwill_expense', 'goodwill_expense' WHERE p_bucket = 0
      ) AS r
    ON CONFLICT (bucket, id) DO NOTHING;
END $$;

-- every currency that has central accounts gets its goodwill account now
SELECT ledger.ensure_system_accounts(0::smallint, c.currency, ARRAY['stripe', 'bank'])
  FROM (SELECT DISTINCT currency::text AS currency FROM ledger.accounts WHERE bucket = 0) AS c;

-- 2. Campaigns: platform-funded promo with a budget (campaigns.manage defines and grants under
--    one, campaigns.view reads them). remaining_minor is what grants may still take.
CREATE TABLE wallet.campaigns (
    id              text        NOT NULL,
    name            text        NOT NULL,
    currency        char(3)     NOT NULL,
    budget_minor    bigint      NOT NULL,
    remaining_minor bigint      NOT NULL,
    -- grants are accepted until then; each grant's promo expires at its own expires_at
    ends_at         timestamptz NOT NULL,
    created_by      text        NOT NULL,
    created_at      timestamptz NOT NULL,
    CONSTRAINT campaigns_pkey PRIMARY KEY (id),
    CONSTRAINT campaigns_budget_positive CHECK (budget_minor > 0),
    CONSTRAINT campaigns_never_overspent CHECK (remaining_minor BETWEEN 0 AND budget_minor),
    CONSTRAINT campaigns_name_length CHECK (length(name) BETWEEN 1 AND 140),
    CONSTRAINT campaigns_currency_format CHECK (currency ~ '^[A-Z]{3}$')
);

-- Each grant under a campaign (its ledger transaction names the employee as the actor).
CREATE TABLE wallet.campaign_grants (
    campaign_id    text        NOT NULL REFERENCES wallet.campaigns (id),
    transaction_id text        NOT NULL,
    wallet_id      text        NOT NULL,
    amount_minor   bigint      NOT NULL,
    granted_by     text        NOT NULL,
    granted_at     timestamptz NOT NULL,
    CONSTRAINT campaign_grants_pkey PRIMARY KEY (campaign_id, transaction_id),
    CONSTRAINT campaign_grants_amount_positive CHECK (amount_minor > 0)
);

-- 3. Promo programmes: a business proposes (amount per customer, budget, expiry) with its own
--    token; an employee with promo.merchant_accept accepts or refuses it, once. The business
--    grants promo (POST /v1/promos) only under an accepted programme, within its budget, at most
--    amount_per_customer to any one wallet, and before expires_at (which no grant outlives).
CREATE TABLE wallet.promo_programmes (
    id                  text        NOT NULL,
    bucket              smallint    NOT NULL,
    account_id          text        NOT NULL,
    wallet_id           text        NOT NULL,
    name                text        NOT NULL,
    currency            char(3)     NOT NULL,
    amount_per_customer bigint      NOT NULL,
    budget_minor        bigint      NOT NULL,
    remaining_minor     bigint      NOT NULL,
    expires_at          timestamptz NOT NULL,
    status              text        NOT NULL,
    proposed_by         text        NOT NULL,
    proposed_at         timestamptz NOT NULL,
    decided_by          text,
    decided_at          timestamptz,
    decision_reason     text,
    CONSTRAINT promo_programmes_pkey PRIMARY KEY (id),
    CONSTRAINT promo_programmes_amounts_positive CHECK (amount_per_customer > 0 AND budget_minor > 0),
    CONSTRAINT promo_programmes_never_overspent CHECK (remaining_minor BETWEEN 0 AND budget_minor),
    CONSTRAINT promo_programmes_status_known CHECK (status IN ('proposed', 'accepted', 'refused')),
    CONSTRAINT promo_programmes_decision_consistent CHECK (
        (status = 'proposed') = (decided_by IS NULL) AND (decided_by IS NULL) = (decided_at IS NULL)),
    -- nothing is granted under a programme that is not accepted
    CONSTRAINT promo_programmes_spent_only_accepted CHECK (status = 'accepted' OR remaining_minor = budget_minor),
    CONSTRAINT promo_programmes_name_length CHECK (length(name) BETWEEN 1 AND 140),
    CONSTRAINT promo_programmes_reason_length CHECK (length(decision_reason) BETWEEN 1 AND 500)
);
CREATE INDEX promo_programmes_account ON wallet.promo_programmes (bucket, account_id);
CREATE INDEX promo_programmes_proposed ON wallet.promo_programmes (proposed_at) WHERE status = 'proposed';

-- What one customer's wallet has received under a programme (at most amount_per_customer).
CREATE TABLE wallet.promo_programme_receivers (
    programme_id  text   NOT NULL REFERENCES wallet.promo_programmes (id),
    wallet_id     text   NOT NULL,
    granted_minor bigint NOT NULL,
    CONSTRAINT promo_programme_receivers_pkey PRIMARY KEY (programme_id, wallet_id),
    CONSTRAINT promo_programme_receivers_positive CHECK (granted_minor > 0)
);

-- A decision is taken once; a programme's terms never change after the proposal.
CREATE FUNCTION wallet.promo_programmes_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'proposed' AND NEW.status <> OLD.status THEN
        RAISE EXCEPTION 'programme % was decided already', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.bucket, NEW.account_id, NEW.wallet_id, NEW.name, NEW.currency,
        NEW.amount_per_customer, NEW.budget_minor, NEW.expires_at, NEW.proposed_by, NEW.proposed_at)
       IS DISTINCT FROM
       (OLD.id, OLD.bucket, OLD.account_id, OLD.wallet_id, OLD.name, OLD.currency,
        OLD.amount_per_customer, OLD.budget_minor, OLD.expires_at, OLD.proposed_by, OLD.proposed_at) THEN
        RAISE EXCEPTION 'a programme''s terms are never changed' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER promo_programmes_guard BEFORE UPDATE ON wallet.promo_programmes
    FOR EACH ROW EXECUTE FUNCTION wallet.promo_programmes_guard();

-- 4. Goodwill credits (credit.goodwill): requested by one employee; at or below the threshold
--    posted at once, above it pending until a second, different employee approves. A posted
--    credit is never changed: a correction is another movement.
CREATE TABLE wallet.goodwill_credits (
    id             text        NOT NULL,
    bucket         smallint    NOT NULL,
    wallet_id      text        NOT NULL,
    currency       char(3)     NOT NULL,
    amount_minor   bigint      NOT NULL,
    reason         text        NOT NULL,
    status         text        NOT NULL,
    requested_by   text        NOT NULL,
    requested_at   timestamptz NOT NULL,
    approved_by    text,
    approved_at    timestamptz,
    transaction_id text,
    CONSTRAINT goodwill_credits_pkey PRIMARY KEY (id),
    CONSTRAINT goodwill_credits_amount_positive CHECK (amount_minor > 0),
    CONSTRAINT goodwill_credits_reason_length CHECK (length(reason) BETWEEN 1 AND 500),
    CONSTRAINT goodwill_credits_status_known CHECK (status IN ('pending', 'posted')),
    CONSTRAINT goodwill_credits_posted_has_transaction CHECK ((status = 'posted') = (transaction_id IS NOT NULL)),
    CONSTRAINT goodwill_credits_approval_consistent CHECK ((approved_by IS NULL) = (approved_at IS NULL)),
    -- four eyes, held by the database too: the approver is never the requester
    CONSTRAINT goodwill_credits_four_eyes CHECK (approved_by IS NULL OR approved_by <> requested_by)
);
CREATE INDEX goodwill_credits_pending ON wallet.goodwill_credits (requested_at) WHERE status = 'pending';
CREATE INDEX goodwill_credits_wallet ON wallet.goodwill_credits (bucket, wallet_id);

CREATE FUNCTION wallet.goodwill_credits_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'posted' THEN
        RAISE EXCEPTION 'goodwill credit % is posted; a correction is another movement', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.id, NEW.bucket, NEW.wallet_id, NEW.currency, NEW.amount_minor, NEW.reason,
        NEW.requested_by, NEW.requested_at)
       IS DISTINCT FROM
       (OLD.id, OLD.bucket, OLD.wallet_id, OLD.currency, OLD.amount_minor, OLD.reason,
        OLD.requested_by, OLD.requested_at) THEN
        RAISE EXCEPTION 'a goodwill credit''s request is never changed' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER goodwill_credits_guard BEFORE UPDATE OR DELETE ON wallet.goodwill_credits
    FOR EACH ROW EXECUTE FUNCTION wallet.goodwill_credits_guard();

-- 5. What each employee moved today, per kind and currency, against the daily ceilings
--    (goodwill requested, platform promo granted without a campaign). The row is locked by the
--    upsert that adds to it, in the transaction of the movement.
CREATE TABLE wallet.staff_daily_usage (
    actor    text    NOT NULL,
    day      date    NOT NULL,
    kind     text    NOT NULL,
    currency char(3) NOT NULL,
    used     bigint  NOT NULL,
    CONSTRAINT staff_daily_usage_pkey PRIMARY KEY (actor, day, kind, currency),
    CONSTRAINT staff_daily_usage_kind_known CHECK (kind IN ('goodwill', 'promo')),
    CONSTRAINT staff_daily_usage_used_positive CHECK (used > 0)
);

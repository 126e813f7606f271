-- wallet-api's staff money (migrations/wallet/0013): campaigns, promo programmes, goodwill
-- credits, the employees' daily usage. These tables are local (citus_tables.json), so these
-- statements name no bucket; the wallets they refer to are read through queries.sql.

-- name: daily_usage_add
-- Add to what an employee moved today of a kind, unless it would pass the ceiling ($6): the
-- upsert locks the row, so two requests at once are decided one after the other. No row
-- returned: refused (nothing written).
INSERT INTO wallet.staff_daily_usage AS u (actor, day, kind, currency, used)
SELECT $1::text, $2::date, $3::text, $4::text, $5::bigint WHERE $5::bigint <= $6::bigint
ON CONFLICT (actor, day, kind, currency) DO UPDATE SET used = u.used + EXCLUDED.used
 WHERE u.used + EXCLUDED.used <= $6::bigint
RETURNING used

-- name: daily_usage_get
SELECT used FROM wallet.staff_daily_usage WHERE actor = $1 AND day = $2 AND kind = $3 AND currency = $4

-- name: campaign_insert
INSERT INTO wallet.campaigns (id, name, currency, budget_minor, remaining_minor, ends_at, created_by, created_at)
VALUES ($1, $2, $3, $4, $4, $5, $6, clock_timestamp())
RETURNING *

-- name: campaign_get
SELECT * FROM wallet.campaigns WHERE id = $1

-- name: campaigns_list
-- Newest first; the cursor is the last id of the page before (ids are uuid7: time-ordered).
SELECT * FROM wallet.campaigns WHERE ($1::text IS NULL OR id < $1) ORDER BY id DESC LIMIT $2

-- name: campaign_spend
-- Take a grant from the campaign's budget in the grant's transaction: the row lock queues
-- concurrent grants, and the WHERE refuses what the budget no longer holds (the CHECK
-- campaigns_never_overspent would refuse it again). No row: refused.
UPDATE wallet.campaigns SET remaining_minor = remaining_minor - $2
 WHERE id = $1 AND remaining_minor >= $2 AND ends_at > clock_timestamp()
RETURNING remaining_minor

-- name: campaign_grant_insert
INSERT INTO wallet.campaign_grants (campaign_id, transaction_id, wallet_id, amount_minor, granted_by, granted_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp())

-- name: programme_insert
INSERT INTO wallet.promo_programmes (id, bucket, account_id, wallet_id, name, currency,
    amount_per_customer, budget_minor, remaining_minor, expires_at, status, proposed_by, proposed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, 'proposed', $10, clock_timestamp())
RETURNING *

-- name: programme_get
SELECT * FROM wallet.promo_programmes WHERE id = $1

-- name: programme_get_for_update
SELECT * FROM wallet.promo_programmes WHERE id = $1 FOR UPDATE

-- name: programmes_of_account
SELECT * FROM wallet.promo_programmes WHERE bucket = $1 AND account_id = $2 ORDER BY id DESC LIMIT 200

-- name: programmes_list
-- For staff: by status (all when NULL), newest first, with a cursor (the last id seen).
SELECT * FROM wallet.promo_programmes
 WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR id < $2)
 ORDER BY id DESC LIMIT $3

-- name: programme_decide
UPDATE wallet.promo_programmes
   SET status = $2, decided_by = $3, decided_at = clock_timestamp(), decision_reason = $4
 WHERE id = $1 AND status = 'proposed'
RETURNING *

-- name: programme_spend
-- As campaign_spend: the budget row locked and decremented in the grant's transaction.
UPDATE wallet.promo_programmes SET remaining_minor = remaining_minor - $2
 WHERE id = $1 AND status = 'accepted' AND remaining_minor >= $2
RETURNING remaining_minor

-- name: programme_receiver_add
-- What this customer received under the programme, at most the amount per customer ($4).
INSERT INTO wallet.promo_programme_receivers AS r (programme_id, wallet_id, granted_minor)
SELECT $1::text, $2::text, $3::bigint WHERE $3::bigint <= $4::bigint
ON CONFLICT (programme_id, wallet_id) DO UPDATE SET granted_minor = r.granted_minor + EXCLUDED.granted_minor
 WHERE r.granted_minor + EXCLUDED.granted_minor <= $4::bigint
RETURNING granted_minor

-- name: goodwill_insert
INSERT INTO wallet.goodwill_credits (id, bucket, wallet_id, currency, amount_minor, reason, status,
    requested_by, requested_at)
VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, clock_timestamp())
RETURNING *

-- name: goodwill_get
SELECT * FROM wallet.goodwill_credits WHERE id = $1

-- name: goodwill_get_for_update
SELECT * FROM wallet.goodwill_credits WHERE id = $1 FOR UPDATE

-- name: goodwill_posted
-- The credit posted: by its requester alone (at or below the threshold, $3 NULL) or with the
-- approval of another employee (the CHECK goodwill_credits_four_eyes holds that too).
UPDATE wallet.goodwill_credits
   SET status = 'posted', transaction_id = $2, approved_by = $3,
       approved_at = CASE WHEN $3::text IS NULL THEN NULL ELSE clock_timestamp() END
 WHERE id = $1 AND status = 'pending'
RETURNING *

-- name: goodwill_list
SELECT * FROM wallet.goodwill_credits
 WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR id < $2)
 ORDER BY id DESC LIMIT $3

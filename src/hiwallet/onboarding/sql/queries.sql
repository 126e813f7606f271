-- onboarding's statements, by name (core/queries.py). Personal data arrives here sealed
-- (*_enc) or hashed (*_hash): no statement sees a plaintext e-mail, phone or TCKN.

-- name: hit_rate
-- One more hit in the current window of (scope, key); the hits so far and the window's start.
INSERT INTO onboarding.rate_hits AS r (scope, key_hash, window_start, hits)
VALUES ($1, $2, to_timestamp(floor(extract(epoch FROM now()) / $3) * $3), 1)
ON CONFLICT (scope, key_hash, window_start) DO UPDATE SET hits = r.hits + 1
RETURNING hits, window_start;

-- name: purge_rate_hits
DELETE FROM onboarding.rate_hits WHERE window_start < now() - make_interval(secs => $1);

-- name: insert_registration
INSERT INTO onboarding.registrations
    (id, email_hash, email_enc, known, code_hash, code_expires_at, attempts_left, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6), $7, now() + make_interval(secs => $8))
RETURNING code_expires_at;

-- name: registration
SELECT * FROM onboarding.registrations WHERE id = $1 AND expires_at > now();

-- name: registration_for_update
SELECT *, code_expires_at <= now() AS code_expired
  FROM onboarding.registrations WHERE id = $1 AND expires_at > now() FOR UPDATE;

-- name: new_code
UPDATE onboarding.registrations
   SET code_hash = $2, code_expires_at = now() + make_interval(secs => $3), attempts_left = $4,
       updated_at = now()
 WHERE id = $1
RETURNING code_expires_at;

-- name: code_failed
UPDATE onboarding.registrations
   SET attempts_left = greatest(attempts_left - 1, 0), updated_at = now()
 WHERE id = $1
RETURNING attempts_left;

-- name: email_verified
UPDATE onboarding.registrations
   SET status = 'email_verified', code_hash = NULL, attempts_left = 0, updated_at = now()
 WHERE id = $1 AND status = 'code_sent';

-- name: registration_status
-- Only forward: a slower concurrent complete never moves a registration back.
UPDATE onboarding.registrations
   SET customer_id = $1, updated_at = now(),
       status = CASE WHEN array_position(ARRAY['code_sent', 'email_verified', 'user_created', 'completed'], status)
                        < array_position(ARRAY['code_sent', 'email_verified', 'user_created', 'completed'], $2::text)
                     THEN $2 ELSE status END
 WHERE id = $1;

-- name: delete_registration
DELETE FROM onboarding.registrations WHERE id = $1;

-- name: purge_registrations
DELETE FROM onboarding.registrations
 WHERE id IN (SELECT id FROM onboarding.registrations WHERE expires_at < now() LIMIT $1);

-- name: email_taken
-- A customer with a user: a claim still without one (a registration under way, or abandoned)
-- does not make the address registered.
SELECT EXISTS (SELECT 1 FROM onboarding.customers WHERE email_hash = $1 AND sub IS NOT NULL);

-- name: release_abandoned_claim
-- A claim without a user whose registration is gone or expired: released for another.
DELETE FROM onboarding.customers c
 WHERE c.id = $1 AND c.sub IS NULL
   AND NOT EXISTS (SELECT 1 FROM onboarding.registrations r WHERE r.id = c.id AND r.expires_at > now());

-- name: claim_email
-- The claim on an address: one customer per address, whichever registration comes first.
INSERT INTO onboarding.customers (id, email_hash) VALUES ($1, $2)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: customer_of_email
SELECT * FROM onboarding.customers WHERE email_hash = $1;

-- name: customer
SELECT * FROM onboarding.customers WHERE id = $1;

-- name: customer_for_update
SELECT * FROM onboarding.customers WHERE id = $1 FOR UPDATE;

-- name: customer_by_sub
SELECT * FROM onboarding.customers WHERE sub = $1;

-- name: customer_by_wallet
SELECT * FROM onboarding.customers WHERE wallet_id = $1;

-- name: customer_by_tckn
SELECT id FROM onboarding.customers WHERE tckn_hash = $1;

-- name: set_sub
UPDATE onboarding.customers SET sub = $2, updated_at = now() WHERE id = $1 AND sub IS NULL;

-- name: set_account
UPDATE onboarding.customers SET account_id = $2, wallet_id = $3, updated_at = now()
 WHERE id = $1 AND account_id IS NULL;

-- name: want_tier
-- Only upward: a wanted tier at or below the one wanted already changes nothing.
UPDATE onboarding.customers SET tier_wanted = $2, updated_at = now()
 WHERE id = $1 AND array_position($3::text[], tier_wanted) < array_position($3::text[], $2::text)
RETURNING tier_wanted;

-- name: tier_set
UPDATE onboarding.customers SET tier = $2, tier_changed_at = now(), updated_at = now()
 WHERE id = $1 AND tier <> $2
   AND array_position($3::text[], tier) < array_position($3::text[], $2::text);

-- name: tier_pending
SELECT * FROM onboarding.customers
 WHERE tier_wanted <> tier AND account_id IS NOT NULL
 ORDER BY id LIMIT $1;

-- name: account_pending
SELECT * FROM onboarding.customers
 WHERE sub IS NOT NULL AND account_id IS NULL
 ORDER BY id LIMIT $1;

-- name: upsert_phone_code
INSERT INTO onboarding.phone_codes AS p (customer_id, phone_hash, phone_enc, code_hash, expires_at, attempts_left)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), $6)
ON CONFLICT (customer_id) DO UPDATE
   SET phone_hash = EXCLUDED.phone_hash, phone_enc = EXCLUDED.phone_enc, code_hash = EXCLUDED.code_hash,
       expires_at = EXCLUDED.expires_at, attempts_left = EXCLUDED.attempts_left, created_at = now()
RETURNING expires_at;

-- name: phone_code_for_update
SELECT *, expires_at <= now() AS code_expired FROM onboarding.phone_codes WHERE customer_id = $1 FOR UPDATE;

-- name: phone_code_failed
UPDATE onboarding.phone_codes SET attempts_left = greatest(attempts_left - 1, 0)
 WHERE customer_id = $1
RETURNING attempts_left;

-- name: delete_phone_code
DELETE FROM onboarding.phone_codes WHERE customer_id = $1;

-- name: set_phone
UPDATE onboarding.customers
   SET phone_hash = $2, phone_enc = $3, phone_verified_at = now(), updated_at = now()
 WHERE id = $1;

-- name: set_identity
UPDATE onboarding.customers
   SET tckn_hash = $2, tckn_enc = $3, given_name_enc = $4, family_name_enc = $5, birth_date_enc = $6,
       identity_verified_at = now(), updated_at = now()
 WHERE id = $1 AND tckn_hash IS NULL;

-- name: accept_consent
INSERT INTO onboarding.consents (customer_id, document, version) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING;

-- name: consents
SELECT document, version, accepted_at FROM onboarding.consents WHERE customer_id = $1
 ORDER BY accepted_at, document;

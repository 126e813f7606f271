-- `hiwallet onboarding rekey` (rekey.py): each table's sealed columns read in batches by key,
-- and each column re-sealed only if it still holds the value read (the service may have
-- changed it meanwhile, under the active key already).

-- name: count_registrations
SELECT count(*) FROM onboarding.registrations;

-- name: sealed_registrations
SELECT id AS row_id, email_enc FROM onboarding.registrations
 WHERE id > $1 ORDER BY id LIMIT $2;

-- name: reseal_registrations_email_enc
UPDATE onboarding.registrations SET email_enc = $1 WHERE id = $2 AND email_enc = $3;

-- name: count_customers
SELECT count(*) FROM onboarding.customers;

-- name: sealed_customers
SELECT id AS row_id, phone_enc, tckn_enc, given_name_enc, family_name_enc, birth_date_enc FROM onboarding.customers
 WHERE id > $1 ORDER BY id LIMIT $2;

-- name: reseal_customers_phone_enc
UPDATE onboarding.customers SET phone_enc = $1 WHERE id = $2 AND phone_enc = $3;

-- name: reseal_customers_tckn_enc
UPDATE onboarding.customers SET tckn_enc = $1 WHERE id = $2 AND tckn_enc = $3;

-- name: reseal_customers_given_name_enc
UPDATE onboarding.customers SET given_name_enc = $1 WHERE id = $2 AND given_name_enc = $3;

-- name: reseal_customers_family_name_enc
UPDATE onboarding.customers SET family_name_enc = $1 WHERE id = $2 AND family_name_enc = $3;

-- name: reseal_customers_birth_date_enc
UPDATE onboarding.customers SET birth_date_enc = $1 WHERE id = $2 AND birth_date_enc = $3;

-- name: count_phone_codes
SELECT count(*) FROM onboarding.phone_codes;

-- name: sealed_phone_codes
SELECT customer_id AS row_id, phone_enc FROM onboarding.phone_codes
 WHERE customer_id > $1 ORDER BY customer_id LIMIT $2;

-- name: reseal_phone_codes_phone_enc
UPDATE onboarding.phone_codes SET phone_enc = $1 WHERE customer_id = $2 AND phone_enc = $3;

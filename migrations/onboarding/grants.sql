-- Who may do what in the onboarding database (issue 12; as migrations/withdrawal/grants.sql).
--
-- Not a numbered migration: `hiwallet migrate` applies this file after every run, in one
-- transaction; it starts from nothing and grants exactly what is needed. Roles (made by
-- migrate): :"app_role" for onboarding, :"readonly_role" for reports.
-- tests/onboarding/test_roles.py holds the full list of what each role may do.
--
-- The read-only role sees no personal data even as ciphertext: only the columns a report
-- counts (ids, states, tiers, times). What a compromised onboarding must not do: rewrite
-- which address a customer claimed, or erase what a customer accepted.

-- 1. Nothing for anyone but the owner.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA onboarding FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL TABLES IN SCHEMA onboarding, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA onboarding, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA onboarding FROM PUBLIC, :"app_role", :"readonly_role";

-- 2. Reading: the service every table; reports the columns without personal data.
GRANT USAGE ON SCHEMA onboarding TO :"app_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA onboarding TO :"app_role";
GRANT SELECT (id, known, status, attempts_left, customer_id, created_at, updated_at, expires_at)
    ON onboarding.registrations TO :"readonly_role";
GRANT SELECT (id, sub, account_id, wallet_id, tier, tier_wanted, tier_changed_at, phone_verified_at,
              identity_verified_at, created_at, updated_at)
    ON onboarding.customers TO :"readonly_role";
GRANT SELECT ON onboarding.consents TO :"readonly_role";
GRANT SELECT ON public.schema_migrations TO :"readonly_role";

-- 3. Registrations: made, moved along, purged once expired. The address they are for
--    (email_hash) is never changed; its ciphertext only by a re-encryption (rekey).
GRANT INSERT, DELETE ON onboarding.registrations TO :"app_role";
GRANT UPDATE (email_enc, known, status, code_hash, code_expires_at, attempts_left, customer_id, updated_at)
    ON onboarding.registrations TO :"app_role";

-- 4. Customers: made by the claim on an address; the address claimed (email_hash) never
--    changes. Deleted only as an abandoned claim (no user, its registration gone): the trigger
--    of 0003 refuses deleting a customer with a user.
GRANT INSERT, DELETE ON onboarding.customers TO :"app_role";
GRANT UPDATE (sub, account_id, wallet_id, tier, tier_wanted, tier_changed_at, phone_hash, phone_enc,
              phone_verified_at, tckn_hash, tckn_enc, given_name_enc, family_name_enc, birth_date_enc,
              identity_verified_at, updated_at)
    ON onboarding.customers TO :"app_role";

-- 5. Phone codes: one pending per customer, replaced, deleted once used.
GRANT INSERT, DELETE ON onboarding.phone_codes TO :"app_role";
GRANT UPDATE (phone_hash, phone_enc, code_hash, expires_at, attempts_left, created_at)
    ON onboarding.phone_codes TO :"app_role";

-- 6. Consents: added, never changed or erased.
GRANT INSERT ON onboarding.consents TO :"app_role";

-- 7. Rate windows: counted, purged once past.
GRANT INSERT, DELETE ON onboarding.rate_hits TO :"app_role";
GRANT UPDATE (hits) ON onboarding.rate_hits TO :"app_role";

-- 8. The wires consumer (onboarding/wires.py): what it processed (its outcome stored once),
--    and each wire it checked, never changed or erased. Reports may count the checks (ids
--    and results only).
GRANT INSERT, UPDATE (outcome) ON onboarding.processed_events TO :"app_role";
GRANT INSERT ON onboarding.wire_checks TO :"app_role";
GRANT SELECT ON onboarding.wire_checks TO :"readonly_role";

-- Who may do what in an identity database (each realm's: the roles are per database, so the
-- customer realm's service cannot write the staff realm's users). See
-- migrations/wallet/grants.sql for why this file is applied after every migrate and starts
-- from nothing; tests/core/test_roles.py holds the full list of what each role may do.
-- Roles (made by migrate): :"app_role" for the identity service, :"readonly_role" for reports.

-- 1. Nothing for anyone but the owner.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC, :"app_role", :"readonly_role";

-- 2. Reading: every table (the read-only role also sees which migrations ran).
GRANT USAGE ON SCHEMA public TO :"app_role", :"readonly_role";
GRANT SELECT ON users, signing_keys, login_flows, sessions, authorization_codes,
                refresh_tokens, action_tokens, outgoing_mail TO :"app_role";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"readonly_role";

-- 3. What the service writes (src/hiwallet/identity/sql/queries.sql), column by column for
--    updates: never a user's id or username, a key's private part, or a token's owner. Rows
--    are deleted only where housekeeping purges them (login flows, action tokens, sessions;
--    a session's codes and refresh tokens go with it by its foreign keys, which act as the
--    table's owner). Users and signing keys are never deleted by the service.
GRANT INSERT, UPDATE (email, first_name, last_name, enabled, email_verified, required_actions,
                      password_hash, totp_secret, totp_last_step, failed_logins, last_failure_at,
                      locked_until)
    ON users TO :"app_role";
GRANT INSERT, UPDATE (status, activated_at, retired_at, publish_until) ON signing_keys TO :"app_role";
GRANT INSERT, DELETE, UPDATE (stage, user_id, pending_totp) ON login_flows TO :"app_role";
GRANT INSERT, DELETE, UPDATE (ended_at) ON sessions TO :"app_role";
GRANT INSERT, UPDATE (used_at) ON authorization_codes TO :"app_role";
GRANT INSERT, UPDATE (used_at, revoked_at) ON refresh_tokens TO :"app_role";
GRANT INSERT, DELETE, UPDATE (actions, used_at) ON action_tokens TO :"app_role";
GRANT INSERT, UPDATE (sent_at) ON outgoing_mail TO :"app_role";

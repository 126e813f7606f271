-- Who may do what in the staff-admin database (issue 13; as migrations/withdrawal/grants.sql).
--
-- Not a numbered migration: `hiwallet migrate` applies this file after every run, in one
-- transaction; it starts from nothing and grants exactly what is needed. Roles (made by
-- migrate): :"app_role" for staff-admin, :"readonly_role" for reports.
-- tests/staff_admin/test_roles.py holds the full list of what each role may do.
--
-- The audit log is append-only for the service: INSERT and SELECT, no UPDATE, DELETE or
-- TRUNCATE (and the trigger of 0001 refuses them to anyone but a superuser disabling it).

-- 1. Nothing for anyone but the owner.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA staff FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL TABLES IN SCHEMA staff, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA staff, public FROM PUBLIC, :"app_role", :"readonly_role";
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA staff FROM PUBLIC, :"app_role", :"readonly_role";

-- 2. Reading: every table of the schema.
GRANT USAGE ON SCHEMA staff TO :"app_role", :"readonly_role";
GRANT SELECT ON ALL TABLES IN SCHEMA staff TO :"app_role", :"readonly_role";
GRANT SELECT ON public.schema_migrations TO :"readonly_role";

-- 3. Roles: created, changed (name, permissions), deleted while nobody holds them.
GRANT INSERT, DELETE, UPDATE (name, permissions, updated_at) ON staff.roles TO :"app_role";

-- 4. Employees: made when an invitation completes; only their state and names change after.
GRANT INSERT, UPDATE (active, changed_at, email, name) ON staff.employees TO :"app_role";
GRANT INSERT, DELETE ON staff.employee_roles TO :"app_role";

-- 5. Invitations: written, then completed or revoked (never rewritten otherwise).
GRANT INSERT, UPDATE (state, completed_at, revoked_at, revoked_by) ON staff.invitations TO :"app_role";
GRANT INSERT, UPDATE (invitation_id, sent_at) ON staff.bootstrap TO :"app_role";

-- 6. The audit log: append and read, nothing else.
GRANT INSERT ON staff.audit_log TO :"app_role";

-- staff-admin (issue 13): roles, employees, their roles, invitations, and the audit log.
--
-- The permissions themselves are fixed in code (hiwallet.core.staff.StaffPermission); a role
-- names a set of them. Keycloak (the identity service's staff realm) holds only the user,
-- password, OTP and session; who may do what is here. Every change is written to audit_log
-- in the same transaction as the change (the service does it; the grants keep the log
-- append-only: the application role may INSERT and SELECT it, nothing else, and the trigger
-- below refuses UPDATE and DELETE even to a role given more by mistake).

CREATE SCHEMA staff;

CREATE TABLE staff.roles (
    id          text        PRIMARY KEY,
    name        text        NOT NULL,
    permissions text[]      NOT NULL DEFAULT '{}',
    -- The built-in role the service makes at start ("administrator"); a role like any other
    -- otherwise: its permissions may change, the last staff.manage holder stays protected.
    builtin     boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT roles_name_length CHECK (length(name) BETWEEN 1 AND 100),
    CONSTRAINT roles_permissions_length CHECK (cardinality(permissions) <= 64)
);
CREATE UNIQUE INDEX roles_name_key ON staff.roles (lower(name));

-- An employee: a staff-realm subject that completed an invitation. A user of the staff realm
-- without a row here (created in the console, or an invitation not completed) has no
-- permission at all.
CREATE TABLE staff.employees (
    subject        text        PRIMARY KEY,
    email          text,
    name           text,
    active         boolean     NOT NULL DEFAULT true,
    invitation_id  text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    changed_at     timestamptz NOT NULL DEFAULT now(),
    -- A stable order for the list's cursor.
    seq            bigint      GENERATED ALWAYS AS IDENTITY UNIQUE
);

CREATE TABLE staff.employee_roles (
    subject    text        NOT NULL REFERENCES staff.employees (subject),
    role_id    text        NOT NULL REFERENCES staff.roles (id),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject, role_id)
);
CREATE INDEX employee_roles_role ON staff.employee_roles (role_id);

CREATE TABLE staff.invitations (
    id           text        PRIMARY KEY,
    email        text        NOT NULL,
    name         text,
    -- The staff-realm user made for it (its sub); set before the invitation is written.
    subject      text        NOT NULL,
    role_ids     text[]      NOT NULL,
    invited_by   text        NOT NULL,
    state        text        NOT NULL DEFAULT 'pending',
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    completed_at timestamptz,
    revoked_at   timestamptz,
    revoked_by   text,
    bootstrap    boolean     NOT NULL DEFAULT false,
    seq          bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
    CONSTRAINT invitations_state CHECK (state IN ('pending', 'completed', 'revoked')),
    CONSTRAINT invitations_completed CHECK ((state = 'completed') = (completed_at IS NOT NULL)),
    CONSTRAINT invitations_revoked CHECK ((state = 'revoked') = (revoked_at IS NOT NULL))
);
-- One open invitation per address, and per subject: single use means one way in at a time.
CREATE UNIQUE INDEX invitations_pending_email ON staff.invitations (lower(email)) WHERE state = 'pending';
CREATE UNIQUE INDEX invitations_pending_subject ON staff.invitations (subject) WHERE state = 'pending';

-- Whether the service sent the first administrator invitation (once, at the first start with
-- nobody holding staff.manage); `hiwallet staff bootstrap-invite` sends another by hand.
CREATE TABLE staff.bootstrap (
    id            boolean     PRIMARY KEY DEFAULT true CHECK (id),
    invitation_id text        NOT NULL,
    sent_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE staff.audit_log (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    -- staff:<sub> for an employee, operator:<login> for a shell, system:staff-admin at start.
    actor   text        NOT NULL,
    action  text        NOT NULL,
    -- What was changed: role:<id>, employee:<sub>, invitation:<id>.
    target  text        NOT NULL,
    detail  jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_actor ON staff.audit_log (actor, id);
CREATE INDEX audit_log_target ON staff.audit_log (target, id);
CREATE INDEX audit_log_action ON staff.audit_log (action, id);

CREATE FUNCTION staff.audit_log_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'staff.audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON staff.audit_log
    FOR EACH ROW EXECUTE FUNCTION staff.audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON staff.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION staff.audit_log_append_only();

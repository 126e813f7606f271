-- staff-admin's named queries (core/queries.load_queries). Every change runs in one
-- transaction with its audit row (audit_insert) under the staff lock (lock_staff).

-- name: me
-- GET /v1/me, on every staff request of every service: one round trip, by primary key.
SELECT e.subject, e.email, e.name, e.active,
       ARRAY(SELECT r.id FROM staff.employee_roles er JOIN staff.roles r ON r.id = er.role_id
              WHERE er.subject = e.subject ORDER BY r.name, r.id) AS role_ids,
       ARRAY(SELECT r.name FROM staff.employee_roles er JOIN staff.roles r ON r.id = er.role_id
              WHERE er.subject = e.subject ORDER BY r.name, r.id) AS role_names,
       ARRAY(SELECT DISTINCT p FROM staff.employee_roles er JOIN staff.roles r ON r.id = er.role_id,
                    unnest(r.permissions) AS p
              WHERE er.subject = e.subject ORDER BY p) AS permissions
  FROM staff.employees e
 WHERE e.subject = $1

-- name: lock_staff
-- Every change of roles, employees or invitations takes this one transaction lock first: the
-- "last staff.manage holder" check then sees every other change committed or not begun (two
-- administrators taking staff.manage from each other at once cannot both succeed).
SELECT pg_advisory_xact_lock($1)

-- name: staff_managers
-- Active employees holding staff.manage through any role.
SELECT count(DISTINCT e.subject)
  FROM staff.employees e
  JOIN staff.employee_roles er ON er.subject = e.subject
  JOIN staff.roles r ON r.id = er.role_id
 WHERE e.active AND 'staff.manage' = ANY (r.permissions)

-- name: audit_insert
INSERT INTO staff.audit_log (actor, action, target, detail) VALUES ($1, $2, $3, $4::text::jsonb)
RETURNING id

-- name: audit_page
-- Newest first; every filter optional; $6 the cursor (the last id seen), $7 the page size.
SELECT id, at, actor, action, target, detail::text AS detail
  FROM staff.audit_log
 WHERE ($1::text IS NULL OR actor = $1)
   AND ($2::text IS NULL OR action = $2)
   AND ($3::text IS NULL OR target = $3)
   AND ($4::timestamptz IS NULL OR at >= $4)
   AND ($5::timestamptz IS NULL OR at < $5)
   AND ($6::bigint IS NULL OR id < $6)
 ORDER BY id DESC
 LIMIT $7

-- name: roles
SELECT r.id, r.name, r.permissions, r.builtin, r.created_at, r.updated_at,
       (SELECT count(*) FROM staff.employee_roles er WHERE er.role_id = r.id) AS holders
  FROM staff.roles r
 ORDER BY lower(r.name), r.id

-- name: role
SELECT r.id, r.name, r.permissions, r.builtin, r.created_at, r.updated_at,
       (SELECT count(*) FROM staff.employee_roles er WHERE er.role_id = r.id) AS holders
  FROM staff.roles r
 WHERE r.id = $1

-- name: role_by_name
SELECT id FROM staff.roles WHERE lower(name) = lower($1)

-- name: roles_exist
SELECT count(*) FROM staff.roles WHERE id = ANY ($1::text[])

-- name: insert_role
INSERT INTO staff.roles (id, name, permissions, builtin) VALUES ($1, $2, $3, $4)

-- name: update_role
UPDATE staff.roles SET name = $2, permissions = $3, updated_at = now() WHERE id = $1

-- name: delete_role
DELETE FROM staff.roles WHERE id = $1

-- name: holds_role
SELECT EXISTS (SELECT 1 FROM staff.employee_roles WHERE subject = $1 AND role_id = $2)

-- name: employees_page
-- Oldest first; $1 the cursor (the last seq seen), $2 the page size, $3 active only.
SELECT e.seq, e.subject, e.email, e.name, e.active, e.created_at, e.changed_at,
       ARRAY(SELECT er.role_id FROM staff.employee_roles er WHERE er.subject = e.subject ORDER BY 1) AS role_ids
  FROM staff.employees e
 WHERE ($1::bigint IS NULL OR e.seq > $1)
   AND ($3::boolean IS NULL OR e.active = $3)
 ORDER BY e.seq
 LIMIT $2

-- name: employee
SELECT e.seq, e.subject, e.email, e.name, e.active, e.created_at, e.changed_at,
       ARRAY(SELECT er.role_id FROM staff.employee_roles er WHERE er.subject = e.subject ORDER BY 1) AS role_ids
  FROM staff.employees e
 WHERE e.subject = $1

-- name: employee_by_email
SELECT subject FROM staff.employees WHERE lower(email) = lower($1)

-- name: insert_employee
INSERT INTO staff.employees (subject, email, name, invitation_id) VALUES ($1, $2, $3, $4)

-- name: grant_roles
-- Only roles that exist: an invitation's role deleted since it was sent grants nothing.
INSERT INTO staff.employee_roles (subject, role_id)
SELECT $1, r.id FROM staff.roles r WHERE r.id = ANY ($2::text[])
ON CONFLICT DO NOTHING

-- name: revoke_other_roles
DELETE FROM staff.employee_roles WHERE subject = $1 AND NOT (role_id = ANY ($2::text[]))

-- name: set_active
UPDATE staff.employees SET active = $2, changed_at = now() WHERE subject = $1

-- name: insert_invitation
INSERT INTO staff.invitations (id, email, name, subject, role_ids, invited_by, expires_at, bootstrap)
VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7), $8)
RETURNING *

-- name: invitation
SELECT *, state = 'pending' AND expires_at <= now() AS expired FROM staff.invitations WHERE id = $1

-- name: invitations_page
-- Newest first; $1 the cursor (the last seq seen), $2 the page size, $3 a state or null.
SELECT *, state = 'pending' AND expires_at <= now() AS expired
  FROM staff.invitations
 WHERE ($1::bigint IS NULL OR seq < $1)
   AND ($3::text IS NULL OR state = $3)
 ORDER BY seq DESC
 LIMIT $2

-- name: pending_invitation_of_email
SELECT *, expires_at <= now() AS expired FROM staff.invitations
 WHERE lower(email) = lower($1) AND state = 'pending'
 FOR UPDATE

-- name: pending_invitation_of_subject
-- The invitation a first login completes: locked, so two first requests at once complete it
-- once (the second finds the employee).
SELECT *, expires_at <= now() AS expired FROM staff.invitations
 WHERE subject = $1 AND state = 'pending'
 FOR UPDATE

-- name: complete_invitation
UPDATE staff.invitations SET state = 'completed', completed_at = now() WHERE id = $1 AND state = 'pending'

-- name: revoke_invitation
UPDATE staff.invitations SET state = 'revoked', revoked_at = now(), revoked_by = $2
 WHERE id = $1 AND state = 'pending'

-- name: bootstrap
SELECT invitation_id, sent_at FROM staff.bootstrap

-- name: bootstrap_sent
INSERT INTO staff.bootstrap (invitation_id) VALUES ($1)
ON CONFLICT (id) DO UPDATE SET invitation_id = excluded.invitation_id, sent_at = now()

-- name: role_of_builtin
SELECT id FROM staff.roles WHERE builtin AND lower(name) = lower($1)

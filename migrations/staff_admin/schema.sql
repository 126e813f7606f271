-- The live schema of this folder's databases, generated from a freshly migrated one by
-- `hiwallet schema dump` (`make schema`): do not edit, regenerate after adding a migration.
-- tests/core/test_schema.py checks that the migrations produce exactly this.

-- Name: staff; Type: SCHEMA; Schema: -; Owner: -

CREATE SCHEMA staff;

-- Name: audit_log_append_only(); Type: FUNCTION; Schema: staff; Owner: -

CREATE FUNCTION staff.audit_log_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'staff.audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: audit_log; Type: TABLE; Schema: staff; Owner: -

CREATE TABLE staff.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL
);

-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: staff; Owner: -

ALTER TABLE staff.audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME staff.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: bootstrap; Type: TABLE; Schema: staff; Owner: -

CREATE TABLE staff.bootstrap (
    id boolean DEFAULT true NOT NULL,
    invitation_id text NOT NULL,
    sent_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT bootstrap_id_check CHECK (id)
);

-- Name: employee_roles; Type: TABLE; Schema: staff; Owner: -

CREATE TABLE staff.employee_roles (
    subject text NOT NULL,
    role_id text NOT NULL,
    granted_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: employees; Type: TABLE; Schema: staff; Owner: -

CREATE TABLE staff.employees (
    subject text NOT NULL,
    email text,
    name text,
    active boolean DEFAULT true NOT NULL,
    invitation_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    seq bigint NOT NULL
);

-- Name: employees_seq_seq; Type: SEQUENCE; Schema: staff; Owner: -

ALTER TABLE staff.employees ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME staff.employees_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: invitations; Type: TABLE; Schema: staff; Owner: -

CREATE TABLE staff.invitations (
    id text NOT NULL,
    email text NOT NULL,
    name text,
    subject text NOT NULL,
    role_ids text[] NOT NULL,
    invited_by text NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    completed_at timestamp with time zone,
    revoked_at timestamp with time zone,
    revoked_by text,
    bootstrap boolean DEFAULT false NOT NULL,
    seq bigint NOT NULL,
    CONSTRAINT invitations_completed CHECK (((state = 'completed'::text) = (completed_at IS NOT NULL))),
    CONSTRAINT invitations_revoked CHECK (((state = 'revoked'::text) = (revoked_at IS NOT NULL))),
    CONSTRAINT invitations_state CHECK ((state = ANY (ARRAY['pending'::text, 'completed'::text, 'revoked'::text])))
);

-- Name: invitations_seq_seq; Type: SEQUENCE; Schema: staff; Owner: -

ALTER TABLE staff.invitations ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME staff.invitations_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: roles; Type: TABLE; Schema: staff; Owner: -

CREATE TABLE staff.roles (
    id text NOT NULL,
    name text NOT NULL,
    permissions text[] DEFAULT '{}'::text[] NOT NULL,
    builtin boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT roles_name_length CHECK (((length(name) >= 1) AND (length(name) <= 100))),
    CONSTRAINT roles_permissions_length CHECK ((cardinality(permissions) <= 64))
);

-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

-- Name: bootstrap bootstrap_pkey; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.bootstrap
    ADD CONSTRAINT bootstrap_pkey PRIMARY KEY (id);

-- Name: employee_roles employee_roles_pkey; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.employee_roles
    ADD CONSTRAINT employee_roles_pkey PRIMARY KEY (subject, role_id);

-- Name: employees employees_pkey; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.employees
    ADD CONSTRAINT employees_pkey PRIMARY KEY (subject);

-- Name: employees employees_seq_key; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.employees
    ADD CONSTRAINT employees_seq_key UNIQUE (seq);

-- Name: invitations invitations_pkey; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.invitations
    ADD CONSTRAINT invitations_pkey PRIMARY KEY (id);

-- Name: invitations invitations_seq_key; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.invitations
    ADD CONSTRAINT invitations_seq_key UNIQUE (seq);

-- Name: roles roles_pkey; Type: CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.roles
    ADD CONSTRAINT roles_pkey PRIMARY KEY (id);

-- Name: audit_log_action; Type: INDEX; Schema: staff; Owner: -

CREATE INDEX audit_log_action ON staff.audit_log USING btree (action, id);

-- Name: audit_log_actor; Type: INDEX; Schema: staff; Owner: -

CREATE INDEX audit_log_actor ON staff.audit_log USING btree (actor, id);

-- Name: audit_log_target; Type: INDEX; Schema: staff; Owner: -

CREATE INDEX audit_log_target ON staff.audit_log USING btree (target, id);

-- Name: employee_roles_role; Type: INDEX; Schema: staff; Owner: -

CREATE INDEX employee_roles_role ON staff.employee_roles USING btree (role_id);

-- Name: invitations_pending_email; Type: INDEX; Schema: staff; Owner: -

CREATE UNIQUE INDEX invitations_pending_email ON staff.invitations USING btree (lower(email)) WHERE (state = 'pending'::text);

-- Name: invitations_pending_subject; Type: INDEX; Schema: staff; Owner: -

CREATE UNIQUE INDEX invitations_pending_subject ON staff.invitations USING btree (subject) WHERE (state = 'pending'::text);

-- Name: roles_name_key; Type: INDEX; Schema: staff; Owner: -

CREATE UNIQUE INDEX roles_name_key ON staff.roles USING btree (lower(name));

-- Name: audit_log audit_log_append_only; Type: TRIGGER; Schema: staff; Owner: -

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON staff.audit_log FOR EACH ROW EXECUTE FUNCTION staff.audit_log_append_only();

-- Name: audit_log audit_log_no_truncate; Type: TRIGGER; Schema: staff; Owner: -

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON staff.audit_log FOR EACH STATEMENT EXECUTE FUNCTION staff.audit_log_append_only();

-- Name: employee_roles employee_roles_role_id_fkey; Type: FK CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.employee_roles
    ADD CONSTRAINT employee_roles_role_id_fkey FOREIGN KEY (role_id) REFERENCES staff.roles(id);

-- Name: employee_roles employee_roles_subject_fkey; Type: FK CONSTRAINT; Schema: staff; Owner: -

ALTER TABLE ONLY staff.employee_roles
    ADD CONSTRAINT employee_roles_subject_fkey FOREIGN KEY (subject) REFERENCES staff.employees(subject);

-- Name: SCHEMA staff; Type: ACL; Schema: -; Owner: -

GRANT USAGE ON SCHEMA staff TO hiwallet_staff_admin_app;
GRANT USAGE ON SCHEMA staff TO hiwallet_staff_admin_readonly;

-- Name: FUNCTION audit_log_append_only(); Type: ACL; Schema: staff; Owner: -

REVOKE ALL ON FUNCTION staff.audit_log_append_only() FROM PUBLIC;

-- Name: TABLE schema_migrations; Type: ACL; Schema: public; Owner: -

GRANT SELECT ON TABLE public.schema_migrations TO hiwallet_staff_admin_readonly;

-- Name: TABLE audit_log; Type: ACL; Schema: staff; Owner: -

GRANT SELECT,INSERT ON TABLE staff.audit_log TO hiwallet_staff_admin_app;
GRANT SELECT ON TABLE staff.audit_log TO hiwallet_staff_admin_readonly;

-- Name: TABLE bootstrap; Type: ACL; Schema: staff; Owner: -

GRANT SELECT,INSERT ON TABLE staff.bootstrap TO hiwallet_staff_admin_app;
GRANT SELECT ON TABLE staff.bootstrap TO hiwallet_staff_admin_readonly;

-- Name: COLUMN bootstrap.invitation_id; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(invitation_id) ON TABLE staff.bootstrap TO hiwallet_staff_admin_app;

-- Name: COLUMN bootstrap.sent_at; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(sent_at) ON TABLE staff.bootstrap TO hiwallet_staff_admin_app;

-- Name: TABLE employee_roles; Type: ACL; Schema: staff; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE staff.employee_roles TO hiwallet_staff_admin_app;
GRANT SELECT ON TABLE staff.employee_roles TO hiwallet_staff_admin_readonly;

-- Name: TABLE employees; Type: ACL; Schema: staff; Owner: -

GRANT SELECT,INSERT ON TABLE staff.employees TO hiwallet_staff_admin_app;
GRANT SELECT ON TABLE staff.employees TO hiwallet_staff_admin_readonly;

-- Name: COLUMN employees.email; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(email) ON TABLE staff.employees TO hiwallet_staff_admin_app;

-- Name: COLUMN employees.name; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(name) ON TABLE staff.employees TO hiwallet_staff_admin_app;

-- Name: COLUMN employees.active; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(active) ON TABLE staff.employees TO hiwallet_staff_admin_app;

-- Name: COLUMN employees.changed_at; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(changed_at) ON TABLE staff.employees TO hiwallet_staff_admin_app;

-- Name: TABLE invitations; Type: ACL; Schema: staff; Owner: -

GRANT SELECT,INSERT ON TABLE staff.invitations TO hiwallet_staff_admin_app;
GRANT SELECT ON TABLE staff.invitations TO hiwallet_staff_admin_readonly;

-- Name: COLUMN invitations.state; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(state) ON TABLE staff.invitations TO hiwallet_staff_admin_app;

-- Name: COLUMN invitations.completed_at; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(completed_at) ON TABLE staff.invitations TO hiwallet_staff_admin_app;

-- Name: COLUMN invitations.revoked_at; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(revoked_at) ON TABLE staff.invitations TO hiwallet_staff_admin_app;

-- Name: COLUMN invitations.revoked_by; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(revoked_by) ON TABLE staff.invitations TO hiwallet_staff_admin_app;

-- Name: TABLE roles; Type: ACL; Schema: staff; Owner: -

GRANT SELECT,INSERT,DELETE ON TABLE staff.roles TO hiwallet_staff_admin_app;
GRANT SELECT ON TABLE staff.roles TO hiwallet_staff_admin_readonly;

-- Name: COLUMN roles.name; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(name) ON TABLE staff.roles TO hiwallet_staff_admin_app;

-- Name: COLUMN roles.permissions; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(permissions) ON TABLE staff.roles TO hiwallet_staff_admin_app;

-- Name: COLUMN roles.updated_at; Type: ACL; Schema: staff; Owner: -

GRANT UPDATE(updated_at) ON TABLE staff.roles TO hiwallet_staff_admin_app;

-- onboarding (issue 12): a claim on an address whose registration ended before its user was
-- made (identity was down, then the registration expired) no longer holds the address for
-- ever: another registration of the address that completes releases it (deletes the claim).
-- A customer with a user is never deleted, whatever the privileges: this trigger refuses it.

CREATE FUNCTION onboarding.customers_keep_users() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sub IS NOT NULL THEN
        RAISE EXCEPTION 'customer % has a user: never deleted', OLD.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER customers_keep_users BEFORE DELETE ON onboarding.customers
    FOR EACH ROW EXECUTE FUNCTION onboarding.customers_keep_users();

-- Named queries of the identity service (one schema, used by both realms' databases).

-- name: published_keys
-- The JWKS: the active key, a next key, and retired keys whose tokens may still be alive.
SELECT kid, status, private_pem, public_jwk::text AS public_jwk
FROM signing_keys
WHERE status IN ('active', 'next') OR publish_until > now()
ORDER BY CASE status WHEN 'active' THEN 0 WHEN 'next' THEN 1 ELSE 2 END, created_at DESC;

-- name: insert_key
INSERT INTO signing_keys (kid, private_pem, public_jwk, status, activated_at)
VALUES ($1, $2, $3::jsonb, $4, CASE WHEN $4 = 'active' THEN now() END)
RETURNING kid;

-- name: retire_active_key
UPDATE signing_keys
SET status = 'retired', retired_at = now(), publish_until = now() + make_interval(secs => $1)
WHERE status = 'active';

-- name: promote_next_key
UPDATE signing_keys SET status = 'active', activated_at = now()
WHERE status = 'next'
RETURNING kid;

-- name: active_key_since
-- When the signing key in use became active (unix seconds; NULL: none yet): the gauge that
-- tells an operator the key is due for rotation.
SELECT extract(epoch FROM coalesce(activated_at, created_at))::float8
FROM signing_keys WHERE status = 'active';

-- name: insert_user
INSERT INTO users (id, username, email, first_name, last_name, enabled, email_verified,
                   password_hash, required_actions)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING *;

-- name: user_by_id
SELECT * FROM users WHERE id = $1;

-- name: user_by_login
-- The login form takes a username or an e-mail, as Keycloak's does.
SELECT * FROM users WHERE username = lower($1) OR email = lower($1)
ORDER BY (username = lower($1)) DESC
LIMIT 1;

-- name: find_users
-- Admin search. $1 username, $2 email (exact or substring), $3 free search, $4 exact match.
-- strpos, not LIKE: a "%" or "_" in the search text is a character, not a wildcard.
SELECT * FROM users
WHERE ($1::text IS NULL OR CASE WHEN $4 THEN username = lower($1)
                                ELSE strpos(username, lower($1)) > 0 END)
  AND ($2::text IS NULL OR CASE WHEN $4 THEN email = lower($2)
                                ELSE strpos(email, lower($2)) > 0 END)
  AND ($3::text IS NULL OR strpos(username, lower($3)) > 0 OR strpos(email, lower($3)) > 0)
ORDER BY username
OFFSET $5 LIMIT $6;

-- name: update_user
UPDATE users
SET email = $2, first_name = $3, last_name = $4, enabled = $5, email_verified = $6,
    required_actions = $7,
    -- Enabling a user by hand also lifts a lockout, as Keycloak's admin console does.
    locked_until = CASE WHEN $5 THEN NULL ELSE locked_until END,
    failed_logins = CASE WHEN $5 THEN 0 ELSE failed_logins END
WHERE id = $1
RETURNING *;

-- name: set_password
UPDATE users SET password_hash = $2, required_actions = $3 WHERE id = $1;

-- name: rehash_password
-- The same password under today's hashing parameters, after a sign-in proved it. Only if the hash
-- is still the one the sign-in verified: a password changed meanwhile is not overwritten.
UPDATE users SET password_hash = $3 WHERE id = $1 AND password_hash = $2;

-- name: set_totp
UPDATE users SET totp_secret = $2, totp_last_step = $3,
                 required_actions = array_remove(required_actions, 'CONFIGURE_TOTP')
WHERE id = $1;

-- name: use_totp_step
-- A TOTP code is accepted once: only a later time step than the last accepted one moves on.
UPDATE users SET totp_last_step = $2
WHERE id = $1 AND (totp_last_step IS NULL OR totp_last_step < $2)
RETURNING id;

-- name: record_login_failure
-- Failures count up while each follows the previous within the window; reaching the limit
-- locks the user out and starts the count again.
WITH counted AS (
    SELECT id, CASE WHEN last_failure_at > now() - make_interval(secs => $2)
                    THEN failed_logins + 1 ELSE 1 END AS failures
    FROM users WHERE id = $1 FOR UPDATE
)
UPDATE users u
SET failed_logins = CASE WHEN c.failures >= $3 THEN 0 ELSE c.failures END,
    last_failure_at = now(),
    locked_until = CASE WHEN c.failures >= $3 THEN now() + make_interval(secs => $4)
                        ELSE u.locked_until END
FROM counted c
WHERE u.id = c.id
RETURNING u.locked_until;

-- name: clear_login_failures
UPDATE users SET failed_logins = 0, last_failure_at = NULL WHERE id = $1 AND failed_logins > 0;

-- name: insert_login_flow
INSERT INTO login_flows (id, client_id, redirect_uri, scope, state, nonce, code_challenge,
                         expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8));

-- name: login_flow
SELECT * FROM login_flows WHERE id = $1 AND expires_at > now();

-- name: advance_login_flow
UPDATE login_flows SET stage = $2, user_id = $3, pending_totp = $4 WHERE id = $1;

-- name: take_login_flow
DELETE FROM login_flows WHERE id = $1 AND expires_at > now() RETURNING *;

-- name: insert_session
INSERT INTO sessions (id, user_id, client_id, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4));

-- name: active_session
SELECT * FROM sessions WHERE id = $1 AND ended_at IS NULL AND expires_at > now();

-- name: end_session
UPDATE sessions SET ended_at = now() WHERE id = $1 AND ended_at IS NULL;

-- name: revoke_session_tokens
UPDATE refresh_tokens SET revoked_at = now() WHERE session_id = $1 AND revoked_at IS NULL;

-- name: insert_code
INSERT INTO authorization_codes (code_hash, client_id, user_id, session_id, redirect_uri, scope,
                                 nonce, code_challenge, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9));

-- name: redeem_code
-- Single use: the first redeemer marks it used; any later attempt finds used_at set.
UPDATE authorization_codes SET used_at = now()
WHERE code_hash = $1 AND used_at IS NULL
RETURNING *, expires_at > now() AS fresh;

-- name: code_by_hash
SELECT * FROM authorization_codes WHERE code_hash = $1;

-- name: insert_refresh_token
INSERT INTO refresh_tokens (token_hash, family_id, session_id, client_id, user_id, scope,
                            expires_at)
VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7));

-- name: use_refresh_token
-- Rotation: the token is spent by this use; a second use of it is a replay.
UPDATE refresh_tokens SET used_at = now()
WHERE token_hash = $1 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now()
RETURNING *;

-- name: refresh_token_by_hash
SELECT * FROM refresh_tokens WHERE token_hash = $1;

-- name: live_refresh_token
-- What introspection reports: a refresh token the refresh grant would still accept (unspent,
-- unrevoked, unexpired, its session open, its user enabled), with its user's name.
SELECT r.*, extract(epoch FROM r.created_at)::bigint AS iat,
       extract(epoch FROM r.expires_at)::bigint AS exp, u.username
FROM refresh_tokens r
JOIN sessions s ON s.id = r.session_id AND s.ended_at IS NULL AND s.expires_at > now()
JOIN users u ON u.id = r.user_id AND u.enabled
WHERE r.token_hash = $1 AND r.used_at IS NULL AND r.revoked_at IS NULL AND r.expires_at > now();

-- name: revoke_family
UPDATE refresh_tokens SET revoked_at = now() WHERE family_id = $1 AND revoked_at IS NULL;

-- name: insert_action_token
INSERT INTO action_tokens (token_hash, user_id, actions, client_id, redirect_uri, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6));

-- name: action_token
SELECT * FROM action_tokens WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now();

-- name: finish_action
-- Removes one completed action; the token is spent when none is left.
UPDATE action_tokens
SET actions = array_remove(actions, $2),
    used_at = CASE WHEN array_remove(actions, $2) = '{}' THEN now() END
WHERE token_hash = $1
RETURNING actions;

-- name: insert_mail
INSERT INTO outgoing_mail (id, recipient, subject, body) VALUES ($1, $2, $3, $4);

-- name: mark_mail_sent
UPDATE outgoing_mail SET sent_at = now() WHERE id = $1;

-- name: purge_expired
-- Housekeeping. Spent codes and refresh tokens are kept a day past expiry so that a late
-- replay is still recognised as one (and revokes what it must) instead of looking unknown.
WITH flows AS (
    DELETE FROM login_flows WHERE expires_at < now() RETURNING 1
), actions AS (
    DELETE FROM action_tokens WHERE expires_at < now() - interval '1 day' RETURNING 1
), old_sessions AS (
    DELETE FROM sessions
    WHERE coalesce(ended_at, expires_at) < now() - interval '1 day'
      AND expires_at < now()  -- an ended session still inside its lifetime keeps its rows
    RETURNING 1
)
SELECT (SELECT count(*) FROM flows) + (SELECT count(*) FROM actions)
     + (SELECT count(*) FROM old_sessions) AS purged;

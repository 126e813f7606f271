"""identity's OpenAPI document, exact (tests/identity/test_contract.py checks it with Schemathesis).

The routes read their forms, JSON bodies and queries by hand, in Keycloak's shapes (clients such
as python-keycloak send what Keycloak takes, and the OAuth endpoints answer RFC 6749's
``{"error", "error_description"}``, not problem+json), so FastAPI cannot see what they take or
answer. This module says it, per operation, in one table: the request body, the query, and
every answer, replacing what FastAPI guessed.

One process serves one realm: ``realm_name`` is documented as that realm alone (another name is
404, as for any path that names nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

__all__ = ["document"]

_STRING = {"type": "string"}
_OBJECT = {"type": "object"}
_PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": _STRING,
        "title": _STRING,
        "status": {"type": "integer"},
        "detail": _STRING,
        "instance": _STRING,
    },
}
_OAUTH_ERROR = {
    "type": "object",
    "required": ["error", "error_description"],
    "properties": {"error": _STRING, "error_description": _STRING},
}
_TOKENS = {
    "type": "object",
    "required": ["access_token", "expires_in", "token_type"],
    "properties": {
        "access_token": _STRING,
        "expires_in": {"type": "integer"},
        "refresh_token": _STRING,
        "refresh_expires_in": {"type": "integer"},
        "id_token": _STRING,
        "token_type": _STRING,
        "scope": _STRING,
        "session_state": _STRING,
    },
}
_INTROSPECTION = {"type": "object", "required": ["active"], "properties": {"active": {"type": "boolean"}}}
_JWKS = {"type": "object", "required": ["keys"], "properties": {"keys": {"type": "array", "items": _OBJECT}}}
_USER = {
    "type": "object",
    "required": ["id", "username", "enabled"],
    "properties": {"id": _STRING, "username": _STRING, "enabled": {"type": "boolean"}},
}


def _answer(
    description: str,
    media: str | None = None,
    schema: dict[str, Any] | None = None,
    headers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description}
    if media is not None:
        answer["content"] = {media: {"schema": schema or _STRING}}
    if headers:
        answer["headers"] = {name: {"schema": _STRING, "description": d} for name, d in headers.items()}
    return answer


def _problem(description: str) -> dict[str, Any]:
    return _answer(description, "application/problem+json", _PROBLEM)


def _oauth(description: str) -> dict[str, Any]:
    return _answer(description, "application/json", _OAUTH_ERROR)


def _page(description: str) -> dict[str, Any]:
    return _answer(description, "text/html")


_NO_REALM = _problem("No realm of that name here")
_TOO_LARGE = _problem("The body is larger than the service takes")
_UNSUPPORTED = _problem("The body is not of a media type this operation takes")
_REDIRECT = _answer(
    "To the client's redirect URI (with the code) or the next step", headers={"Location": "where to go"}
)
_BEARER = _answer(
    "No valid bearer token", "application/json", _OAUTH_ERROR, {"WWW-Authenticate": "Bearer error"}
)
_ADMIN_REFUSALS = {
    "401": _problem("No valid access token of this realm"),
    "403": _problem("Not a service account holding the realm-management role this needs"),
}


def _form(*required: str, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    fields = {name: _STRING for name in (*required, *optional)}
    schema: dict[str, Any] = {"type": "object", "properties": fields}
    if required:
        schema["required"] = list(required)
    return {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": schema}}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _query(*names: str, required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [
        {"name": n, "in": "query", "required": n in required, "schema": _STRING} for n in (*names, *required)
    ]


_CLIENT = ("client_id", "client_secret")
_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_USER_REP = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "pattern": "^[a-z0-9._@+-]{1,255}$"},
        "email": _STRING,
        "firstName": _STRING,
        "lastName": _STRING,
        "enabled": {"type": "boolean"},
        "emailVerified": {"type": "boolean"},
        "requiredActions": {"type": "array", "items": _STRING},
        "credentials": {"type": "array", "maxItems": 1, "items": _OBJECT},
        "attributes": _OBJECT,
    },
}
_OIDC = "/realms/{realm_name}/protocol/openid-connect"
_ADMIN = "/admin/realms/{realm_name}/users"

# (path, method) -> what the operation takes and answers (besides 404: no such realm).
OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("/realms/{realm_name}/.well-known/openid-configuration", "get"): {
        "responses": {"200": _answer("The provider's metadata", "application/json", _OBJECT)},
    },
    (f"{_OIDC}/certs", "get"): {
        "responses": {"200": _answer("The realm's signing keys (JWKS)", "application/json", _JWKS)},
    },
    (f"{_OIDC}/token", "post"): {
        "requestBody": _form(
            "grant_type",
            optional=(
                *_CLIENT,
                "username",
                "password",
                "scope",
                "code",
                "redirect_uri",
                "code_verifier",
                "refresh_token",
            ),
        ),
        "responses": {
            "200": _answer("The tokens", "application/json", _TOKENS),
            "400": _oauth("The grant is refused (RFC 6749 §5.2)"),
            "401": _oauth("The client or the user's credentials are not valid"),
        },
    },
    (f"{_OIDC}/token/introspect", "post"): {
        "requestBody": _form("token", optional=_CLIENT),
        "responses": {
            "200": _answer("Whether the token is active, and its claims", "application/json", _INTROSPECTION),
            "400": _oauth("The request is refused"),
            "401": _oauth("The client's credentials are not valid"),
        },
    },
    (f"{_OIDC}/userinfo", "get"): {
        "responses": {"200": _answer("The user's claims", "application/json", _OBJECT), "401": _BEARER},
    },
    (f"{_OIDC}/userinfo", "post"): {
        "responses": {"200": _answer("The user's claims", "application/json", _OBJECT), "401": _BEARER},
    },
    (f"{_OIDC}/logout", "post"): {
        "requestBody": _form("refresh_token", optional=_CLIENT),
        "responses": {
            "204": _answer("The session is ended"),
            "400": _oauth("The refresh token is missing or not valid"),
            "401": _oauth("The client's credentials are not valid"),
        },
    },
    (f"{_OIDC}/logout", "get"): {"responses": {"200": _page("You are logged out")}},
    (f"{_OIDC}/auth", "get"): {
        "parameters": _query(
            "client_id",
            "redirect_uri",
            "response_type",
            "scope",
            "state",
            "nonce",
            "code_challenge",
            "code_challenge_method",
        ),
        "responses": {
            "200": _page("The login page"),
            "302": _REDIRECT,
            "400": _page("The login cannot start (unknown client, redirect URI, parameters)"),
        },
    },
    ("/realms/{realm_name}/login-actions/authenticate", "post"): {
        "requestBody": _form("flow", optional=("username", "password", "otp")),
        "responses": {
            "200": _page("The login page again, with what went wrong, or the next step"),
            "302": _REDIRECT,
            "400": _page("The flow cannot go on (no flow cookie, expired)"),
        },
    },
    ("/realms/{realm_name}/login-actions/action-token", "get"): {
        "parameters": _query(required=("key",)),
        "responses": {
            "200": _page("The action's page (set a password, verify the e-mail)"),
            "400": _page("The link is not valid or has expired"),
            "422": _problem("The link has no key"),
        },
    },
    ("/realms/{realm_name}/login-actions/action-token", "post"): {
        "requestBody": _form("key", optional=("password", "password-confirm")),
        "responses": {
            "200": _page("Done, or the page again with what went wrong"),
            "400": _page("The link is not valid or has expired"),
        },
    },
    (_ADMIN, "post"): {
        "requestBody": _json({**_USER_REP, "required": ["username"]}),
        "responses": {
            "201": _answer("Created", headers={"Location": "the user's URL"}),
            "400": _problem("The representation is not valid"),
            **_ADMIN_REFUSALS,
            "409": _problem("A user with that username or e-mail exists"),
        },
    },
    (_ADMIN, "get"): {
        "parameters": [
            *_query("search", "username", "email", "exact", "briefRepresentation"),
            *({"name": n, "in": "query", "required": False, "schema": _COUNT} for n in ("first", "max")),
        ],
        "responses": {
            "200": _answer("The users found", "application/json", {"type": "array", "items": _USER}),
            "400": _problem("first and max must be integers"),
            **_ADMIN_REFUSALS,
        },
    },
    (f"{_ADMIN}/{{user_id}}", "get"): {
        "responses": {
            "200": _answer("The user", "application/json", _USER),
            **_ADMIN_REFUSALS,
            "404": _problem("No such realm or user"),
        },
    },
    (f"{_ADMIN}/{{user_id}}", "put"): {
        "requestBody": _json(_USER_REP),
        "responses": {
            "204": _answer("Updated"),
            "400": _problem("The representation is not valid"),
            **_ADMIN_REFUSALS,
            "404": _problem("No such realm or user"),
            "409": _problem("A user with that e-mail exists"),
        },
    },
    (f"{_ADMIN}/{{user_id}}/reset-password", "put"): {
        "requestBody": _json(
            {
                "type": "object",
                "properties": {"type": _STRING, "value": _STRING, "temporary": {"type": "boolean"}},
            }
        ),
        "responses": {
            "204": _answer("The password is set"),
            "400": _problem("The credential is not valid"),
            **_ADMIN_REFUSALS,
            "404": _problem("No such realm or user"),
        },
    },
    (f"{_ADMIN}/{{user_id}}/execute-actions-email", "put"): {
        "parameters": _query("client_id", "redirect_uri", "lifespan"),
        "requestBody": _json({"type": "array", "items": _STRING}),
        "responses": {
            "204": _answer("The e-mail is sent"),
            "400": _problem("No actions, no e-mail, or a redirect URI the client does not allow"),
            **_ADMIN_REFUSALS,
            "404": _problem("No such realm or user"),
        },
    },
}

# Answers of every operation: its realm missing; a body too large, or not of its media type.
_EVERY = {"404": _NO_REALM}
_WITH_BODY = {"413": _TOO_LARGE, "415": _UNSUPPORTED}


def _exact(schema: dict[str, Any], realm_name: str) -> None:
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            declared = OPERATIONS.get((path, method))
            if declared is None:
                raise RuntimeError(f"identity's document says nothing of {method.upper()} {path}")
            path_params = [
                {**p, "schema": {"type": "string", "enum": [realm_name]}} if p["name"] == "realm_name" else p
                for p in operation.get("parameters", [])
                if p.get("in") == "path"
            ]
            operation["parameters"] = path_params + declared.get("parameters", [])
            operation.pop("requestBody", None)
            if "requestBody" in declared:
                operation["requestBody"] = declared["requestBody"]
            extra = _WITH_BODY if "requestBody" in declared else {}
            operation["responses"] = {**_EVERY, **extra, **declared["responses"]}
    schema.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
    schema.get("components", {}).get("schemas", {}).pop("ValidationError", None)


def document(app: FastAPI, realm_name: str) -> None:
    """Make ``app``'s document exact for the realm it serves (built once, then kept)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            _exact(schema, realm_name)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

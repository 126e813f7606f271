"""HTTP routes of one realm, in Keycloak's paths. Routes only translate: the work is in
:mod:`tokens`, :mod:`login` and :mod:`admin`."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from hiwallet.core.auth import bearer_token
from hiwallet.core.db import app_role
from hiwallet.core.http import ClientNetworks, NotFound, ReadyCheck, create_app
from hiwallet.core.service import DatabaseSpec, Runtime, ServiceSpec, service_lifespan
from hiwallet.core.settings import Settings
from hiwallet.identity import admin, login, tokens
from hiwallet.identity.authn import authenticate_client
from hiwallet.identity.context import Realm
from hiwallet.identity.document import document
from hiwallet.identity.errors import InvalidToken, InvalidUser, LoginPageError, OAuthError
from hiwallet.identity.housekeeping import purge_expired
from hiwallet.identity.keys import KeyMetrics, KeyRing, ensure_keys
from hiwallet.identity.passwords import Passwords
from hiwallet.identity.realm import MANAGE_USERS, VIEW_USERS, load_realm
from hiwallet.identity.settings import IdentitySettings, get_identity_settings

TEMPLATES = Path(__file__).resolve().parent / "templates"
_jinja = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
)
# Tokens and pages must not be cached by browsers or proxies (RFC 6749 §5.1).
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
# The login pages load only our own stylesheet and may not be framed (clickjacking).
PAGE_HEADERS = {
    **NO_STORE,
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}

FLOW_COOKIE = "HIWALLET_LOGIN_FLOW"

router = APIRouter()
OIDC = "/realms/{realm_name}/protocol/openid-connect"
ADMIN = "/admin/realms/{realm_name}"


def get_realm(request: Request, realm_name: str) -> Realm:
    realm: Realm = request.app.state.realm
    if realm_name != realm.name:
        raise NotFound("Realm does not exist")
    return realm


def render(realm: Realm, page: login.Page) -> HTMLResponse:
    context = {
        "realm_name": realm.config.display_name,
        "error": None,
        "hidden": {},
        **page.context,
    }
    html = _jinja.get_template(page.template).render(**context)
    return HTMLResponse(html, status_code=page.status, headers=PAGE_HEADERS)


def step_response(realm: Realm, step: login.Step) -> Response:
    if isinstance(step, login.Redirect):
        return RedirectResponse(step.url, status_code=302, headers=NO_STORE)
    return render(realm, step)


async def form_of(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def json_of(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError as exc:
        raise InvalidUser("the body is not valid JSON") from exc


@router.get("/realms/{realm_name}/.well-known/openid-configuration")
async def well_known(realm: Realm = Depends(get_realm)) -> dict[str, Any]:
    base = f"{realm.issuer}/protocol/openid-connect"
    return {
        "issuer": realm.issuer,
        "authorization_endpoint": f"{base}/auth",
        "token_endpoint": f"{base}/token",
        "introspection_endpoint": f"{base}/token/introspect",
        "userinfo_endpoint": f"{base}/userinfo",
        "end_session_endpoint": f"{base}/logout",
        "jwks_uri": f"{base}/certs",
        "grant_types_supported": [
            "authorization_code",
            "refresh_token",
            "client_credentials",
            "password",
        ],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": sorted(tokens.SUPPORTED_SCOPES),
        "claims_supported": [
            "sub",
            "iss",
            "aud",
            "exp",
            "iat",
            "azp",
            "email",
            "email_verified",
            "preferred_username",
            "name",
            "given_name",
            "family_name",
        ],
        "authorization_response_iss_parameter_supported": True,
    }


@router.get(OIDC + "/certs")
async def certs(realm: Realm = Depends(get_realm)) -> JSONResponse:
    # Verifiers cache this; a short max-age bounds how stale a cache can be after a rotation.
    return JSONResponse(await realm.keys.jwks(), headers={"Cache-Control": "max-age=60"})


@router.post(OIDC + "/token")
async def token(request: Request, realm: Realm = Depends(get_realm)) -> JSONResponse:
    form = await form_of(request)
    client = authenticate_client(realm, form, request.headers.get("authorization"))
    return JSONResponse(await tokens.token_grant(realm, client, form), headers=NO_STORE)


@router.post(OIDC + "/token/introspect")
async def introspect(request: Request, realm: Realm = Depends(get_realm)) -> JSONResponse:
    form = await form_of(request)
    client = authenticate_client(realm, form, request.headers.get("authorization"))
    return JSONResponse(await tokens.introspect(realm, client, form), headers=NO_STORE)


# OpenID Connect Core 5.3.1: userinfo by GET or POST; one operation id each (FastAPI derives the
# same id for both methods of one route, and warns that the document holds it twice).
@router.get(OIDC + "/userinfo", operation_id="userinfo_get")
@router.post(OIDC + "/userinfo", operation_id="userinfo_post")
async def userinfo(request: Request, realm: Realm = Depends(get_realm)) -> JSONResponse:
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("bearer "):
        raise InvalidToken("Token not provided")
    return JSONResponse(await tokens.userinfo(realm, header[7:].strip()), headers=NO_STORE)


@router.post(OIDC + "/logout")
async def logout(request: Request, realm: Realm = Depends(get_realm)) -> Response:
    form = await form_of(request)
    client = authenticate_client(realm, form, request.headers.get("authorization"))
    await tokens.logout(realm, client, form)
    return Response(status_code=204)


@router.get(OIDC + "/logout")
async def logout_page(realm: Realm = Depends(get_realm)) -> HTMLResponse:
    # No SSO cookie is kept (each authorization shows the login page), so there is nothing to
    # end in the browser; clients end the session with the POST above.
    return render(realm, login.Page("message.html", {"message": "You are logged out."}))


@router.get(OIDC + "/auth")
async def auth(request: Request, realm: Realm = Depends(get_realm)) -> Response:
    params = dict(request.query_params)
    step = await login.start_login(realm, params)
    response = step_response(realm, step)
    if isinstance(step, login.Page):
        # The flow is bound to this browser, as Keycloak's AUTH_SESSION_ID: a flow id that leaks
        # (a shared screen, a log) cannot be continued from elsewhere.
        response.set_cookie(
            FLOW_COOKIE,
            step.context["hidden"]["flow"],
            max_age=realm.settings.login_flow_lifetime_s,
            path=f"/realms/{realm.name}/login-actions",
            httponly=True,
            samesite="lax",
            secure=realm.issuer.startswith("https://"),
        )
    return response


@router.post("/realms/{realm_name}/login-actions/authenticate")
async def authenticate(request: Request, realm: Realm = Depends(get_realm)) -> Response:
    form = await form_of(request)
    flow_id = form.get("flow", "")
    cookie = request.cookies.get(FLOW_COOKIE, "")
    if not flow_id or not hmac.compare_digest(cookie.encode(), flow_id.encode()):
        raise LoginPageError("Cookie not found. Please make sure cookies are enabled in your browser.")
    return step_response(realm, await login.submit(realm, flow_id, form))


@router.get("/realms/{realm_name}/login-actions/action-token")
async def action_token(key: str, realm: Realm = Depends(get_realm)) -> Response:
    return render(realm, await login.action_page(realm, key))


@router.post("/realms/{realm_name}/login-actions/action-token")
async def action_token_submit(request: Request, realm: Realm = Depends(get_realm)) -> Response:
    form = await form_of(request)
    return render(realm, await login.action_submit(realm, form.get("key", ""), form))


@router.get("/resources/hiwallet.css", include_in_schema=False)
async def stylesheet() -> Response:
    css = (TEMPLATES / "hiwallet.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


async def _admin(request: Request, realm: Realm, role: str) -> None:
    header = request.headers.get("authorization", "")
    token = bearer_token(request) if header.lower().startswith("bearer ") else None
    await admin.authorize(realm, token, role)


@router.post(ADMIN + "/users")
async def create_user(request: Request, realm: Realm = Depends(get_realm)) -> Response:
    await _admin(request, realm, MANAGE_USERS)
    user_id = await admin.create_user(realm, _mapping(await json_of(request)))
    location = f"{realm.settings.base_url(realm.name)}/admin/realms/{realm.name}/users/{user_id}"
    return Response(status_code=201, headers={"Location": location})


@router.get(ADMIN + "/users")
async def get_users(request: Request, realm: Realm = Depends(get_realm)) -> list[dict[str, Any]]:
    await _admin(request, realm, VIEW_USERS)
    return await admin.find_users(realm, dict(request.query_params))


@router.get(ADMIN + "/users/{user_id}")
async def get_user(request: Request, user_id: str, realm: Realm = Depends(get_realm)) -> dict[str, Any]:
    await _admin(request, realm, VIEW_USERS)
    return (await admin.get_user(realm, user_id)).representation()


@router.put(ADMIN + "/users/{user_id}")
async def update_user(request: Request, user_id: str, realm: Realm = Depends(get_realm)) -> Response:
    await _admin(request, realm, MANAGE_USERS)
    await admin.update_user(realm, user_id, _mapping(await json_of(request)))
    return Response(status_code=204)


@router.put(ADMIN + "/users/{user_id}/reset-password")
async def reset_password(request: Request, user_id: str, realm: Realm = Depends(get_realm)) -> Response:
    await _admin(request, realm, MANAGE_USERS)
    await admin.reset_password(realm, user_id, _mapping(await json_of(request)))
    return Response(status_code=204)


@router.put(ADMIN + "/users/{user_id}/execute-actions-email")
async def execute_actions_email(
    request: Request, user_id: str, realm: Realm = Depends(get_realm)
) -> Response:
    await _admin(request, realm, MANAGE_USERS)
    query = dict(request.query_params)
    await admin.execute_actions_email(realm, user_id, await json_of(request), query)
    return Response(status_code=204)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidUser("the body must be a JSON object")
    return value


async def _on_oauth_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, OAuthError):  # registered for OAuthError: a wiring mistake
        raise exc
    headers = dict(NO_STORE)
    if isinstance(exc, InvalidToken):
        headers["WWW-Authenticate"] = f'Bearer error="invalid_token", error_description="{exc.detail}"'
    return JSONResponse(exc.oauth_body(), status_code=exc.status, headers=headers)


async def _on_login_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, LoginPageError):  # registered for LoginPageError: a wiring mistake
        raise exc
    realm: Realm = request.app.state.realm
    page = login.Page("message.html", {"message": exc.detail or exc.title}, status=exc.status)
    return render(realm, page)


def create_identity_app(
    realm_name: str,
    settings: IdentitySettings | None = None,
    *,
    database: str | None = None,
    core_settings: Settings | None = None,
) -> FastAPI:
    """The app of one realm. ``database`` overrides the realm's database (tests use clones)."""
    settings = settings or get_identity_settings()
    config = load_realm(realm_name, settings.realms_dir)
    database_name = database or settings.database_name(config.database_key)
    checks: dict[str, ReadyCheck] = {}

    async def setup(rt: Runtime) -> None:
        await ensure_keys(rt.db, settings.key_bits)
        passwords = Passwords(settings, rt.app.state.metrics_registry)
        rt.close(passwords.close)
        rt.app.state.realm = Realm(config, settings, rt.db, KeyRing(rt.db, settings.key_cache_s), passwords)
        rt.every("purge", settings.purge_interval_s, lambda: purge_expired(rt.db))
        key_metrics = KeyMetrics(rt.app.state.metrics_registry)
        await key_metrics.refresh(rt.db)
        rt.every("key-gauge", settings.metrics_interval_s, lambda: key_metrics.refresh(rt.db))

    # One realm a deployable (identity, identity-staff), each its own database.
    spec = ServiceSpec(
        f"identity-{realm_name}",
        setup,
        database=DatabaseSpec(database_name, app_role(config.database_key)),
    )
    # The staff realm answers its internal networks only (every path; empty: no restriction).
    staff = realm_name == "hiwallet-staff"
    app = create_app(
        spec.name,
        ready_checks=checks,
        lifespan=service_lifespan(spec, checks, settings=core_settings),
        max_body_bytes=settings.max_body_bytes,
        extra_problem_handlers=[(OAuthError, _on_oauth_error), (LoginPageError, _on_login_error)],
        client_networks=ClientNetworks.of(settings.staff_allowed_networks, ("/",)) if staff else None,
    )
    app.include_router(router)
    document(app, realm_name)
    return app

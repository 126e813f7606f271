"""A BFF's sessions: the tokens stay with the BFF, the browser carries a sealed cookie.

As the IETF's "OAuth 2.0 for Browser-Based Applications" describes the BFF: the BFF logs the
person in with its own confidential client (code flow with PKCE), keeps the tokens where script
cannot reach them, and calls the APIs with them. Here they are sealed (AES-GCM, core.bff.seal)
in an HttpOnly, SameSite=Lax cookie; nothing server-side to share between instances.

- The cookie is ``__Host-``-prefixed and ``Secure`` (no Domain, Path ``/``: only this origin
  ever gets it). Development exception: a BFF whose public URL is plain ``http://`` on a
  loopback address (``hiwallet up`` on a laptop) drops both, as browsers and HTTP clients keep
  ``Secure`` cookies off plain http; production refuses such a URL at start.
- The access token is refreshed when it has less than ``refresh_margin_s`` left, and the cookie
  rewritten; a session lives at most ``max_age_s`` whatever the refreshes (then: sign in again).
- Logout forgets the cookie and ends the provider's session (its refresh tokens stop working).
- Every state-changing request carries the session's CSRF token (a synchronizer token, in the
  form) and an ``Origin`` (or ``Referer``) of this BFF: :meth:`BffSessions.check_csrf`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit

import structlog
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hiwallet.core.bff.oidc import GrantRefused, OidcClient, Tokens
from hiwallet.core.bff.seal import Sealer
from hiwallet.core.http import Forbidden

__all__ = [
    "BffSessions",
    "CsrfRefused",
    "Session",
    "SessionCookies",
    "is_local_http",
    "safe_return_path",
]

log = structlog.get_logger(__name__)

_STATE_KEY = "hiwallet.bff.cookie"  # the cookie a response must set or clear (request.state)
_CLEAR = object()


class CsrfRefused(Forbidden):
    slug = "csrf-refused"
    title = "This form has expired or did not come from this site"


@dataclass(frozen=True)
class Session:
    subject: str
    access_token: str
    access_expires_at: float
    refresh_token: str
    refresh_expires_at: float
    csrf: str
    started_at: float

    @classmethod
    def started(cls, tokens: Tokens, now: float) -> Session:
        return cls(
            tokens.subject,
            tokens.access_token,
            tokens.access_expires_at,
            tokens.refresh_token,
            tokens.refresh_expires_at,
            secrets.token_urlsafe(32),
            now,
        )

    def refreshed(self, tokens: Tokens) -> Session:
        if tokens.subject != self.subject:
            raise GrantRefused("the refreshed token names another person")
        return Session(
            self.subject,
            tokens.access_token,
            tokens.access_expires_at,
            tokens.refresh_token,
            tokens.refresh_expires_at,
            self.csrf,
            self.started_at,
        )


def is_local_http(url: str) -> bool:
    """``http://`` on a loopback address: the one place cookies go without ``Secure``."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def safe_return_path(value: str | None, default: str = "/") -> str:
    """A path on this site to come back to after login; anything else (another site, a
    protocol-relative ``//host``, a backslash trick) is the default: no open redirect."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    if any(ord(c) < 0x20 for c in value) or len(value) > 512:
        return default
    return value


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class SessionCookies:
    session: str
    login: str
    secure: bool

    @classmethod
    def for_url(cls, public_url: str) -> SessionCookies:
        secure = not is_local_http(public_url)
        prefix = "__Host-" if secure else ""
        return cls(f"{prefix}hiwallet-session", f"{prefix}hiwallet-login", secure)


class BffSessions:
    """Login, the session of a request (refreshed when due), logout and the CSRF check."""

    def __init__(
        self,
        *,
        sealer: Sealer,
        oidc: OidcClient,
        public_url: str,
        max_age_s: int = 12 * 3600,
        refresh_margin_s: float = 30.0,
        login_max_age_s: int = 600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sealer = sealer
        self.oidc = oidc
        self.public_url = public_url.rstrip("/")
        self.origin = _origin(public_url)
        self.cookies = SessionCookies.for_url(public_url)
        self.max_age_s = max_age_s
        self.refresh_margin_s = refresh_margin_s
        self.login_max_age_s = login_max_age_s
        self.clock = clock
        # One refresh at a time per session in this process: two pages loading at once would
        # otherwise both spend the same refresh token, and the provider may refuse the second.
        self._refreshing: dict[str, asyncio.Future[Session]] = {}

    # -- login --------------------------------------------------------------------------------

    def begin_login(self, return_to: str | None, locale: str | None = None) -> Response:
        """Send the browser to the provider; the flow's secrets go in a sealed cookie."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        flow = {
            "state": state,
            "nonce": nonce,
            "verifier": verifier,
            "return_to": safe_return_path(return_to),
            "at": self.clock(),
        }
        url = self.oidc.authorization_url(state=state, nonce=nonce, code_challenge=challenge, locale=locale)
        response = RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})
        self._set(
            response, self.cookies.login, self.sealer.seal(self.cookies.login, flow), self.login_max_age_s
        )
        return response

    async def finish_login(self, request: Request) -> Response:
        """The provider's redirect back: the state must be this browser's, the code is
        exchanged with the verifier, the session cookie is set."""
        flow = self.sealer.open(self.cookies.login, request.cookies.get(self.cookies.login))
        state = request.query_params.get("state", "")
        code = request.query_params.get("code", "")
        now = self.clock()
        if (
            flow is None
            or not code
            or not hmac.compare_digest(str(flow.get("state", "")).encode(), state.encode())
            or now - float(flow.get("at", 0)) > self.login_max_age_s
        ):
            raise GrantRefused("the sign-in did not start here, or took too long")
        tokens = await self.oidc.exchange(code, str(flow["verifier"]), str(flow["nonce"]))
        session = Session.started(tokens, now)
        response = RedirectResponse(
            str(flow["return_to"]), status_code=303, headers={"Cache-Control": "no-store"}
        )
        self._write(response, session)
        self._delete(response, self.cookies.login)
        log.info("signed in")
        return response

    # -- the session of a request ---------------------------------------------------------------

    async def current(self, request: Request) -> Session | None:
        """The request's session, refreshed if due (the new cookie is written by
        :class:`SessionCookieWriter` on the response); None when there is none or it ended."""
        opened = self.sealer.open(self.cookies.session, request.cookies.get(self.cookies.session))
        if opened is None:
            return None
        try:
            session = Session(**opened)
        except TypeError:
            return None
        now = self.clock()
        if now - session.started_at > self.max_age_s or now >= session.refresh_expires_at:
            setattr(request.state, _STATE_KEY, _CLEAR)
            return None
        if session.access_expires_at - now > self.refresh_margin_s:
            return session
        try:
            session = await self._refresh(session)
        except GrantRefused:
            setattr(request.state, _STATE_KEY, _CLEAR)
            return None
        setattr(request.state, _STATE_KEY, self.sealer.seal(self.cookies.session, asdict(session)))
        return session

    async def _refresh(self, session: Session) -> Session:
        key = hashlib.sha256(session.refresh_token.encode()).hexdigest()
        running = self._refreshing.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self._refreshing[key] = future
        try:
            refreshed = session.refreshed(await self.oidc.refresh(session.refresh_token))
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            self._refreshing.pop(key, None)
        future.set_result(refreshed)
        return refreshed

    # -- logout ---------------------------------------------------------------------------------

    async def logout(self, request: Request, then: str = "/") -> Response:
        opened = self.sealer.open(self.cookies.session, request.cookies.get(self.cookies.session))
        if opened is not None and isinstance(opened.get("refresh_token"), str):
            await self.oidc.end_session(opened["refresh_token"])
        response = RedirectResponse(
            safe_return_path(then), status_code=303, headers={"Cache-Control": "no-store"}
        )
        self._delete(response, self.cookies.session)
        log.info("signed out")
        return response

    # -- CSRF -----------------------------------------------------------------------------------

    def check_csrf(self, request: Request, session: Session, token: str | None) -> None:
        """A state-changing request: from a page of this site (``Origin``, else ``Referer``)
        and carrying this session's token."""
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            referer = request.headers.get("referer")
            origin = _origin(referer) if referer else None
        if origin != self.origin:
            raise CsrfRefused("the request did not come from this site")
        if not token or not hmac.compare_digest(token.encode(), session.csrf.encode()):
            raise CsrfRefused("the form's token is missing or not this session's")

    # -- cookies --------------------------------------------------------------------------------

    def _write(self, response: Response, session: Session) -> None:
        self._set(
            response,
            self.cookies.session,
            self.sealer.seal(self.cookies.session, asdict(session)),
            self.max_age_s,
        )

    def _set(self, response: Response, name: str, value: str, max_age_s: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age_s,
            path="/",
            secure=self.cookies.secure,
            httponly=True,
            samesite="lax",
        )

    def _delete(self, response: Response, name: str) -> None:
        response.delete_cookie(name, path="/", secure=self.cookies.secure, httponly=True, samesite="lax")

    def middleware(self, app: ASGIApp) -> ASGIApp:
        return SessionCookieWriter(app, self)


class SessionCookieWriter:
    """Writes what :meth:`BffSessions.current` decided (a refreshed cookie, or its removal) on
    the response, whichever route answered."""

    def __init__(self, app: ASGIApp, sessions: BffSessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and _STATE_KEY in state:
                decided = state.pop(_STATE_KEY)
                carrier = Response()
                if decided is _CLEAR:
                    self.sessions._delete(carrier, self.sessions.cookies.session)
                else:
                    self.sessions._set(
                        carrier, self.sessions.cookies.session, decided, self.sessions.max_age_s
                    )
                headers = list(message.get("headers", []))
                headers += [(k, v) for k, v in carrier.raw_headers if k == b"set-cookie"]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)

"""Bearer-token verification, shared by every HiWallet service.

A service lists the issuers it trusts (:class:`TrustedIssuer`). A token is accepted only if its
signature verifies against that issuer's JWKS with RS256, its ``iss`` matches exactly, it has not
expired (small leeway), its audience holds the service's audience and it is an access token
(``typ: Bearer``, as Keycloak writes it). The result is a :class:`Principal`.

Who the caller is comes from WHICH trusted issuer verified the token, never from a claim: a
staff token is a staff token because the staff realm's key signed it. The one thing read from
claims is whether the caller is a service account (see :func:`_is_service_account`).

JWKS are cached per issuer and refetched only when a token names an unknown ``kid`` (a key
rotation), at most once per ``refetch_interval``, so a flood of tokens with made-up kids cannot
turn into a flood of requests to the identity provider. When the keys cannot be had (never
fetched, or the refresh an unknown kid needs failed), the answer is 503 ``issuer-unavailable``
with ``Retry-After``, never 401: a 401 tells a client to throw its token away. A failed refresh
keeps the last good key set (see :class:`_JwksCache`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import structlog
from fastapi import Request
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import RSAKey

from hiwallet.core.http import Forbidden, ServiceUnavailable, Unauthorized
from hiwallet.core.logging import error_fields

log = structlog.get_logger(__name__)

IssuerKind = Literal["customer", "staff"]
# What an endpoint can allow: a person from either realm, or a client acting as itself.
CallerKind = Literal["customer", "staff", "service_account"]

ALGORITHMS = ["RS256"]  # pinned: no "none", no HMAC (RFC 8725 §3.1)
MAX_TOKEN_BYTES = 16_384  # a Keycloak access token is 1-3 KiB; anything far larger is abuse
MAX_JWKS_BYTES = 65_536
VERIFIED_CACHE_SIZE = 4_096  # tokens verified lately, kept until they expire (TokenVerifier.verify)
SERVICE_ACCOUNT_PREFIX = "service-account-"


@dataclass(frozen=True)
class TrustedIssuer:
    """An issuer this service accepts. ``jwks_url`` may be an internal address while
    ``issuer_url`` is the public one the tokens carry (Keycloak's hostname pitfall)."""

    issuer_url: str
    jwks_url: str
    kind: IssuerKind
    audience: str

    @classmethod
    def keycloak(cls, base_url: str, realm: str, kind: IssuerKind, audience: str) -> TrustedIssuer:
        issuer = f"{base_url.rstrip('/')}/realms/{realm}"
        return cls(issuer, f"{issuer}/protocol/openid-connect/certs", kind, audience)


@dataclass(frozen=True)
class Principal:
    subject: str
    issuer: str
    kind: IssuerKind
    azp: str | None
    is_service_account: bool
    email: str | None
    username: str | None
    scopes: frozenset[str]
    claims: Mapping[str, Any] = field(repr=False)

    @property
    def caller(self) -> CallerKind:
        return "service_account" if self.is_service_account else self.kind


class TokenRejected(Unauthorized):
    """401 with RFC 6750's ``WWW-Authenticate`` so clients know to fetch a new token."""

    slug = "invalid-token"
    title = "The access token is not valid"

    def __init__(self, detail: str, *, reason: str = "invalid_token") -> None:
        challenge = f'Bearer error="{reason}", error_description="{detail}"'
        super().__init__(detail, headers={"WWW-Authenticate": challenge})


class TokenMissing(Unauthorized):
    slug = "token-missing"
    title = "An access token is required"

    def __init__(self) -> None:
        super().__init__(
            "send 'Authorization: Bearer <access token>'",
            headers={"WWW-Authenticate": 'Bearer realm="hiwallet"'},
        )


class TokenExpired(TokenRejected):
    slug = "token-expired"
    title = "The access token has expired"


class UntrustedIssuer(TokenRejected):
    slug = "untrusted-issuer"
    title = "The token's issuer is not trusted here"


class WrongAudience(TokenRejected):
    slug = "wrong-audience"
    title = "The token was not issued for this service"


class WrongClient(TokenRejected):
    slug = "wrong-client"
    title = "The token was issued to a client this endpoint does not accept"


class CallerNotAllowed(Forbidden):
    # The token is good; this endpoint is simply not for this kind of caller.
    slug = "caller-not-allowed"
    title = "This kind of caller may not use this endpoint"


class IssuerUnavailable(ServiceUnavailable):
    slug = "issuer-unavailable"
    title = "The identity provider's keys could not be fetched"


class _JwksCache:
    """One issuer's signing keys: the last good set, refreshed only for an unknown ``kid``.

    What a caller can be told follows from what is known. A kid in the set: its key. A kid not
    in the set, and the last fetch succeeded (at most ``refetch_interval`` ago): the issuer does
    not publish it, 401. A kid not in the set and the keys cannot be had (never fetched, or the
    last fetch failed): nobody can tell a good token from a bad one, so 503
    ``issuer-unavailable``, never 401, which would make clients throw good tokens away. A failed
    fetch never clears the set: tokens signed by known keys keep verifying while the issuer is
    down. Fetches, failed or not, are at most one per ``refetch_interval``, so a storm of
    made-up kids (or of requests during an outage) cannot hammer the issuer.
    """

    def __init__(
        self,
        issuer: TrustedIssuer,
        client: httpx.AsyncClient,
        refetch_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.client = client
        self.refetch_interval = refetch_interval
        self.clock = clock
        self.keys: dict[str, RSAKey] = {}
        self.last_fetch = float("-inf")
        self.last_fetch_ok = False
        self.lock = asyncio.Lock()

    async def key(self, kid: str) -> RSAKey | None:
        """The key named ``kid``, or None if the issuer (reached lately) does not publish it;
        raises :class:`IssuerUnavailable` if the issuer's keys cannot be had."""
        if kid in self.keys:
            return self.keys[kid]
        async with self.lock:
            # Another request may have refetched while this one waited for the lock.
            if kid not in self.keys and self.clock() - self.last_fetch >= self.refetch_interval:
                await self._fetch()
            if kid in self.keys:
                return self.keys[kid]
            if not self.last_fetch_ok:
                retry_after_s = max(1, math.ceil(self.last_fetch + self.refetch_interval - self.clock()))
                raise IssuerUnavailable(
                    "cannot fetch the issuer's signing keys; retry with the same token",
                    headers={"Retry-After": str(retry_after_s)},
                )
            return None

    async def _fetch(self) -> None:
        self.last_fetch = self.clock()
        try:
            response = await self.client.get(self.issuer.jwks_url)
            response.raise_for_status()
            if len(response.content) > MAX_JWKS_BYTES:
                raise ValueError("JWKS too large")
            keys = _signing_keys(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            self.last_fetch_ok = False
            log.warning(
                "jwks fetch failed; keeping the last good keys",
                issuer=self.issuer.issuer_url,
                kids=sorted(self.keys),
                **error_fields(exc),
            )
            return
        # Replace, not merge: a key the issuer dropped must stop verifying.
        self.keys = keys
        self.last_fetch_ok = True
        log.info("jwks fetched", issuer=self.issuer.issuer_url, kids=sorted(keys))


def _signing_keys(document: Any) -> dict[str, RSAKey]:
    """The RSA signing keys of a JWKS document. A document with none is refused (ValueError) as
    a failed fetch would be: an issuer always publishes its signing key, so an empty or
    unreadable set is a broken answer (a proxy's error page, a half-started server), and taking
    it would turn every valid token into a 401."""
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("not a JWKS document")
    keys: dict[str, RSAKey] = {}
    for entry in entries:
        # Only RSA signing keys; an "enc" key or an EC key is not for us.
        if (
            not isinstance(entry, dict)
            or entry.get("kty") != "RSA"
            or entry.get("use", "sig") != "sig"
            or not isinstance(entry.get("kid"), str)
        ):
            continue
        try:
            keys[entry["kid"]] = RSAKey.import_key(entry)
        except (JoseError, ValueError, TypeError) as exc:
            log.warning("jwks entry skipped", kid=entry["kid"], **error_fields(exc))
    if not keys:
        raise ValueError("the JWKS holds no RSA signing key")
    return keys


class TokenVerifier:
    def __init__(
        self,
        issuers: Sequence[TrustedIssuer],
        *,
        leeway_seconds: int = 30,
        refetch_interval_seconds: float = 5.0,
        http_client: httpx.AsyncClient | None = None,
        timeout_seconds: float = 3.0,
        cache_size: int = VERIFIED_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` (monotonic seconds) paces the JWKS refetches; ``wall_clock`` (epoch
        seconds) is what a token's exp, iat and nbf are checked against. Tests pass their own,
        to move time rather than wait for it."""
        if not issuers:
            raise ValueError("a verifier needs at least one trusted issuer")
        self._own_client = http_client is None
        self.client = http_client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds, connect=min(2.0, timeout_seconds)),
            follow_redirects=False,
        )
        self.leeway = leeway_seconds
        self._wall_clock = wall_clock
        self._issuers = {i.issuer_url: i for i in issuers}
        self._caches = {
            i.issuer_url: _JwksCache(i, self.client, refetch_interval_seconds, clock) for i in issuers
        }
        # token -> (principal, exp, issuer, kid). A client sends one access token with every
        # request until it expires; verifying its RS256 signature and parsing it each time was
        # a fifth of wallet-api's CPU per transfer (bench/). The key is the whole token,
        # signature included, so only the very bytes that verified can hit.
        self._verified: dict[str, tuple[Principal, float, str, str]] = {}
        self._cache_size = cache_size

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def verify(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected("the token is too large")
        hit = self._verified.get(token)
        if hit is not None:
            principal, exp, issuer_url, signed_by = hit
            # Still valid only while unexpired and while its issuer still publishes its key (a
            # key the issuer dropped stops verifying at the next JWKS fetch, cached or not).
            if exp > self._wall_clock() - self.leeway and signed_by in self._caches[issuer_url].keys:
                return principal
            del self._verified[token]  # and verify it in full, for the precise refusal
        header, unverified = _peek(token)
        if header.get("alg") not in ALGORITHMS:
            raise TokenRejected(f"algorithm {header.get('alg')!r} is not accepted; use RS256")
        # The unverified iss only chooses which keys to try; the signature then proves it.
        issuer = self._issuers.get(str(unverified.get("iss")))
        if issuer is None:
            raise UntrustedIssuer("the token's issuer is not trusted by this service")
        # A refusal needs no proof: a token that is expired, not an access token or not for us
        # is refused before any key is looked at, so it is 401 even while the issuer's keys
        # cannot be had (503 is only for tokens that might be good). Once the signature
        # verifies, the same claims are checked again, verified.
        self._check_claims(unverified, issuer)
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise TokenRejected("the token names no signing key")
        key = await self._caches[issuer.issuer_url].key(kid)  # raises IssuerUnavailable (503)
        if key is None:
            raise TokenRejected("the token is signed with a key the issuer does not publish")
        try:
            claims = jwt.decode(token, key, algorithms=ALGORITHMS).claims
        except JoseError as exc:
            raise TokenRejected("the token's signature is not valid") from exc
        self._check_claims(claims, issuer)
        principal = _principal(claims, issuer)
        if self._cache_size > 0:
            while len(self._verified) >= self._cache_size:
                del self._verified[next(iter(self._verified))]  # the oldest first
            self._verified[token] = (principal, float(claims["exp"]), issuer.issuer_url, str(kid))
        return principal

    def _check_claims(self, claims: Mapping[str, Any], issuer: TrustedIssuer) -> None:
        now = self._wall_clock()
        if claims.get("iss") != issuer.issuer_url:
            raise UntrustedIssuer("the token's issuer does not match")
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenRejected("the token has no expiry")
        if exp <= now - self.leeway:
            raise TokenExpired("the token has expired")
        for name in ("iat", "nbf"):
            value = claims.get(name)
            if isinstance(value, int | float) and value > now + self.leeway:
                raise TokenRejected(f"the token is not valid yet ({name} is in the future)")
        # Keycloak marks access tokens typ=Bearer; ID and refresh tokens must not open doors.
        if claims.get("typ") != "Bearer":
            raise TokenRejected("the token is not an access token")
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if issuer.audience not in audiences:
            raise WrongAudience(f"the token's audience does not include {issuer.audience!r}")
        if not isinstance(claims.get("sub"), str):
            raise TokenRejected("the token has no subject")


def _peek(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of a compact JWS, NOT verified."""
    try:
        compact = jws.extract_compact(token.encode("ascii"))
        claims = json.loads(compact.payload)
    except (JoseError, ValueError, UnicodeError) as exc:
        raise TokenRejected("the token is not a well-formed JWT") from exc
    if not isinstance(claims, dict):
        raise TokenRejected("the token is not a well-formed JWT")
    return dict(compact.headers()), claims


def _is_service_account(claims: Mapping[str, Any]) -> bool:
    """Keycloak's rule: a client-credentials token names the client in ``azp`` and its user
    ``service-account-<clientId>``. Both must agree; the identity service refuses to create a
    user whose name starts with ``service-account-``, so a person cannot pose as one."""
    azp = claims.get("azp")
    username = claims.get("preferred_username")
    return isinstance(azp, str) and username == SERVICE_ACCOUNT_PREFIX + azp


def _principal(claims: Mapping[str, Any], issuer: TrustedIssuer) -> Principal:
    scope = claims.get("scope")
    azp = claims.get("azp")
    email = claims.get("email")
    username = claims.get("preferred_username")
    return Principal(
        subject=str(claims["sub"]),
        issuer=issuer.issuer_url,
        kind=issuer.kind,
        azp=azp if isinstance(azp, str) else None,
        is_service_account=_is_service_account(claims),
        email=email if isinstance(email, str) else None,
        username=username if isinstance(username, str) else None,
        scopes=frozenset(scope.split()) if isinstance(scope, str) else frozenset(),
        claims=dict(claims),
    )


def bearer_token(request: Request) -> str:
    # The first Authorization header, as ``request.headers.get`` finds it, read from the scope:
    # without building the request's Headers (on every authenticated request).
    header = ""
    for name, value in request.scope["headers"]:
        if name == b"authorization":
            header = value.decode("latin-1")
            break
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise TokenMissing()
    return token.strip()


def require_principal(
    verifier: TokenVerifier | Callable[[], TokenVerifier],
    *,
    azp: Collection[str] | None = None,
    kinds: Collection[CallerKind] = frozenset({"customer"}),
) -> Callable[[Request], Coroutine[Any, Any, Principal]]:
    """A FastAPI dependency: the verified caller, or 401 problem+json.

    ``kinds`` defaults to customers only: an endpoint is closed to staff and to service accounts
    unless it says otherwise (the platform's default policy: docs/architecture.md). ``azp``, when given,
    lists the clients whose tokens this endpoint accepts. ``verifier`` may be a callable so an app
    can build its verifier in its lifespan.
    """
    allowed_azp = frozenset(azp) if azp is not None else None
    allowed_kinds = frozenset(kinds)

    async def dependency(request: Request) -> Principal:
        active = verifier if isinstance(verifier, TokenVerifier) else verifier()
        principal = await active.verify(bearer_token(request))
        if allowed_azp is not None and principal.azp not in allowed_azp:
            raise WrongClient("the token was issued to a client this endpoint does not accept")
        if principal.caller not in allowed_kinds:
            raise CallerNotAllowed(f"a {principal.caller} may not call this endpoint")
        return principal

    return dependency

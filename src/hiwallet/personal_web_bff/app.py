"""personal-web-bff, declared: the customers' web app, pages rendered here in Turkish and
English (core.pages), the person signed in by this BFF's confidential client (core.bff: the
tokens stay here, the browser holds a sealed cookie), the internal services called with the
session's access token (:mod:`.upstream`). No database, no broker; no script on any page.

Routes only translate: a form's fields to an internal service's request, its answer to a page."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import httpx
import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from schwifty import IBAN
from schwifty.exceptions import SchwiftyException

from hiwallet.contracts.public import WALLET_ID_PATTERN, WALLET_NUMBER_PATTERN, WITHDRAWAL_ID_PATTERN
from hiwallet.core.bff import (
    BffSessions,
    CsrfRefused,
    ErrorPage,
    OidcClient,
    OidcClientConfig,
    Sealer,
    SecurityHeaders,
    Session,
    content_security_policy,
    is_local_http,
    parse_key_ring,
    safe_return_path,
)
from hiwallet.core.bff.session import SessionCookieWriter
from hiwallet.core.http import ProblemError, serve, settle_heap_once_started
from hiwallet.core.http.client import AiohttpTransport
from hiwallet.core.logging import configure_logging
from hiwallet.core.pages import LOCALE_COOKIE, LOCALES, Pages
from hiwallet.core.service import Runtime, ServiceSpec, build_app
from hiwallet.core.settings import InsecureSettings, Settings, get_settings, refuse_insecure_start
from hiwallet.personal_web_bff.settings import PersonalWebBffSettings, get_personal_web_bff_settings
from hiwallet.personal_web_bff.upstream import Refused, ServiceAway, SignInAgain, Upstream

__all__ = [
    "SERVICE",
    "checked_iban",
    "create_personal_web_bff_app",
    "minor_units",
    "refuse_plain_http",
    "run_personal_web_bff",
    "service_spec",
]

SERVICE = "personal-web-bff"
HERE = Path(__file__).parent
LOCALE_COOKIE_MAX_AGE_S = 365 * 24 * 3600
# The home page's chart: the cash at the end of each of these last days.
CHART_DAYS = 30
# Connections to the internal services, kept alive between pages.
UPSTREAM_CONNECTIONS = 64
# Amounts as people type them: "12", "12,5", "1.234,56" is refused (ambiguous); at most 2 decimals.
_AMOUNT = re.compile(r"^[0-9]{1,12}([.,][0-9]{1,2})?$")
_WALLET_NUMBER = re.compile(WALLET_NUMBER_PATTERN)
_WALLET_ID = re.compile(WALLET_ID_PATTERN)
_CURSOR = re.compile(r"^[0-9]{1,18}$")
_REFERENCE_MAX = 140

log = structlog.get_logger(__name__)


class Web:
    """What the routes share: the sessions, the pages, the internal services."""

    def __init__(self, settings: PersonalWebBffSettings, http: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        public = settings.public_url.rstrip("/")
        self.sessions = BffSessions(
            sealer=Sealer(parse_key_ring(settings.session_keys.get_secret_value())),
            oidc=OidcClient(
                OidcClientConfig(
                    settings.issuer,
                    settings.client_id,
                    settings.client_secret,
                    f"{public}/auth/callback",
                    timeout_s=settings.identity_timeout_s,
                )
            ),
            public_url=public,
        )
        self.pages = Pages(
            HERE / "templates", HERE / "locale", globals={"bank_iban": IBAN(settings.bank_iban).formatted}
        )
        # httpx's API over aiohttp's pool (core.http.AiohttpTransport): a page makes three or
        # more calls, and httpx's own pool costs several times the CPU a call (bench/bff_bench.py).
        self.http = http or httpx.AsyncClient(
            transport=AiohttpTransport(max_connections=UPSTREAM_CONNECTIONS),
            timeout=settings.upstream_timeout_s,
            follow_redirects=False,
            trust_env=False,
        )
        self.wallet = Upstream("wallet-api", settings.wallet_api_url, self.http)
        self.withdrawals = Upstream("withdrawal-orchestrator", settings.withdrawals_url, self.http)
        self.onboarding = Upstream("onboarding", settings.onboarding_url, self.http)
        self.stripe = Upstream("the card provider", settings.stripe_url, self.http)

    def render(
        self,
        request: Request,
        template: str,
        session: Session | None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        **context: Any,
    ) -> Response:
        return self.pages.render(
            request,
            template,
            {
                "session": session,
                "csrf": session.csrf if session else "",
                "path": request.url.path,
                **context,
            },
            status=status,
            headers=headers,
        )

    async def form(self, request: Request, session: Session | None) -> dict[str, str]:
        """A POST's fields, after the CSRF check (this site's Origin and, signed in, the token)."""
        raw = await request.form()
        fields = {k: v for k, v in raw.items() if isinstance(v, str)}
        if session is not None:
            self.sessions.check_csrf(request, session, fields.get("csrf"))
        else:
            origin = request.headers.get("origin") or ""
            if origin != self.sessions.origin:
                raise CsrfRefused("the request did not come from this site")
        return fields


def _dated(item: dict[str, Any], *names: str) -> dict[str, Any]:
    """``item`` with its ISO 8601 times as datetimes (the pages write them in Istanbul's time)."""
    return {**item, **{n: datetime.fromisoformat(item[n]) for n in names if isinstance(item.get(n), str)}}


def web_of(request: Request) -> Web:
    web: Web = request.app.state.web
    return web


def minor_units(text: str) -> int | None:
    """``"12,50"`` -> 1250; None when it is no amount of at most 2 decimals, or not positive."""
    text = text.strip()
    if not _AMOUNT.match(text):
        return None
    try:
        amount = int(Decimal(text.replace(",", ".")) * 100)
    except InvalidOperation:
        return None
    return amount if amount > 0 else None


router = APIRouter()


@router.get("/login", include_in_schema=False)
async def login(request: Request) -> Response:
    web = web_of(request)
    return web.sessions.begin_login(request.query_params.get("next"), locale=web.pages.locale_of(request))


@router.get("/auth/callback", include_in_schema=False)
async def callback(request: Request) -> Response:
    return await web_of(request).sessions.finish_login(request)


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    web = web_of(request)
    session = await web.sessions.current(request)
    await web.form(request, session)
    if session is None:
        return RedirectResponse("/", status_code=303)
    return await web.sessions.logout(request, then="/signed-out")


@router.get("/signed-out", include_in_schema=False)
async def signed_out(request: Request) -> Response:
    return web_of(request).render(request, "signed_out.html", None)


@router.post("/locale", include_in_schema=False)
async def choose_locale(request: Request) -> Response:
    """The language switch: remembered in a cookie for a year (no personal data in it)."""
    web = web_of(request)
    session = await web.sessions.current(request)
    fields = await web.form(request, session)
    chosen = fields.get("locale", "")
    response = RedirectResponse(safe_return_path(fields.get("next")), status_code=303)
    if chosen in LOCALES:
        response.set_cookie(
            LOCALE_COOKIE,
            chosen,
            max_age=LOCALE_COOKIE_MAX_AGE_S,
            path="/",
            secure=web.sessions.cookies.secure,
            httponly=True,
            samesite="lax",
        )
    return response


async def _signed_in(request: Request) -> Session | Response:
    session = await web_of(request).sessions.current(request)
    if session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={safe_return_path(target)}", status_code=303)
    return session


def balance_chart(balances: list[int], *, width: int = 300, height: int = 80) -> dict[str, Any] | None:
    """The points of a line chart of ``balances`` (one a day, oldest first), drawn by the page as
    an SVG polyline: no script, no image request. None without two days to join."""
    if len(balances) < 2:
        return None
    pad = 4
    top = max(max(balances), 1)
    step = (width - 2 * pad) / (len(balances) - 1)
    points = " ".join(
        f"{pad + i * step:.1f},{height - pad - (b / top) * (height - 2 * pad):.1f}"
        for i, b in enumerate(balances)
    )
    return {
        "points": points,
        "width": width,
        "height": height,
        "days": len(balances),
        "first": balances[0],
        "last": balances[-1],
        "top": max(balances),
    }


async def _own_wallets(web: Web, session: Session) -> list[dict[str, Any]]:
    """The person's wallets with their balances (personal accounts only)."""
    accounts = await web.wallet.call("GET", "/v1/accounts", session.access_token)

    async def one(account: dict[str, Any], wallet_id: str) -> dict[str, Any]:
        # The balance, the live promo batches and the chart's days in one call (wallet-api's
        # overview): each call costs both services far more CPU than its data (bench/bff_bench.py).
        wallet = await web.wallet.call(
            "GET", f"/v1/wallets/{wallet_id}/overview", session.access_token, params={"days": CHART_DAYS}
        )
        batches = [_dated(b, "expires_at") for b in wallet.pop("batches", [])]
        chart = balance_chart([d["balance"] for d in wallet.pop("days", [])])
        return {**wallet, "tier": account.get("tier"), "promos": batches, "chart": chart}

    # A person has a handful of wallets: all asked at once, in the accounts' order.
    return list(
        await asyncio.gather(
            *(
                one(account, ref["id"])
                for account in accounts.get("accounts", [])
                if account.get("kind") == "personal"
                for ref in account.get("wallets", [])
            )
        )
    )


@router.get("/", include_in_schema=False)
async def home(request: Request) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    wallets = await _own_wallets(web, session)
    return web.render(request, "home.html", session, wallets=wallets)


@router.get("/wallets/{wallet_id}/movements", include_in_schema=False)
async def movements(request: Request, wallet_id: str) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    if not _WALLET_ID.match(wallet_id):
        return web.render(request, "error.html", session, status=404, kind="not-found")
    params: dict[str, Any] = {"limit": web.settings.statement_page_size}
    cursor = request.query_params.get("cursor")
    if cursor and _CURSOR.match(cursor):
        params["cursor"] = cursor
    try:
        wallet = await web.wallet.call("GET", f"/v1/wallets/{wallet_id}", session.access_token)
        statement = await web.wallet.call(
            "GET", f"/v1/wallets/{wallet_id}/statement", session.access_token, params=params
        )
    except Refused as refused:
        if refused.status in (403, 404):
            return web.render(request, "error.html", session, status=404, kind="not-found")
        raise
    return web.render(
        request,
        "movements.html",
        session,
        wallet=wallet,
        lines=[_dated(line, "posted_at") for line in statement["lines"]],
        next_cursor=statement.get("next_cursor"),
    )


# -- send money --------------------------------------------------------------------------------


def _send_form(fields: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The form's fields checked here (wallet-api checks them again): the values and the errors."""
    errors: list[str] = []
    number = fields.get("to", "").replace(" ", "")
    if not _WALLET_NUMBER.match(number):
        errors.append("to")
    amount = minor_units(fields.get("amount", ""))
    if amount is None:
        errors.append("amount")
    reference = fields.get("reference", "").strip()
    if len(reference) > _REFERENCE_MAX:
        errors.append("reference")
    key = fields.get("key", "")
    try:
        uuid.UUID(key)
    except ValueError:
        errors.append("key")
    wallet = fields.get("from", "")
    if not _WALLET_ID.match(wallet):
        errors.append("from")
    return {
        "to": number,
        "amount": amount,
        "amount_text": fields.get("amount", ""),
        "reference": reference,
        "key": key,
        "from": wallet,
    }, errors


@router.get("/send", include_in_schema=False)
async def send_form(request: Request) -> Response:
    """The form, with its own Idempotency-Key: whatever happens to the submits of this form
    (a double click, the back button and submit again), the money moves once."""
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    wallets = await _own_wallets(web, session)
    values = {"to": "", "amount_text": "", "reference": "", "key": str(uuid.uuid4())}
    return web.render(request, "send.html", session, wallets=wallets, values=values, errors=[], refused=None)


@router.post("/send/review", include_in_schema=False)
async def send_review(request: Request) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    values, errors = _send_form(await web.form(request, session))
    wallets = await _own_wallets(web, session)
    if errors or not any(w["id"] == values["from"] for w in wallets):
        return web.render(
            request,
            "send.html",
            session,
            status=422,
            wallets=wallets,
            values=values,
            errors=errors or ["from"],
            refused=None,
        )
    wallet = next(w for w in wallets if w["id"] == values["from"])
    return web.render(request, "send_review.html", session, values=values, wallet=wallet)


@router.post("/send/confirm", include_in_schema=False)
async def send_confirm(request: Request) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    values, errors = _send_form(await web.form(request, session))
    if errors:
        wallets = await _own_wallets(web, session)
        return web.render(
            request,
            "send.html",
            session,
            status=422,
            wallets=wallets,
            values=values,
            errors=errors,
            refused=None,
        )
    body: dict[str, Any] = {
        "from_wallet": values["from"],
        "to_wallet_number": values["to"],
        "amount": values["amount"],
    }
    if values["reference"]:
        body["reference"] = values["reference"]
    try:
        transfer = await web.wallet.call(
            "POST",
            "/v1/transfers",
            session.access_token,
            json=body,
            headers={"Idempotency-Key": values["key"]},
        )
    except Refused as refused:
        wallets = await _own_wallets(web, session)
        return web.render(
            request,
            "send.html",
            session,
            status=422,
            wallets=wallets,
            values=values,
            errors=[],
            refused=refused.slug,
        )
    wallet = await web.wallet.call("GET", f"/v1/wallets/{values['from']}", session.access_token)
    return web.render(request, "send_done.html", session, transfer=transfer, wallet=wallet, to=values["to"])


# -- top up by card ------------------------------------------------------------------------------

_SESSION_ID = re.compile(r"^cs_[A-Za-z0-9_]{1,200}$")
TOPUP_REFRESH_S = 2


@router.get("/topup", include_in_schema=False)
async def topup_form(request: Request) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    wallets = await _own_wallets(web, session)
    values = {"amount_text": "", "from": request.query_params.get("from", "")}
    return web.render(request, "topup.html", session, wallets=wallets, values=values, errors=[])


@router.post("/topup", include_in_schema=False)
async def topup_start(request: Request) -> Response:
    """A Checkout Session at the card provider for this wallet; the person pays on its page
    (the card never passes here) and comes back to /topup/done."""
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    fields = await web.form(request, session)
    wallets = await _own_wallets(web, session)
    wallet = next((w for w in wallets if w["id"] == fields.get("from")), None)
    amount = minor_units(fields.get("amount", ""))
    if wallet is None or amount is None:
        values = {"amount_text": fields.get("amount", ""), "from": fields.get("from", "")}
        errors = ["amount"] if amount is None else ["from"]
        return web.render(
            request, "topup.html", session, status=422, wallets=wallets, values=values, errors=errors
        )
    public = web.settings.public_url.rstrip("/")
    checkout = await web.stripe.call(
        "POST",
        "/v1/checkout/sessions",
        web.settings.stripe_api_key.get_secret_value(),
        data={
            "mode": "payment",
            "client_reference_id": wallet["id"],
            "success_url": f"{public}/topup/done?session={{CHECKOUT_SESSION_ID}}",
            "cancel_url": f"{public}/topup/cancelled",
            "line_items[0][quantity]": "1",
            "line_items[0][price_data][currency]": str(wallet["currency"]).lower(),
            "line_items[0][price_data][unit_amount]": str(amount),
            "line_items[0][price_data][product_data][name]": "HiWallet",
        },
    )
    return RedirectResponse(str(checkout["url"]), status_code=303)


async def _credited(web: Web, session: Session, wallet_id: str, reference: str) -> bool:
    """Whether the wallet's movements hold the payment (its reference is the PaymentIntent)."""
    cursor: str | None = None
    for _ in range(web.settings.topup_search_pages):
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["cursor"] = cursor
        page = await web.wallet.call(
            "GET", f"/v1/wallets/{wallet_id}/statement", session.access_token, params=params
        )
        if any(line.get("reference") == reference for line in page["lines"]):
            return True
        cursor = page.get("next_cursor")
        if not cursor:
            return False
    return False


@router.get("/topup/done", include_in_schema=False)
async def topup_done(request: Request) -> Response:
    """Back from the card provider: paid there, then credited here once its webhook went through
    topup-webhook and wallet-consumer; until then the page refreshes itself (no script)."""
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    checkout_id = request.query_params.get("session", "")
    if not _SESSION_ID.match(checkout_id):
        return web.render(request, "error.html", session, status=404, kind="not-found")
    try:
        checkout = await web.stripe.call(
            "GET", f"/v1/checkout/sessions/{checkout_id}", web.settings.stripe_api_key.get_secret_value()
        )
    except Refused:
        return web.render(request, "error.html", session, status=404, kind="not-found")
    wallets = {w["id"]: w for w in await _own_wallets(web, session)}
    wallet = wallets.get(str(checkout.get("client_reference_id")))
    if wallet is None:  # another person's checkout: nothing to show
        return web.render(request, "error.html", session, status=404, kind="not-found")
    paid = checkout.get("payment_status") == "paid"
    intent = checkout.get("payment_intent")
    credited = paid and isinstance(intent, str) and await _credited(web, session, wallet["id"], intent)
    if credited:
        wallet = await web.wallet.call("GET", f"/v1/wallets/{wallet['id']}", session.access_token)
    return web.render(
        request,
        "topup_done.html",
        session,
        wallet=wallet,
        paid=paid,
        credited=credited,
        amount=int(checkout.get("amount_total") or 0),
        refresh_s=None if credited or not paid else TOPUP_REFRESH_S,
    )


@router.get("/topup/cancelled", include_in_schema=False)
async def topup_cancelled(request: Request) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    return web.render(request, "topup_cancelled.html", session)


# -- withdraw to a bank account ------------------------------------------------------------------

_WITHDRAWAL_ID = re.compile(WITHDRAWAL_ID_PATTERN)
# The saga's states a person reads, and those after which nothing changes (the orchestrator's).
_WITHDRAWAL_ENDED = frozenset({"rejected", "completed", "failed", "cancelled"})
WITHDRAWAL_REFRESH_S = 2


def checked_iban(text: str) -> str | None:
    """The IBAN in its compact form when it is one (country, length, check digits, bank code:
    schwifty), else None: a typo is told on the form, before anything is sent."""
    try:
        return str(IBAN(text.strip()).compact)
    except SchwiftyException:
        return None


@router.get("/withdraw", include_in_schema=False)
async def withdraw_form(request: Request) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    wallets = await _own_wallets(web, session)
    values = {
        "amount_text": "",
        "iban": "",
        "key": str(uuid.uuid4()),
        "from": request.query_params.get("from", ""),
    }
    return web.render(
        request, "withdraw.html", session, wallets=wallets, values=values, errors=[], refused=None
    )


@router.post("/withdraw", include_in_schema=False)
async def withdraw(request: Request) -> Response:
    """The saga started at the orchestrator with the form's Idempotency-Key (a second submit of
    the same form answers the same withdrawal), then its status page."""
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    fields = await web.form(request, session)
    wallets = await _own_wallets(web, session)
    wallet = next((w for w in wallets if w["id"] == fields.get("from")), None)
    amount = minor_units(fields.get("amount", ""))
    iban = checked_iban(fields.get("iban", ""))
    key = fields.get("key", "")
    values = {
        "amount_text": fields.get("amount", ""),
        "iban": fields.get("iban", ""),
        "key": key,
        "from": fields.get("from", ""),
    }
    errors = [
        name
        for name, bad in (("from", wallet is None), ("amount", amount is None), ("iban", iban is None))
        if bad
    ]
    try:
        uuid.UUID(key)
    except ValueError:
        errors.append("key")
    if errors or wallet is None:
        return web.render(
            request,
            "withdraw.html",
            session,
            status=422,
            wallets=wallets,
            values=values,
            errors=errors,
            refused=None,
        )
    try:
        started = await web.withdrawals.call(
            "POST",
            "/v1/withdrawals",
            session.access_token,
            json={
                "wallet": wallet["id"],
                "amount_minor": amount,
                "currency": wallet["currency"],
                "destination_iban": iban,
            },
            headers={"Idempotency-Key": key},
        )
    except Refused as refused:
        return web.render(
            request,
            "withdraw.html",
            session,
            status=422,
            wallets=wallets,
            values=values,
            errors=[],
            refused=refused.slug,
        )
    return RedirectResponse(f"/withdrawals/{started['id']}", status_code=303)


@router.get("/withdrawals/{withdrawal_id}", include_in_schema=False)
async def withdrawal_status(request: Request, withdrawal_id: str) -> Response:
    """The saga as it goes; the page refreshes itself until it has ended."""
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    if not _WITHDRAWAL_ID.match(withdrawal_id):
        return web.render(request, "error.html", session, status=404, kind="not-found")
    try:
        withdrawal = await web.withdrawals.call(
            "GET", f"/v1/withdrawals/{withdrawal_id}", session.access_token
        )
    except Refused as refused:
        if refused.status in (403, 404):
            return web.render(request, "error.html", session, status=404, kind="not-found")
        raise
    ended = withdrawal.get("state") in _WITHDRAWAL_ENDED
    return web.render(
        request,
        "withdrawal.html",
        session,
        withdrawal=withdrawal,
        ended=ended,
        refresh_s=None if ended else WITHDRAWAL_REFRESH_S,
    )


# -- registration and verification ---------------------------------------------------------------

_REGISTRATION_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_CODE = re.compile(r"^[0-9]{6}$")
_EMAIL_MAX = 254
_DOCUMENTS = ("user_agreement", "privacy_notice")


@router.get("/register", include_in_schema=False)
async def register_form(request: Request) -> Response:
    web = web_of(request)
    return web.render(request, "register.html", None, step="email", values={}, refused=None)


@router.post("/register", include_in_schema=False)
async def register(request: Request) -> Response:
    """Before any session: the form is checked by its Origin (there is no session's token yet)."""
    web = web_of(request)
    fields = await web.form(request, None)
    email = fields.get("email", "").strip()
    if not email or len(email) > _EMAIL_MAX or "@" not in email:
        return web.render(
            request, "register.html", None, status=422, step="email", values={}, refused="email"
        )
    try:
        started = await web.onboarding.call("POST", "/v1/registrations", None, json={"email": email})
    except Refused as refused:
        return web.render(
            request, "register.html", None, status=422, step="email", values={}, refused=refused.slug
        )
    return web.render(
        request,
        "register.html",
        None,
        step="code",
        values={"registration": started["registration_id"]},
        refused=None,
    )


@router.post("/register/complete", include_in_schema=False)
async def register_complete(request: Request) -> Response:
    """The mailed code and the password: the address verified, the user created; then sign in."""
    web = web_of(request)
    fields = await web.form(request, None)
    registration = fields.get("registration", "")
    code = fields.get("code", "").strip()
    values = {"registration": registration}
    if not _REGISTRATION_ID.match(registration):
        return web.render(
            request, "register.html", None, status=422, step="email", values={}, refused="expired"
        )
    if not _CODE.match(code):
        return web.render(
            request, "register.html", None, status=422, step="code", values=values, refused="code-invalid"
        )
    try:
        await web.onboarding.call(
            "POST", f"/v1/registrations/{registration}/verify", None, json={"code": code}
        )
    except Refused as refused:
        if refused.slug != "code-used":  # verified before (a second submit): go on to the password
            return web.render(
                request, "register.html", None, status=422, step="code", values=values, refused=refused.slug
            )
    try:
        await web.onboarding.call(
            "POST",
            f"/v1/registrations/{registration}/complete",
            None,
            json={"password": fields.get("password", "")},
        )
    except Refused as refused:
        return web.render(
            request, "register.html", None, status=422, step="code", values=values, refused=refused.slug
        )
    return RedirectResponse("/login?next=/verify", status_code=303)


async def _verification(web: Web, session: Session) -> dict[str, Any]:
    me = await web.onboarding.call("GET", "/v1/me", session.access_token)
    limits: list[dict[str, Any]] = []
    if me.get("account_id"):
        answer = await web.wallet.call("GET", f"/v1/accounts/{me['account_id']}/limits", session.access_token)
        limits = answer.get("limits", [])
    accepted = {c["document"] for c in me.get("consents", [])}
    return {"me": me, "limits": limits, "missing_documents": [d for d in _DOCUMENTS if d not in accepted]}


@router.get("/verify", include_in_schema=False)
async def verify_page(request: Request) -> Response:
    """What is verified, what remains, what the tier allows this month."""
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    try:
        state = await _verification(web, session)
    except Refused as refused:
        if refused.status in (403, 404):  # a customer who did not register here (the demo's)
            return web.render(request, "verify_none.html", session)
        raise
    return web.render(
        request,
        "verify.html",
        session,
        phone_sent=False,
        refused=None,
        version=web.settings.consent_version,
        **state,
    )


@router.post("/verify/{step}", include_in_schema=False)
async def verify_step(request: Request, step: str) -> Response:
    web = web_of(request)
    session = await _signed_in(request)
    if isinstance(session, Response):
        return session
    fields = await web.form(request, session)
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "phone": ("/v1/me/phone", {"phone": fields.get("phone", "").strip()}),
        "phone-code": ("/v1/me/phone/verify", {"code": fields.get("code", "").strip()}),
        "identity": (
            "/v1/me/identity",
            {k: fields.get(k, "").strip() for k in ("tckn", "given_name", "family_name", "birth_date")},
        ),
        "consent": (
            "/v1/me/consents",
            {"document": fields.get("document", ""), "version": fields.get("version", "")},
        ),
    }
    if step not in calls:
        return web.render(request, "error.html", session, status=404, kind="not-found")
    path, body = calls[step]
    refused: str | None = None
    try:
        await web.onboarding.call("POST", path, session.access_token, json=body)
    except Refused as exc:
        refused = exc.slug
    state = await _verification(web, session)
    return web.render(
        request,
        "verify.html",
        session,
        status=422 if refused else 200,
        phone_sent=step == "phone" and refused is None,
        refused=refused,
        version=web.settings.consent_version,
        **state,
    )


# -- the app -------------------------------------------------------------------------------------


async def _session_for_error(request: Request) -> Session | None:
    """The session, so an error page keeps its language switch and sign-out; none when finding
    it fails too (the identity provider away while refreshing)."""
    try:
        return await web_of(request).sessions.current(request)
    except ProblemError:
        return None


async def _on_problem(request: Request, exc: Exception) -> Response:
    web = web_of(request)
    session = await _session_for_error(request)
    if isinstance(exc, ServiceAway):
        return web.render(
            request, "error.html", session, status=503, headers=exc.headers, kind="away", service=exc.service
        )
    if not isinstance(exc, ProblemError):  # registered for ServiceAway and ProblemError only
        raise exc
    kind = {403: "forbidden", 401: "sign-in", 404: "not-found", 503: "sign-in-away"}.get(exc.status, "other")
    return web.render(request, "error.html", session, status=exc.status, headers=exc.headers, kind=kind)


async def _on_sign_in_again(request: Request, exc: Exception) -> Response:
    return RedirectResponse("/login?next=/", status_code=303)


async def _on_refused(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, Refused):  # registered for Refused only
        raise exc
    log.warning("upstream refused", status=exc.status, problem=exc.slug)
    return web_of(request).render(
        request, "error.html", await _session_for_error(request), status=400, kind="other"
    )


async def _unexpected_page(request: Request) -> Response:
    # No session lookup: what failed may be what it needs. The language is the cookie's.
    return web_of(request).render(request, "error.html", None, status=500, kind="other")


def service_spec(web: Web) -> ServiceSpec:
    async def setup(rt: Runtime) -> None:
        rt.app.state.web = web
        rt.closers.append(web.http.aclose)
        rt.closers.append(web.sessions.oidc.aclose)

    return ServiceSpec(SERVICE, setup, routers=[router], max_body_bytes=64_000)


def create_personal_web_bff_app(settings: PersonalWebBffSettings | None = None) -> FastAPI:
    settings = settings or get_personal_web_bff_settings()
    web = Web(settings)
    app = build_app(service_spec(web))
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(SignInAgain, _on_sign_in_again)
    app.add_exception_handler(Refused, _on_refused)
    # An unexpected error: the error page (500), inside the security headers (added after it).
    app.add_middleware(ErrorPage, render=_unexpected_page)
    idp_origin = settings.issuer.split("/realms/")[0]
    # form-action also binds a form's redirects: the top-up form ends at the card provider's page.
    stripe_origin = settings.stripe_url.rstrip("/")
    app.add_middleware(
        SecurityHeaders,
        csp=content_security_policy([idp_origin, stripe_origin]),
        hsts=not is_local_http(settings.public_url),
    )
    app.add_middleware(SessionCookieWriter, sessions=web.sessions)
    return app


def refuse_plain_http(settings: PersonalWebBffSettings, core: Settings) -> None:
    """A deployment serves the pages over https only: its cookies are then ``__Host-`` and
    ``Secure`` (core.bff drops both for plain http on loopback, the laptop's exception)."""
    if core.production and not settings.public_url.startswith("https://"):
        raise InsecureSettings("HIWALLET_PERSONAL_WEB_BFF_PUBLIC_URL must be https:// in production")


def run_personal_web_bff(port: int | None, host: str) -> None:
    """Serve personal-web-bff (the process entry point)."""
    configure_logging(SERVICE)
    settings = get_personal_web_bff_settings()
    refuse_insecure_start(settings)
    refuse_plain_http(settings, get_settings())
    serve(
        settle_heap_once_started(create_personal_web_bff_app(settings)), host=host, port=port or settings.port
    )

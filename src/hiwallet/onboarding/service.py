"""onboarding's work: registration (docs/onboarding.md has its state diagram) and basic
verification, and the tier they lead to.

Registration is resumable step by step: each step's result is committed before the next
begins, so a retry of ``complete`` after a crash anywhere finds what was done and does the
rest. The claim on the address (a customers row, unique by the address's keyed hash) comes
before the user is created: only the claim's holder creates a user for that address, so two
registrations of one address at once make one user, and a user found by its e-mail after a
409 is adopted only if it was created after this registration's claim.

Personal data passes through here in plaintext only on its way to being sealed (the key ring)
or hashed (the keyed hash); nothing here logs it."""

from __future__ import annotations

import hmac
import os
import re
import secrets
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlencode

import asyncpg
import structlog
from stdnum.tr import tckimlik

from hiwallet.core.http import ProblemError
from hiwallet.core.ids import new_id
from hiwallet.core.jobs import in_batches
from hiwallet.core.settings import get_settings
from hiwallet.core.uow import in_transaction
from hiwallet.onboarding import errors
from hiwallet.onboarding.clients import (
    DependencyUnavailable,
    FoundUser,
    IdentityAdmin,
    InvalidPassword,
    Sms,
    UserExists,
    WalletApi,
)
from hiwallet.onboarding.crypto import Hasher, KeyRing, normalize_email, place
from hiwallet.onboarding.mail import Mailer
from hiwallet.onboarding.metrics import OnboardingMetrics
from hiwallet.onboarding.registry import Registry
from hiwallet.onboarding.settings import OnboardingSettings
from hiwallet.onboarding.store import TIERS, Q, rank, record_tier

log = structlog.get_logger(__name__)
T = TypeVar("T")

FAULT_ENV = "HIWALLET_ONBOARDING_FAULT_AFTER_USER_CREATED"
DOCUMENTS = ("user_agreement", "privacy_notice")
# A user found by its e-mail after a 409 is this registration's if it was created after the
# claim, give or take the clocks of two services.
ADOPT_SKEW = timedelta(seconds=5)
_E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")
_PHONE_SEPARATORS = re.compile(r"[\s().-]")


def new_code() -> str:
    return f"{secrets.randbelow(1_000_000):06d}"


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def normalize_phone(text: str) -> str:
    """E.164 (``+905321234567``), from E.164 or a Turkish mobile number as people write it
    (``0532 123 45 67``, ``532 123 4567``, ``90 532 …``). Turkish numbers must be mobile (5xx:
    an SMS reaches only those)."""
    digits = _PHONE_SEPARATORS.sub("", text.strip())
    if digits.startswith("00"):
        digits = "+" + digits[2:]
    if not digits.startswith("+"):
        if len(digits) == 11 and digits.startswith("05"):
            digits = "+90" + digits[1:]
        elif len(digits) == 10 and digits.startswith("5"):
            digits = "+90" + digits
        elif len(digits) == 12 and digits.startswith("905"):
            digits = "+" + digits
    if not _E164.fullmatch(digits):
        raise errors.PhoneInvalid("give the number in international form (+90 5xx …) or as 05xx …")
    if digits.startswith("+90") and not (len(digits) == 13 and digits[3] == "5"):
        raise errors.PhoneInvalid("a Turkish number must be a mobile number: +90 5xx xxx xx xx")
    return digits


def mask_phone(phone: str) -> str:
    """The country code and the last two digits: enough to recognise, not to call."""
    return phone[:3] + "*" * (len(phone) - 5) + phone[-2:]


@dataclass(frozen=True)
class Completed:
    body: dict[str, Any]
    created: bool


class OnboardingService:
    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: OnboardingSettings,
        *,
        ring: KeyRing,
        hasher: Hasher,
        identity: IdentityAdmin,
        wallet_api: WalletApi,
        mailer: Mailer,
        sms: Sms,
        registry: Registry,
        metrics: OnboardingMetrics | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.ring = ring
        self.hasher = hasher
        self.identity = identity
        self.wallet_api = wallet_api
        self.mailer = mailer
        self.sms = sms
        self.registry = registry
        self.metrics = metrics or OnboardingMetrics()

    # -- rate limits ---------------------------------------------------------------------------

    async def _limit(self, scope: str, key_hash: bytes, limit: int) -> None:
        window = self.settings.rate_window_s
        row = await self.pool.fetchrow(Q["hit_rate"], scope, key_hash, window)
        if row["hits"] > limit:
            now = await self.pool.fetchval("SELECT now()")
            retry = max(1, int((row["window_start"] + timedelta(seconds=window) - now).total_seconds()) + 1)
            log.info("rate limited", scope=scope)
            raise errors.RateLimited(headers={"Retry-After": str(retry)}, retry_after=retry)

    async def limit_ip(self, ip: str) -> None:
        await self._limit("ip", self.hasher("ip", ip), self.settings.rate_per_ip)

    # -- registration --------------------------------------------------------------------------

    async def register(self, email: str, ip: str) -> dict[str, Any]:
        """A registration for ``email``: a code mailed to it, or, if the address has an
        account, a mail saying so. The answer is the same either way."""
        s = self.settings
        email = normalize_email(email)
        email_hash = self.hasher.email(email)
        await self.limit_ip(ip)
        await self._limit("address", email_hash, s.rate_per_address)
        known = bool(await self.pool.fetchval(Q["email_taken"], email_hash))
        if not known:
            # A user made without onboarding (an operator, the demo data) has no claim here;
            # nor has one whose registration died between identity's answer and our record.
            with self.metrics.timed("identity", "find_user"):
                found = await self._identity(self.identity.find_by_email(email))
            if found is not None:
                known = True
                await self._adopt_orphan(email_hash, found)
        registration_id = new_id()
        code = new_code()
        expires_at = await self.pool.fetchval(
            Q["insert_registration"],
            registration_id,
            email_hash,
            self.ring.seal(email, place("registrations", "email_enc", registration_id)),
            known,
            None if known else self.hasher.code(registration_id, code),
            s.code_ttl_s,
            s.code_max_attempts,
            s.registration_ttl_s,
        )
        try:
            await self._mail(email, code, known)
        except errors.DependencyUnavailable:
            await self.pool.execute(Q["delete_registration"], registration_id)
            raise
        self.metrics.registrations.labels("started").inc()
        log.info("registration started", registration_id=registration_id)
        return {"registration_id": registration_id, "expires_at": iso(expires_at)}

    async def _adopt_orphan(self, email_hash: bytes, found: FoundUser) -> None:
        """The user of a claim whose registration crashed after identity made it and then
        expired (no retry came): without this the address would be neither free (identity has
        the user) nor registered here (no account, no record). The claim takes its user back;
        the sweep opens the account, and the person logs in with the password they chose."""
        adopted = await self.pool.fetchval(
            Q["adopt_orphan_user"], email_hash, found.id, found.created_at, ADOPT_SKEW.total_seconds()
        )
        if adopted is not None:
            self.metrics.registrations.labels("user_adopted").inc()
            log.info("an abandoned claim took back the user made for it", customer_id=adopted)

    async def _mail(self, email: str, code: str, known: bool) -> None:
        try:
            with self.metrics.timed("mail", "already_registered" if known else "code"):
                if known:
                    await self.mailer.send_already_registered(email)
                else:
                    await self.mailer.send_code(email, code)
        except DependencyUnavailable as exc:
            log.warning("mail not sent", error=str(exc))
            raise errors.DependencyUnavailable("the e-mail could not be sent; try again") from exc

    async def _registration(self, registration_id: str) -> asyncpg.Record:
        row = await self.pool.fetchrow(Q["registration"], registration_id)
        if row is None:
            raise errors.RegistrationNotFound()
        return row

    async def resend(self, registration_id: str, ip: str) -> dict[str, Any]:
        """A new code for the registration, replacing the old one (attempts counted afresh)."""
        s = self.settings
        await self.limit_ip(ip)
        row = await self._registration(registration_id)
        await self._limit("address", row["email_hash"], s.rate_per_address)
        if row["status"] != "code_sent":
            raise errors.CodeUsed("the address is verified already: complete the registration")
        code = new_code()
        code_hash = None if row["known"] else self.hasher.code(registration_id, code)
        expires_at = await self.pool.fetchval(
            Q["new_code"], registration_id, code_hash, s.code_ttl_s, s.code_max_attempts
        )
        email = self.ring.open(row["email_enc"], place("registrations", "email_enc", registration_id))
        await self._mail(email, code, row["known"])
        return {"registration_id": registration_id, "expires_at": iso(expires_at)}

    async def verify(self, registration_id: str, code: str, ip: str) -> dict[str, Any]:
        await self.limit_ip(ip)

        async def work(conn: asyncpg.Connection) -> ProblemError | None:
            row = await conn.fetchrow(Q["registration_for_update"], registration_id)
            if row is None:
                raise errors.RegistrationNotFound()
            if row["status"] != "code_sent":
                raise errors.CodeUsed("the address is verified already: complete the registration")
            if row["attempts_left"] <= 0:
                raise errors.TooManyAttempts("ask for a new code (resend)")
            if row["code_expired"]:
                raise errors.CodeExpired("ask for a new code (resend)")
            expected = row["code_hash"]
            given = self.hasher.code(registration_id, code)
            # A known address has no code: every code is wrong, and answered just as a wrong one.
            if expected is None or not hmac.compare_digest(expected, given):
                left = await conn.fetchval(Q["code_failed"], registration_id)
                return errors.CodeInvalid(attempts_left=left)
            await conn.execute(Q["email_verified"], registration_id)
            return None

        refusal = await in_transaction(self.pool, work)
        if refusal is not None:  # raised after the commit: the attempt stays counted
            raise refusal
        self.metrics.registrations.labels("email_verified").inc()
        log.info("registration e-mail verified", registration_id=registration_id)
        return {"registration_id": registration_id, "status": "email_verified"}

    async def complete(self, registration_id: str, password: str, ip: str) -> Completed:
        """The user (with ``password``) and the personal account; each step once, whatever
        was done before a crash. The password goes to the identity service and nowhere else."""
        await self.limit_ip(ip)
        row = await self._registration(registration_id)
        if row["status"] == "code_sent":
            raise errors.EmailNotVerified("verify the e-mail code first")
        if row["status"] == "completed":
            return Completed(await self._completed_body(registration_id, row), created=False)
        email_hash = row["email_hash"]
        email = self.ring.open(row["email_enc"], place("registrations", "email_enc", registration_id))
        # 1. the claim on the address
        await self._claim(registration_id, email_hash)
        await self.pool.execute(Q["registration_status"], registration_id, "email_verified")
        customer = await self.pool.fetchrow(Q["customer"], registration_id)
        # 2. the user
        if customer["sub"] is None:
            sub = await self._create_user(email, password, customer["created_at"])
            self._fault_after_user_created()
            await self.pool.execute(Q["set_sub"], registration_id, sub)
            await self.pool.execute(Q["registration_status"], registration_id, "user_created")
            customer = await self.pool.fetchrow(Q["customer"], registration_id)
            self.metrics.registrations.labels("user_created").inc()
            log.info("registration user created", registration_id=registration_id)
        # 3. the personal account
        if customer["account_id"] is None:
            await self._open_account(customer)
        await self.pool.execute(Q["registration_status"], registration_id, "completed")
        self.metrics.registrations.labels("completed").inc()
        log.info("registration completed", registration_id=registration_id)
        return Completed(await self._completed_body(registration_id, row), created=True)

    async def _claim(self, registration_id: str, email_hash: bytes) -> None:
        for _ in range(2):
            if await self.pool.fetchval(Q["claim_email"], registration_id, email_hash) is not None:
                return
            holder = await self.pool.fetchrow(Q["customer_of_email"], email_hash)
            if holder is not None and holder["id"] == registration_id:
                return  # ours already (a retry, or a concurrent complete of this registration)
            # Another's: a customer, a registration under way, or a claim abandoned without a
            # user, which is released once (then claimed here, if no one is quicker).
            if holder is not None and (
                holder["sub"] is not None
                or await self.pool.execute(Q["release_abandoned_claim"], holder["id"]) != "DELETE 1"
            ):
                break
            log.info("registration took over an abandoned claim", registration_id=registration_id)
        raise errors.EmailRegistered()

    async def _create_user(self, email: str, password: str, claimed_at: datetime) -> str:
        try:
            with self.metrics.timed("identity", "create_user"):
                return await self._identity(self.identity.create_user(email, password))
        except InvalidPassword as exc:
            raise errors.PasswordRefused(str(exc)) from exc
        except UserExists:
            pass
        with self.metrics.timed("identity", "find_user"):
            found = await self._identity(self.identity.find_by_email(email))
        if found is None or found.created_at < claimed_at - ADOPT_SKEW:
            # Made before this registration's claim: not ours (an operator's, the demo data).
            raise errors.EmailRegistered()
        # The password is this request's, whatever the attempt that made the user was given.
        try:
            with self.metrics.timed("identity", "set_password"):
                await self._identity(self.identity.set_password(found.id, password))
        except InvalidPassword as exc:
            raise errors.PasswordRefused(str(exc)) from exc
        self.metrics.registrations.labels("user_adopted").inc()
        log.info("registration adopted the user it had created")
        return found.id

    def _fault_after_user_created(self) -> None:
        """Tests' fault hook: the process dies (or the request fails) right after the identity
        service created the user, before this service recorded it. Never in production."""
        fault = os.environ.get(FAULT_ENV)
        if not fault or get_settings().production:
            return
        if fault == "exit":
            os._exit(70)
        if fault == "raise":
            raise errors.FaultInjected("fault injected after the user was created")

    async def _open_account(self, customer: asyncpg.Record) -> None:
        try:
            with self.metrics.timed("wallet-api", "open_personal"):
                account = await self.wallet_api.open_personal(customer["sub"])
        except DependencyUnavailable as exc:
            raise errors.DependencyUnavailable("wallet-api is not reachable; try again") from exc
        await self.pool.execute(Q["set_account"], customer["id"], account.account_id, account.wallet_id)
        await record_tier(self.pool, customer["id"], account.tier)

    async def _completed_body(self, registration_id: str, row: asyncpg.Record) -> dict[str, Any]:
        customer = await self.pool.fetchrow(Q["customer"], registration_id)
        email = self.ring.open(row["email_enc"], place("registrations", "email_enc", registration_id))
        return {
            "registration_id": registration_id,
            "status": "completed",
            "account_id": customer["account_id"],
            "login_url": self.login_url(email),
        }

    def login_url(self, email: str) -> str:
        s = self.settings
        query = urlencode(
            dict(
                client_id=s.login_client_id,
                response_type="code",
                scope="openid",
                redirect_uri=s.login_redirect_uri,
                login_hint=email,
            )
        )
        return f"{s.auth_url}?{query}"

    async def _identity(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except DependencyUnavailable as exc:
            raise errors.DependencyUnavailable("the identity service is not reachable; try again") from exc

    # -- verification ----------------------------------------------------------------------------

    async def customer_of(self, sub: str) -> asyncpg.Record:
        row = await self.pool.fetchrow(Q["customer_by_sub"], sub)
        if row is None:
            raise errors.CustomerNotFound()
        return row

    async def me(self, sub: str) -> dict[str, Any]:
        customer = await self.customer_of(sub)
        if rank(customer["tier_wanted"]) > rank(customer["tier"]):
            # A raise wallet-api missed: this call finishes it (the sweep would, too).
            customer = await self._push_tier(customer)
        consents = await self.pool.fetch(Q["consents"], customer["id"])
        phone = (
            self.ring.open(customer["phone_enc"], place("customers", "phone_enc", customer["id"]))
            if customer["phone_enc"] is not None
            else None
        )
        return {
            "tier": customer["tier"],
            "account_id": customer["account_id"],
            "phone_verified": customer["phone_verified_at"] is not None,
            "phone": mask_phone(phone) if phone else None,
            "identity_verified": customer["identity_verified_at"] is not None,
            "consents": [
                {"document": c["document"], "version": c["version"], "accepted_at": iso(c["accepted_at"])}
                for c in consents
            ],
            "remaining": self._remaining(customer, consents),
        }

    def _remaining(self, customer: asyncpg.Record, consents: Sequence[asyncpg.Record]) -> list[str]:
        left = []
        if customer["phone_verified_at"] is None:
            left.append("phone")
        if customer["identity_verified_at"] is None:
            left.append("identity")
        accepted = {(c["document"], c["version"]) for c in consents}
        for document, version in self.settings.consent_versions.items():
            if (document, version) not in accepted:
                left.append(document)
        return left

    async def send_phone_code(self, sub: str, phone: str) -> dict[str, Any]:
        s = self.settings
        phone = normalize_phone(phone)
        customer = await self.customer_of(sub)
        await self._limit("phone", self.hasher("customer", customer["id"]), s.rate_per_customer_phone)
        code = new_code()
        cid = customer["id"]
        expires_at = await self.pool.fetchval(
            Q["upsert_phone_code"],
            cid,
            self.hasher.phone(phone),
            self.ring.seal(phone, place("phone_codes", "phone_enc", cid)),
            self.hasher.code(cid, code),
            s.code_ttl_s,
            s.code_max_attempts,
        )
        try:
            with self.metrics.timed("sms", "send"):
                await self.sms.send(
                    phone, f"HiWallet code: {code}. Do not share it with anyone.", idempotency_key=new_id()
                )
        except DependencyUnavailable as exc:
            await self.pool.execute(Q["delete_phone_code"], cid)
            raise errors.DependencyUnavailable("the SMS could not be sent; try again") from exc
        return {"phone": mask_phone(phone), "expires_at": iso(expires_at)}

    async def verify_phone(self, sub: str, code: str) -> dict[str, Any]:
        with self._counted("phone"):
            return await self._verify_phone(sub, code)

    async def _verify_phone(self, sub: str, code: str) -> dict[str, Any]:
        customer = await self.customer_of(sub)
        cid = customer["id"]

        async def work(conn: asyncpg.Connection) -> ProblemError | None:
            row = await conn.fetchrow(Q["phone_code_for_update"], cid)
            if row is None:
                raise errors.PhoneCodeMissing()
            if row["attempts_left"] <= 0:
                raise errors.TooManyAttempts("ask for a new code")
            if row["code_expired"]:
                raise errors.CodeExpired("ask for a new code")
            if not hmac.compare_digest(row["code_hash"], self.hasher.code(cid, code)):
                left = await conn.fetchval(Q["phone_code_failed"], cid)
                return errors.CodeInvalid(attempts_left=left)
            phone = self.ring.open(row["phone_enc"], place("phone_codes", "phone_enc", cid))
            sealed = self.ring.seal(phone, place("customers", "phone_enc", cid))
            await conn.execute(Q["set_phone"], cid, row["phone_hash"], sealed)
            await conn.execute(Q["delete_phone_code"], cid)
            return None

        refusal = await in_transaction(self.pool, work)
        if refusal is not None:  # raised after the commit: the attempt stays counted
            raise refusal
        log.info("phone verified", customer_id=cid)
        await self._advance(cid)
        return await self.me(sub)

    async def verify_identity(
        self, sub: str, tckn: str, given_name: str, family_name: str, birth_date: date
    ) -> dict[str, Any]:
        with self._counted("identity"):
            return await self._verify_identity(sub, tckn, given_name, family_name, birth_date)

    async def _verify_identity(
        self, sub: str, tckn: str, given_name: str, family_name: str, birth_date: date
    ) -> dict[str, Any]:
        if not date(1900, 1, 1) <= birth_date <= datetime.now(UTC).date():
            raise errors.BirthDateInvalid()
        if not tckimlik.is_valid(tckn):
            raise errors.TcknInvalid("the number's check digits are wrong")
        tckn = tckimlik.compact(tckn)
        tckn_hash = self.hasher.tckn(tckn)
        customer = await self.customer_of(sub)
        cid = customer["id"]
        if customer["tckn_hash"] is not None:
            if hmac.compare_digest(customer["tckn_hash"], tckn_hash):
                return await self.me(sub)
            raise errors.IdentityAlreadyVerified()
        holder = await self.pool.fetchval(Q["customer_by_tckn"], tckn_hash)
        if holder is not None and holder != cid:
            raise errors.TcknTaken()
        try:
            with self.metrics.timed("registry", "check"):
                confirmed = await self.registry.confirms(tckn, given_name, family_name, birth_date.year)
        except DependencyUnavailable as exc:
            retry = str(self.settings.nvi_retry_after_s)
            raise errors.RegistryUnavailable(headers={"Retry-After": retry}) from exc
        if not confirmed:
            log.info("identity not confirmed by the registry", customer_id=cid)
            raise errors.IdentityMismatch()

        def seal(column: str, value: str) -> bytes:
            return self.ring.seal(value, place("customers", column, cid))

        try:
            await self.pool.execute(
                Q["set_identity"],
                cid,
                tckn_hash,
                seal("tckn_enc", tckn),
                seal("given_name_enc", given_name.strip()),
                seal("family_name_enc", family_name.strip()),
                seal("birth_date_enc", birth_date.isoformat()),
            )
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "customers_tckn_taken":  # bound by another at the same moment
                raise errors.TcknTaken() from exc
            raise
        log.info("identity verified", customer_id=cid)
        await self._advance(cid)
        return await self.me(sub)

    async def accept_consent(self, sub: str, document: str, version: str) -> dict[str, Any]:
        with self._counted("consent"):
            return await self._accept_consent(sub, document, version)

    async def _accept_consent(self, sub: str, document: str, version: str) -> dict[str, Any]:
        current = self.settings.consent_versions[document]
        if version != current:
            raise errors.ConsentVersionInvalid(document=document, current=current)
        customer = await self.customer_of(sub)
        await self.pool.execute(Q["accept_consent"], customer["id"], document, version)
        await self._advance(customer["id"])
        return await self.me(sub)

    @contextmanager
    def _counted(self, kind: str) -> Iterator[None]:
        try:
            yield
        except ProblemError as exc:
            self.metrics.verifications.labels(kind, exc.slug).inc()
            raise
        self.metrics.verifications.labels(kind, "ok").inc()

    # -- the tier ------------------------------------------------------------------------------------

    async def _advance(self, customer_id: str) -> None:
        """With the phone, the identity and both current consents: the tier unverified in
        wallet-api. Recorded as wanted first, so a raise wallet-api misses is finished later."""
        customer = await self.pool.fetchrow(Q["customer"], customer_id)
        consents = await self.pool.fetch(Q["consents"], customer_id)
        if self._remaining(customer, consents):
            return
        await self.pool.execute(Q["want_tier"], customer_id, "unverified", TIERS)
        customer = await self.pool.fetchrow(Q["customer"], customer_id)
        if rank(customer["tier_wanted"]) > rank(customer["tier"]):
            await self._push_tier(customer)

    async def _push_tier(self, customer: asyncpg.Record) -> asyncpg.Record:
        """wallet-api told the wanted tier; the customer's row afterwards. wallet-api down: the
        row as it was (the caller's answer is still 200; the sweep or the next call retries)."""
        if customer["account_id"] is None:
            return customer
        try:
            with self.metrics.timed("wallet-api", "raise_tier"):
                tier = await self.wallet_api.raise_tier(customer["account_id"], customer["tier_wanted"])
        except DependencyUnavailable as exc:
            self.metrics.tier_raises.labels(customer["tier_wanted"], "deferred").inc()
            log.warning("tier raise deferred", customer_id=customer["id"], error=str(exc))
            return customer
        self.metrics.tier_raises.labels(customer["tier_wanted"], "done").inc()
        await record_tier(self.pool, customer["id"], tier)
        log.info("tier raised", customer_id=customer["id"], tier=tier)
        row: asyncpg.Record = await self.pool.fetchrow(Q["customer"], customer["id"])
        return row

    # -- the sweep -----------------------------------------------------------------------------------

    async def sweep(self) -> int:
        """One round: the accounts and tier raises a failure left undone, the expired
        registrations and rate windows purged. How many rows it handled."""
        s = self.settings
        done = 0
        for customer in await self.pool.fetch(Q["account_pending"], s.sweep_batch):
            try:
                await self._open_account(customer)
                done += 1
            except errors.DependencyUnavailable:
                break
        for customer in await self.pool.fetch(Q["tier_pending"], s.sweep_batch):
            if (await self._push_tier(customer)) is customer:
                break  # wallet-api down: the next round
            done += 1

        async def purge_registrations() -> int:
            status = await self.pool.execute(Q["purge_registrations"], s.sweep_batch)
            return int(status.split()[-1])

        done += await in_batches(purge_registrations, batch=s.sweep_batch, max_batches=100)
        status = await self.pool.execute(Q["purge_rate_hits"], float(s.rate_window_s))
        return done + int(status.split()[-1])

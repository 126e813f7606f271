"""The deployment's processes, declared once: ``hiwallet run NAME``, ``hiwallet up`` and the
README's table read this registry, and there is no second list.

A :class:`Deployable` names what a process is (its name, default port, database, access, job,
the queues it consumes) and where its entry point is (``module:function``, imported only when
it runs: the contracts import no service). What the process does inside (its routes, pool,
consumers, relays and jobs) is the service's own declaration, built by the platform
(``hiwallet.core.service``).

``tier`` orders ``up``'s stop, highest first: identity is 0; services that verify its tokens
are 1, so they drain their requests while identity still answers; a service that calls another
service while it serves a request stops before it (2), with the outside institutions' fakes,
which send webhooks to tier 1 (topup-webhook, bank-webhook)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hiwallet.core.logging import configure_logging

if TYPE_CHECKING:
    # core.broker loads aio-pika: imported where a topology is built, not here, because every
    # process of `hiwallet up` (`hiwallet run NAME`) imports this registry, the fronts too.
    from hiwallet.core.broker import Topology

__all__ = ["DEPLOYABLES", "Deployable", "deployable", "deployment_topology"]

Access = Literal["public", "internal", "ip-restricted", "no-ingress", "outside"]


@dataclass(frozen=True)
class Deployable:
    """One process of the deployment.

    ``entry`` is ``"module:function"``, called as ``function(port, host, **options)`` with the
    options named in ``options`` (``realm``, ``workers``) and the values of ``fixed``.
    ``settings`` is ``"module:function"`` returning the process's settings, whose
    ``port_field`` is the port in force (the default here, or the environment's)."""

    name: str
    port: int
    access: Access
    job: str
    entry: str
    settings: str
    port_field: str = "port"
    database: str | None = None  # a key of hiwallet.contracts.databases.DATABASES
    consumes: tuple[str, ...] = ()  # the queues it consumes (each partition's family once)
    # "module:function" -> the broker topology it declares at start (from its settings), read
    # by `hiwallet broker to-quorum` and the topology's test; None: it declares none.
    topology: str | None = None
    tier: int = 1
    # The fakes of the outside institutions answer /health only: nothing to be ready for.
    ready_path: str = "/ready"
    options: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)

    @property
    def fake(self) -> bool:
        return self.access == "outside"

    def _resolve(self, target: str) -> Callable[..., Any]:
        module, _, function = target.partition(":")
        resolved: Callable[..., Any] = getattr(importlib.import_module(module), function)
        return resolved

    def topology_in_force(self) -> Topology:
        """The exchanges and queues the process declares at start (empty if none)."""
        if self.topology is None:
            from hiwallet.core.broker import Topology

            return Topology((), ())
        topology: Topology = self._resolve(self.topology)()
        return topology

    def port_in_force(self) -> int:
        """The port the process listens on: its settings' (the environment may move it)."""
        return int(getattr(self._resolve(self.settings)(), self.port_field))

    def run(self, port: int | None, host: str, **options: Any) -> None:
        """Run the process here (its entry point), with the options it takes."""
        unknown = {k for k, v in options.items() if v is not None} - set(self.options)
        if unknown:
            raise ValueError(f"{self.name} takes no {', '.join(sorted(unknown))}")
        taken = {k: v for k, v in options.items() if k in self.options}
        if self.fake:
            # The fakes import nothing of ours: their process's logging is set up here.
            configure_logging(self.name)
        self._resolve(self.entry)(port=port, host=host, **self.fixed, **taken)


_D = Deployable

DEPLOYABLES: tuple[Deployable, ...] = (
    _D(
        "identity", 8080, "public",
        "OpenID provider, realm `hiwallet` (customers; stands in for Keycloak)",
        "hiwallet.identity.cli:run_identity", "hiwallet.identity.settings:get_identity_settings",
        database="identity", tier=0, fixed={"realm": "hiwallet"},
    ),
    _D(
        "identity-staff", 8180, "internal",
        "OpenID provider, realm `hiwallet-staff` (employees, TOTP required)",
        "hiwallet.identity.cli:run_identity", "hiwallet.identity.settings:get_identity_settings",
        port_field="staff_port", database="staff_identity", tier=0, fixed={"realm": "hiwallet-staff"},
    ),
    _D(
        "wallet-api", 8010, "internal",
        "accounts, members, wallets, transfers, payments, promos; the ledger's reads and postings",
        "hiwallet.wallet_api.app:run_wallet_api", "hiwallet.wallet_api.settings:get_wallet_api_settings",
        database="wallet", options=("workers",),
    ),
    # Employees, roles, invitations, audit; GET /v1/me for every staff request. It asks the
    # staff realm (0) while serving; wallet-api and the orchestrator ask it.
    _D(
        "staff-admin", 8013, "internal",
        "employees, roles, permissions, invitations, audit; GET /v1/me for every staff request",
        "hiwallet.staff_admin.app:run_staff_admin", "hiwallet.staff_admin.settings:get_staff_admin_settings",
        database="staff_admin",
    ),
    _D(
        "wallet-consumer", 9101, "no-ingress",
        "the one consumer that writes the ledger from messages (top-ups, the saga's wallet steps)",
        "hiwallet.wallet_consumer.app:run_wallet_consumer",
        "hiwallet.wallet_consumer.settings:get_wallet_consumer_settings",
        database="wallet", consumes=("hiwallet.topups.p*", "hiwallet.withdrawals.wallet"),
        topology="hiwallet.wallet_consumer.app:declared_topology",
    ),
    # The merchants' webhooks: reads the events wallet-api and wallet-consumer write, calls the
    # merchants' endpoints (outside), no ingress.
    _D(
        "merchant-webhooks", 9103, "no-ingress",
        "delivers the merchants' webhook events to their endpoints: signed, retried for 3 days, in order",
        "hiwallet.merchant_webhooks.app:run_merchant_webhooks",
        "hiwallet.merchant_webhooks.settings:get_merchant_webhooks_settings",
        database="wallet",
    ),
    _D(
        "topup-webhook", 8020, "ip-restricted",
        "verifies the card provider's and the bank's webhooks, keeps them, relays the top-ups",
        "hiwallet.topup_webhook.app:run_topup_webhook",
        "hiwallet.topup_webhook.settings:get_topup_webhook_settings",
        database="topup", topology="hiwallet.topup_webhook.app:declared_topology",
    ),
    # The withdrawal saga. The orchestrator asks wallet-api while it serves (tier 2: it drains
    # while wallet-api still answers); bank-webhook takes the bank's callbacks (1: bank-fake, 2,
    # stops sending first); bank-adapter calls bank-fake, whose absence it rides out.
    _D(
        "withdrawal-orchestrator", 8011, "internal",
        "the withdrawal saga: requests, its state, the commands to the wallet and the bank",
        "hiwallet.withdrawals.app:run_withdrawal_orchestrator",
        "hiwallet.withdrawals.settings:get_withdrawal_settings",
        database="withdrawal", consumes=("hiwallet.withdrawals.orchestrator",), tier=2,
        topology="hiwallet.contracts.withdrawals:withdrawals_topology",
    ),
    _D(
        "bank-adapter", 9102, "no-ingress",
        "calls the bank for the saga's transfers, publishes the results, reconciles with the bank",
        "hiwallet.bank.adapter:run_bank_adapter", "hiwallet.bank.settings:get_bank_settings",
        port_field="adapter_port", database="bank", consumes=("hiwallet.withdrawals.bank",),
        topology="hiwallet.bank.adapter:declared_topology",
    ),
    _D(
        "bank-webhook", 8021, "ip-restricted",
        "verifies the bank's transfer callbacks and keeps them for bank-adapter's relay",
        "hiwallet.bank.webhook:run_bank_webhook", "hiwallet.bank.settings:get_bank_settings",
        port_field="webhook_port", database="bank",
    ),
    # Registration and verification: it calls identity's admin API and wallet-api while it
    # serves (tier 2), and consumes the credited wires' events (the first own wire -> verified).
    _D(
        "onboarding", 8012, "internal",
        "registration, verification, tiers",
        "hiwallet.onboarding.app:run_onboarding", "hiwallet.onboarding.settings:get_onboarding_settings",
        database="onboarding", consumes=("hiwallet.onboarding.wires",), tier=2,
        topology="hiwallet.onboarding.wires:declared_topology",
    ),
    # The front doors (docs/front-apis.md): no database, no broker; they call the internal
    # services while they serve, so they stop first of ours (3), while those still answer.
    _D(
        "personal-mobile-api", 8001, "public",
        "the mobile app's one door: verifies the customer's token, limits, forwards it unchanged",
        "hiwallet.personal_mobile_api.app:run_personal_mobile_api",
        "hiwallet.personal_mobile_api.settings:get_personal_mobile_api_settings",
        tier=3,
    ),
    _D(
        "business-api", 8003, "public",
        "merchants' systems' door (client credentials): verifies, limits, forwards the token unchanged",
        "hiwallet.business_api.app:run_business_api",
        "hiwallet.business_api.settings:get_business_api_settings",
        tier=3,
    ),
    _D(
        "personal-web-bff", 8002, "public",
        "the customers' web app (BFF): pages in tr/en, login, wallets, movements, transfers",
        "hiwallet.personal_web_bff.app:run_personal_web_bff",
        "hiwallet.personal_web_bff.settings:get_personal_web_bff_settings",
        tier=3,
    ),
    _D(
        "business-web-bff", 8004, "public", "the merchant panel's BFF: its health endpoints for now",
        "hiwallet.business_web_bff.app:run_business_web_bff",
        "hiwallet.business_web_bff.settings:get_business_web_bff_settings",
        tier=3,
    ),
    # The backoffice panel's BFF: employees' browsers only (internal); pages that call
    # staff-admin, wallet-api and the orchestrator with the employee's token while they serve.
    _D(
        "backoffice-bff", 8005, "internal",
        "the backoffice panel: staff sign-in (password, TOTP), pages by permission from /v1/me",
        "hiwallet.backoffice_bff.app:run_backoffice_bff",
        "hiwallet.backoffice_bff.settings:get_backoffice_bff_settings",
        tier=3,
    ),
    # The outside institutions: they send webhooks (stripe-fake, bank-fake) or only answer; all
    # stop first.
    _D(
        "stripe-fake", 8096, "outside", "the card provider: incoming payments and their webhooks",
        "hiwallet.fakes.stripe:run_stripe_fake", "hiwallet.fakes.stripe:get_stripe_fake_settings",
        tier=2, ready_path="/health",
    ),
    _D(
        "bank-fake", 8094, "outside", "the bank: incoming wires, outgoing transfers, their callbacks",
        "hiwallet.fakes.bank:run_bank_fake", "hiwallet.fakes.bank:get_bank_fake_settings",
        tier=2, ready_path="/health",
    ),
    _D(
        "mail-catcher", 8025, "outside", "receives e-mail over SMTP (1025); an HTTP API reads it",
        "hiwallet.fakes.mail:run_mail_catcher", "hiwallet.fakes.mail:get_mail_catcher_settings",
        tier=2, ready_path="/health",
    ),
    _D(
        "sms-fake", 8095, "outside", "the SMS provider; keeps what it sent for tests to read",
        "hiwallet.fakes.sms:run_sms_fake", "hiwallet.fakes.sms:get_sms_fake_settings",
        tier=2, ready_path="/health",
    ),
    _D(
        "nvi-fake", 8097, "outside", "the population registry: checks a TCKN, name and birth date",
        "hiwallet.fakes.nvi:run_nvi_fake", "hiwallet.fakes.nvi:get_nvi_fake_settings",
        tier=2, ready_path="/health",
    ),
)  # fmt: skip

_BY_NAME = {d.name: d for d in DEPLOYABLES}


def deployment_topology() -> Topology:
    """Everything the deployment's processes declare, each queue once (several processes
    declare the same queue: the saga's, the events'). Raises ValueError if two declare one
    queue or exchange differently (RabbitMQ would refuse the second at its start)."""
    exchanges: dict[str, Any] = {}
    queues: dict[str, Any] = {}
    for d in DEPLOYABLES:
        topology = d.topology_in_force()
        for kind, seen, specs in (
            ("exchange", exchanges, topology.exchanges),
            ("queue", queues, topology.queues),
        ):
            for spec in specs:
                if seen.setdefault(spec.name, spec) != spec:
                    raise ValueError(
                        f"{d.name} declares the {kind} {spec.name} otherwise than another process"
                    )
    from hiwallet.core.broker import Topology

    return Topology(tuple(exchanges.values()), tuple(queues.values()))


def deployable(name: str) -> Deployable:
    """The deployable called ``name``; KeyError names the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown deployable {name!r}; one of: {', '.join(_BY_NAME)}") from None

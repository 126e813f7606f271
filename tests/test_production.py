"""``HIWALLET_PRODUCTION=true``, per deployable: each process refuses to start (exit status
non-zero, the settings named, no value shown) on a development secret that ships in the
repository, on an empty staff allow-list, with a test fault hook set; with real secrets it
passes the check. Every secret setting is a ``SecretStr``.

The refusals are real processes (``hiwallet run NAME``: the check is called by each process's
entry point); the passes are the same check in this process, on settings read from an
environment of real-looking secrets.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from typing import Any, get_args, get_origin

import pytest
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from hiwallet.bank.settings import BankSettings, BankWebhookSettings
from hiwallet.core.settings import (
    NON_EMPTY_IN_PRODUCTION,
    InsecureSettings,
    Settings,
    insecure_settings,
    is_development_value,
)
from hiwallet.identity import cli as identity_cli
from hiwallet.identity.realm import client_secrets, load_realm
from hiwallet.identity.settings import REALMS_DIR, IdentitySettings
from hiwallet.merchant_webhooks.settings import MerchantWebhooksSettings
from hiwallet.onboarding.settings import OnboardingSettings
from hiwallet.onboarding.settings import check_production as onboarding_check
from hiwallet.onboarding.wires import WiresSettings
from hiwallet.staff_admin.settings import StaffAdminSettings
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from hiwallet.wallet_api.settings import WalletApiSettings
from hiwallet.wallet_consumer.settings import WalletConsumerSettings
from hiwallet.withdrawals.settings import WithdrawalSettings
from tests.servers import free_port

AMQP_URL = "HIWALLET_AMQP_URL"
FAULT_HOOK = "HIWALLET_ONBOARDING_FAULT_AFTER_USER_CREATED"
STAFF_NETWORKS = "HIWALLET_IDENTITY_STAFF_ALLOWED_NETWORKS"
Check = Callable[[Settings], None]


def _plain(*classes: type[BaseSettings]) -> Callable[[Settings], None]:
    from hiwallet.core.settings import refuse_insecure_start

    return lambda core: refuse_insecure_start(*(cls() for cls in classes), core=core)


def _identity(realm: str) -> Check:
    return lambda core: identity_cli.check_production(realm, IdentitySettings(), core=core)


# Every deployable of ours (the fakes import nothing of ours and never run in production): its
# `hiwallet run` arguments, its settings classes, and the check its entry point makes.
DEPLOYABLES: dict[str, tuple[tuple[str, ...], tuple[type[BaseSettings], ...], Check]] = {
    "identity (hiwallet)": (("identity", "--realm", "hiwallet"), (IdentitySettings,), _identity("hiwallet")),
    "identity (hiwallet-staff)": (
        ("identity", "--realm", "hiwallet-staff"),
        (IdentitySettings,),
        _identity("hiwallet-staff"),
    ),
    "wallet-api": (("wallet-api",), (WalletApiSettings,), _plain(WalletApiSettings)),
    "staff-admin": (("staff-admin",), (StaffAdminSettings,), _plain(StaffAdminSettings)),
    "wallet-consumer": (("wallet-consumer",), (WalletConsumerSettings,), _plain(WalletConsumerSettings)),
    "merchant-webhooks": (
        ("merchant-webhooks",),
        (MerchantWebhooksSettings,),
        _plain(MerchantWebhooksSettings),
    ),
    "topup-webhook": (("topup-webhook",), (TopupWebhookSettings,), _plain(TopupWebhookSettings)),
    "withdrawal-orchestrator": (
        ("withdrawal-orchestrator",),
        (WithdrawalSettings,),
        _plain(WithdrawalSettings),
    ),
    "bank-adapter": (("bank-adapter",), (BankSettings,), _plain(BankSettings)),
    "bank-webhook": (
        ("bank-webhook",),
        (BankSettings, BankWebhookSettings),
        _plain(BankSettings, BankWebhookSettings),
    ),
    "onboarding": (
        ("onboarding",),
        (OnboardingSettings, WiresSettings),
        lambda core: onboarding_check(OnboardingSettings(), WiresSettings(), core=core),
    ),
}
ALL_SETTINGS = {cls for _, classes, _ in DEPLOYABLES.values() for cls in classes} | {Settings}


def _is_secret(annotation: Any) -> bool:
    # A mapping of secrets (the databases' own servers' URLs) ships empty: nothing to refuse.
    return annotation is SecretStr or (
        get_origin(annotation) is not dict and SecretStr in get_args(annotation)
    )


def _prefix(cls: type[BaseSettings]) -> str:
    return str(cls.model_config.get("env_prefix") or "")


def secret_envs(cls: type[BaseSettings]) -> dict[str, bool]:
    """The environment variables of the secrets of ``cls`` (True: a JSON list)."""
    return {
        (_prefix(cls) + name).upper(): field.annotation is not SecretStr
        for name, field in cls.model_fields.items()
        if _is_secret(field.annotation)
    }


def required_envs(cls: type[BaseSettings]) -> set[str]:
    """The environment variables of the allow-lists of ``cls`` that are empty by default (no
    restriction on a laptop): a deployment must set them (the webhooks' providers' networks)."""
    return {
        (_prefix(cls) + name).upper()
        for name, field in cls.model_fields.items()
        if NON_EMPTY_IN_PRODUCTION in field.metadata and not field.default
    }


def identity_envs(args: tuple[str, ...]) -> set[str]:
    return set(client_secrets(load_realm(args[-1], REALMS_DIR))) if args[0] == "identity" else set()


def expected(name: str) -> set[str]:
    """What a start on every default is refused for: every secret of the deployable, its
    identity clients' secrets, the broker's development user, its allow-lists that are empty
    by default."""
    args, classes, _ = DEPLOYABLES[name]
    envs = {env for cls in classes for env in secret_envs(cls).keys() | required_envs(cls)}
    return envs | identity_envs(args) | {AMQP_URL}


def _real_secret(env: str) -> str:
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    if env.endswith("DATA_KEYS") or env.endswith("SECRET_KEYS"):
        return f"k2026:{key}"
    return f"whsec_{key}" if "WEBHOOK" in env or env.endswith("_SECRETS") else key


def real_environment() -> dict[str, str]:
    """A deployment's environment: every secret of every deployable set to a fresh one."""
    env = {"HIWALLET_PRODUCTION": "true", AMQP_URL: f"amqp://hiwallet:{secrets.token_hex(16)}@rabbitmq:5672/"}
    for cls in ALL_SETTINGS:
        for variable, is_list in secret_envs(cls).items():
            env[variable] = json.dumps([_real_secret(variable)]) if is_list else _real_secret(variable)
        for variable in required_envs(cls):
            env[variable] = json.dumps(["192.0.2.0/24"])
    for args, _, _ in DEPLOYABLES.values():
        env.update({variable: _real_secret(variable) for variable in identity_envs(args)})
    return env


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment as a deployment's; no HIWALLET_* variable of the run leaks in."""
    for variable in list(os.environ):
        if variable.startswith("HIWALLET_") and variable != "HIWALLET_LOG_FILE":
            monkeypatch.delenv(variable)
    env = real_environment()
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return env


@pytest.mark.parametrize("name", list(DEPLOYABLES))
def test_each_deployable_refuses_to_start_on_the_development_secrets(name: str) -> None:
    """A real start, every setting left at its default: the process exits non-zero before it
    serves, naming every development secret it holds (and showing none of their values)."""
    args, _, _ = DEPLOYABLES[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIWALLET_") or k == "HIWALLET_LOG_FILE"}
    env["HIWALLET_PRODUCTION"] = "true"
    done = subprocess.run(
        [sys.executable, "-m", "hiwallet.cli", "run", *args, "--port", str(free_port())],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode()
    assert done.returncode != 0, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("HIWALLET_PRODUCTION=true, refusing to start"), stderr
    assert set(re.findall(r"HIWALLET_[A-Z0-9_]+", last)) - {"HIWALLET_PRODUCTION"} == expected(name)
    for value in ("bank_dev_key", "dev-", "whsec_", "guest:guest", "sk_test"):
        assert value not in stderr


@pytest.mark.parametrize("name", list(DEPLOYABLES))
def test_each_deployable_starts_with_real_secrets_and_refuses_each_development_one(
    name: str, production: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, check = DEPLOYABLES[name]
    check(Settings())  # real secrets: passes
    for variable in sorted(expected(name)):
        with monkeypatch.context() as m:
            m.delenv(variable)  # back to the default: the development value in the repository
            with pytest.raises(InsecureSettings) as refused:
                check(Settings())
        assert variable in str(refused.value)
        assert production[variable] not in str(refused.value)
    # a test fault hook, whichever service it is meant for
    with monkeypatch.context() as m:
        m.setenv(FAULT_HOOK, "raise")
        with pytest.raises(InsecureSettings, match=FAULT_HOOK):
            check(Settings())
    # on a laptop (the flag off) the development values are fine
    for variable in expected(name):
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HIWALLET_PRODUCTION", "false")
    check(Settings())


@pytest.mark.parametrize("realm", ["hiwallet", "hiwallet-staff"])
def test_identity_refuses_an_empty_staff_allow_list(
    realm: str, production: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STAFF_NETWORKS, "[]")
    with pytest.raises(InsecureSettings, match=STAFF_NETWORKS):
        identity_cli.check_production(realm, IdentitySettings(), core=Settings())


@pytest.mark.parametrize(
    ("variable", "check"),
    [
        ("HIWALLET_WALLET_API_WEBHOOK_ALLOW_PRIVATE_TARGETS", _plain(WalletApiSettings)),
        ("HIWALLET_MERCHANT_WEBHOOKS_ALLOW_PRIVATE_TARGETS", _plain(MerchantWebhooksSettings)),
    ],
)
def test_webhooks_to_private_addresses_are_refused_in_production(
    production: dict[str, str], monkeypatch: pytest.MonkeyPatch, variable: str, check: Check
) -> None:
    """Development's switch (a laptop's receivers on 127.0.0.1) lowers the SSRF guard."""
    check(Settings())
    monkeypatch.setenv(variable, "true")
    with pytest.raises(InsecureSettings, match=variable):
        check(Settings())


def test_a_development_secret_of_another_service_is_refused(production: dict[str, str]) -> None:
    """A realm file's client secret is refused wherever it is set (here as onboarding's)."""
    settings = OnboardingSettings(client_secret="dev-onboarding-secret")
    assert insecure_settings(settings) == [
        "HIWALLET_ONBOARDING_CLIENT_SECRET holds a development secret that ships in this repository"
    ]
    shipped = "dev-wallet-api-secret"
    assert insecure_settings(OnboardingSettings(client_secret=shipped), development_values={shipped})
    assert not insecure_settings(OnboardingSettings(client_secret="a-real-one"), development_values={shipped})


def test_development_values_are_found_whole_or_inside_a_longer_value() -> None:
    assert is_development_value("bank_dev_key", {"bank_dev_key"})
    assert is_development_value("k2:bmV3,dev1:ZGV2LW9uYm9hcmRpbmc=", {"dev1:ZGV2LW9uYm9hcmRpbmc="})
    assert not is_development_value("a-real-key", {"bank_dev_key", ""})
    assert not is_development_value("xabcx", {"abc"})  # a short value only as the whole
    assert is_development_value("dev-personal-web-bff-secret", set())  # any client's, anywhere


@pytest.mark.parametrize("cls", sorted(ALL_SETTINGS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_secret_setting_is_a_secret_str(cls: type[BaseSettings]) -> None:
    """A field named like a secret is a SecretStr (or a list of them): never printed in a repr,
    a log line or a traceback's message (the names of the secrets today, and of any to come)."""
    looks_secret = re.compile(r"secret|password|api_key|hash_key|data_keys|token$")
    plain = [
        name
        for name, field in cls.model_fields.items()
        if looks_secret.search(name) and field.annotation in (str, list[str], str | None)
    ]
    assert plain == []


def test_hiwallet_up_refuses_to_run_in_production(production: dict[str, str]) -> None:
    """The local stand seeds demo users whose passwords ship in the repository."""
    from hiwallet.core.settings import get_settings
    from hiwallet.up import up

    get_settings.cache_clear()
    try:
        with pytest.raises(InsecureSettings, match="hiwallet up"):
            up()
    finally:
        get_settings.cache_clear()


def test_the_connection_urls_are_secrets_never_shown_with_the_settings() -> None:
    """A deployment's URLs carry passwords: the settings' repr (a log line, a traceback's locals)
    never shows them; a URL's shipped default without a password is no development secret."""
    from hiwallet.core.edge.settings import EdgeSettings
    from hiwallet.core.settings import Settings, insecure_settings

    core = Settings(
        database_url="postgresql://wallet_api:pg-pass-1@db:5432",
        migrate_database_url="postgresql://owner:pg-pass-2@db:5432",
        amqp_url="amqp://svc:mq-pass-3@mq:5672/",
    )
    edge = EdgeSettings(redis_url="redis://:rd-pass-4@cache:6379/0")
    shown = repr(core) + str(core) + repr(edge) + str(edge) + str(core.model_dump()) + str(edge.model_dump())
    for password in ("pg-pass-1", "pg-pass-2", "mq-pass-3", "rd-pass-4"):
        assert password not in shown
    assert core.database_url.get_secret_value() == "postgresql://wallet_api:pg-pass-1@db:5432"
    assert not [p for p in insecure_settings(Settings()) if "DATABASE_URL" in p]
    assert [p for p in insecure_settings(Settings()) if "AMQP_URL" in p]  # guest:guest ships here

"""Realm configuration, read from a JSON file shaped like a Keycloak realm export.

Only the fields HiWallet needs are read; unknown fields are ignored so that a real export can be
trimmed into this shape (and back) without translation. Client secrets in the files are fixed
local-development values; ``HIWALLET_IDENTITY_SECRET_<CLIENT_ID>`` (upper case, ``-`` as ``_``)
overrides one, and production uses a real Keycloak's secrets instead. Likewise
``HIWALLET_IDENTITY_REDIRECT_URIS_<CLIENT_ID>``, a JSON array of strings, replaces a client's
``redirectUris``: the files name the web apps at their default ports, and ``hiwallet up`` with a
web app elsewhere names where it is (hiwallet.up.web_sign_in_env).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The realm -> its database key in hiwallet.contracts.databases.DATABASES.
REALM_DATABASES: dict[str, str] = {"hiwallet": "identity", "hiwallet-staff": "staff_identity"}

# Keycloak's admin roles live on the realm-management client.
REALM_MANAGEMENT = "realm-management"
MANAGE_USERS = "manage-users"
VIEW_USERS = "view-users"

REQUIRED_ACTIONS = frozenset({"UPDATE_PASSWORD", "CONFIGURE_TOTP"})


class RealmConfigError(ValueError):
    """The realm file is not usable; the service refuses to start rather than guess."""


@dataclass(frozen=True)
class ClientConfig:
    client_id: str
    public: bool
    secret: str | None
    redirect_uris: frozenset[str]
    standard_flow: bool
    direct_grants: bool
    service_account: bool
    audiences: tuple[str, ...]
    service_account_roles: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def service_account_username(self) -> str:
        return f"service-account-{self.client_id}"


@dataclass(frozen=True)
class RealmConfig:
    realm: str
    display_name: str
    otp_required: bool
    clients: Mapping[str, ClientConfig]

    @property
    def database_key(self) -> str:
        return REALM_DATABASES[self.realm]


def shipped_secrets(realms_dir: Path) -> set[str]:
    """The client secrets written in the realm files (development values: they ship in this
    repository; a deployment sets HIWALLET_IDENTITY_SECRET_<CLIENT> for each)."""
    secrets: set[str] = set()
    for path in sorted(realms_dir.glob("*.json")):
        for client in json.loads(path.read_text()).get("clients", []):
            if isinstance(client.get("secret"), str):
                secrets.add(client["secret"])
    return secrets


def client_secrets(config: RealmConfig) -> dict[str, str]:
    """The secret in use of each confidential client of ``config``, by its environment variable."""
    return {_secret_env_name(c.client_id): c.secret for c in config.clients.values() if c.secret is not None}


def _secret_env_name(client_id: str) -> str:
    return "HIWALLET_IDENTITY_SECRET_" + client_id.upper().replace("-", "_")


def _redirect_uris_env_name(client_id: str) -> str:
    return "HIWALLET_IDENTITY_REDIRECT_URIS_" + client_id.upper().replace("-", "_")


def redirect_uris_env(client_id: str, uris: list[str]) -> dict[str, str]:
    """The environment that gives ``client_id`` these redirect URIs (instead of its file's)."""
    return {_redirect_uris_env_name(client_id): json.dumps(uris)}


def _redirect_uris(client_id: str, raw: Mapping[str, Any]) -> frozenset[str]:
    """The file's ``redirectUris``, or the environment's list in their place. A list that is
    not one refuses the start: a guessed redirect URI is a way to steal codes."""
    name = _redirect_uris_env_name(client_id)
    given = os.environ.get(name)
    if given is None:
        return frozenset(str(u) for u in raw.get("redirectUris", []))
    try:
        uris = json.loads(given)
    except ValueError:
        raise RealmConfigError(f"{name} is not a JSON array of URIs") from None
    if not isinstance(uris, list) or not all(isinstance(u, str) and u.strip() == u and u for u in uris):
        raise RealmConfigError(f"{name} is not a JSON array of URIs")
    return frozenset(uris)


def _client(raw: Mapping[str, Any]) -> ClientConfig:
    client_id = raw.get("clientId")
    if not isinstance(client_id, str) or not client_id:
        raise RealmConfigError("a client has no clientId")
    public = bool(raw.get("publicClient", False))
    secret = os.environ.get(_secret_env_name(client_id), raw.get("secret"))
    if not public and not secret:
        raise RealmConfigError(f"confidential client {client_id} has no secret")
    if public and raw.get("serviceAccountsEnabled"):
        raise RealmConfigError(f"public client {client_id} cannot have a service account")
    roles = {
        str(owner): tuple(str(r) for r in names)
        for owner, names in (raw.get("serviceAccountRoles") or {}).items()
    }
    audiences = tuple(str(a) for a in raw.get("audiences", ["hiwallet-api"]))
    return ClientConfig(
        client_id=client_id,
        public=public,
        secret=None if public else str(secret),
        redirect_uris=_redirect_uris(client_id, raw),
        standard_flow=bool(raw.get("standardFlowEnabled", True)),
        direct_grants=bool(raw.get("directAccessGrantsEnabled", False)),
        service_account=bool(raw.get("serviceAccountsEnabled", False)),
        audiences=audiences,
        service_account_roles=roles,
    )


def load_realm(realm: str, realms_dir: Path) -> RealmConfig:
    if realm not in REALM_DATABASES:
        raise RealmConfigError(f"unknown realm {realm!r}; known: {sorted(REALM_DATABASES)}")
    path = realms_dir / f"{realm}.json"
    raw = json.loads(path.read_text())
    if raw.get("realm") != realm:
        raise RealmConfigError(f"{path} configures realm {raw.get('realm')!r}, not {realm!r}")
    if raw.get("registrationAllowed"):
        raise RealmConfigError("self-registration is not supported; users are created by admins")
    clients = [_client(c) for c in raw.get("clients", [])]
    by_id = {c.client_id: c for c in clients}
    if len(by_id) != len(clients):
        raise RealmConfigError(f"{path} lists a clientId twice")
    return RealmConfig(
        realm=realm,
        display_name=str(raw.get("displayName", realm)),
        otp_required=bool(raw.get("otpRequired", False)),
        clients=by_id,
    )

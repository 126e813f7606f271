"""``hiwallet identity ...``: operator commands of the identity service."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from hiwallet.core.db import app_role, create_pool
from hiwallet.core.settings import Settings, refuse_insecure_start
from hiwallet.identity.keys import ensure_keys, rotate_keys
from hiwallet.identity.realm import (
    REALM_DATABASES,
    RealmConfigError,
    client_secrets,
    load_realm,
    shipped_secrets,
)
from hiwallet.identity.settings import REALMS_DIR, IdentitySettings, get_identity_settings

identity_app = typer.Typer(no_args_is_help=True, help="The identity service (OpenID provider).")
console = Console()

RealmOption = Annotated[str, typer.Option("--realm", help="hiwallet or hiwallet-staff")]


@identity_app.command("rotate-keys")
def rotate_keys_command(realm: RealmOption = "hiwallet") -> None:
    """Promote the next signing key; the old one stays in the JWKS until its tokens expire."""
    if realm not in REALM_DATABASES:
        raise typer.BadParameter(f"unknown realm {realm!r}", param_hint="--realm")
    settings = get_identity_settings()

    async def _run() -> str:
        key = REALM_DATABASES[realm]
        pool = await create_pool(settings.database_name(key), role=app_role(key), min_size=1, max_size=2)
        try:
            await ensure_keys(pool, settings.key_bits)
            kid = await rotate_keys(pool, settings.key_bits, publish_for_s=retire_after(realm))
            await ensure_keys(pool, settings.key_bits)
            return kid
        finally:
            await pool.close()

    kid = asyncio.run(_run())
    console.print(f"[bold]{realm}[/bold]: signing with {kid}")


def retire_after(realm: str) -> int:
    """How long a retired key stays published: the longest an access or ID token it signed can
    live, plus a verifier's leeway."""
    return get_identity_settings().access_token_lifetime_s + 60


def check_production(realm: str, settings: IdentitySettings, *, core: Settings | None = None) -> None:
    """With HIWALLET_PRODUCTION=true: refuse (core.settings.InsecureSettings) a client secret of
    ``realm`` that is written in a realm file (they ship in this repository: a deployment sets
    HIWALLET_IDENTITY_SECRET_<CLIENT>), an empty staff allow-list, a test fault hook."""
    config = load_realm(realm, settings.realms_dir)
    refuse_insecure_start(
        settings,
        development_values=shipped_secrets(
            REALMS_DIR
        ),  # those in this repository, wherever realms_dir points
        named_secrets=client_secrets(config),
        core=core,
    )


def run_identity(realm: str, port: int | None, host: str) -> None:
    """Serve one realm (the process entry point)."""
    from hiwallet.core.http import serve, settle_heap_once_started
    from hiwallet.core.logging import configure_logging
    from hiwallet.identity.app import create_identity_app

    configure_logging(f"identity-{realm}")
    settings = get_identity_settings()
    try:
        check_production(realm, settings)
        app = create_identity_app(realm, settings)
    except RealmConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--realm") from exc
    # Proxy headers as before: the staff realm's network check reads the client's address.
    port = port or settings.default_port(realm)
    serve(settle_heap_once_started(app), host=host, port=port, proxy_headers=True)

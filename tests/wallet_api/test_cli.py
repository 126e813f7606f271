"""`hiwallet business open` and `hiwallet business link`: an operator opens a business account
and links a merchant integration to it; the integration then acts for it over HTTP."""

from __future__ import annotations

import asyncio
import re

import pytest
from typer.testing import CliRunner

from hiwallet.cli import app
from hiwallet.contracts.databases import DATABASES
from hiwallet.wallet_api import cli as wallet_cli
from tests.wallet_api.conftest import TL, WalletApi, client_token


async def test_an_operator_opens_and_links_a_business(
    api: WalletApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DATABASES, "wallet", api.database)
    monkeypatch.setattr(wallet_cli, "get_wallet_api_settings", lambda: api.service.settings)
    monkeypatch.setattr(wallet_cli, "operator", lambda: "operator:ayla")
    runner = CliRunner()

    opened = await _in_thread(runner, "business", "open", "Simit Fırını")
    account_id = re.search(r"account (\S+:a:\S+)", opened)[1]  # type: ignore[index]
    number = re.search(r"number (\d{16})", opened)[1]  # type: ignore[index]
    row = await api.pool.fetchrow(
        "SELECT kind, name, opened_by FROM wallet.accounts WHERE id = $1", account_id
    )
    assert (row["kind"], row["name"], row["opened_by"]) == ("business", "Simit Fırını", "operator:ayla")

    merchant = {"Authorization": f"Bearer {client_token(api.idp, 'merchant-three')}"}
    assert (await api.http.get(f"/v1/accounts/{account_id}", headers=merchant)).status_code == 404
    linked = await _in_thread(runner, "business", "link", account_id, "--client", "merchant-three")
    assert "linked merchant-three" in linked
    seen = await api.http.get(f"/v1/accounts/{account_id}", headers=merchant)
    assert seen.status_code == 200 and seen.json()["wallets"][0]["number"] == number
    member = await api.pool.fetchrow("SELECT added_by FROM wallet.members WHERE account_id = $1", account_id)
    assert member["added_by"] == "operator:ayla"

    # The integration moves money for it; the ledger records the integration as the actor.
    await api.fund(seen.json()["wallets"][0]["id"], 10 * TL)
    customer = await api.customer("unverified")
    paid = await api.post(
        "/v1/transfers",
        {"from_wallet": seen.json()["wallets"][0]["id"], "to_wallet_number": customer.number, "amount": TL},
        merchant,
    )
    assert paid.status_code == 201 and paid.json()["type"] == "b2p"
    actor = await api.pool.fetchval("SELECT actor FROM ledger.transactions WHERE id = $1", paid.json()["id"])
    assert actor.startswith("client:merchant-three:")

    refused = await _in_thread(
        runner,
        "business",
        "link",
        "0001:a:01234567-89ab-7def-8123-456789abcdef",
        "--client",
        "merchant-three",
        code=1,
    )
    assert "not-found" in refused


async def _in_thread(runner: CliRunner, *args: str, code: int = 0) -> str:
    """The command runs its own event loop (asyncio.run), so it runs off this test's loop."""
    result = await asyncio.to_thread(runner.invoke, app, list(args))
    assert result.exit_code == code, result.output
    return result.output

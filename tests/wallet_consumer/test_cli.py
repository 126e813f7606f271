"""`hiwallet topups unattributed` and `hiwallet topups attribute`: an unattributable top-up is
listed, credited once by an operator through the same ledger key, and a second attribution is
refused."""

from __future__ import annotations

import asyncio
import os
import pwd

import asyncpg
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from hiwallet.cli import app
from hiwallet.contracts.databases import DATABASES
from hiwallet.ledger import Ledger, Role
from hiwallet.wallet_consumer import TopupHandler, attribute
from hiwallet.wallet_consumer import cli as consumer_cli
from tests.wallet_consumer.conftest import TL, cash, consume, message, topup_body, verified

# Who the commands act as: the operating-system user running them (core.actors).
ME = f"operator:{pwd.getpwuid(os.getuid()).pw_name}"


async def _cli(*args: str) -> Result:
    # typer runs asyncio.run: in a thread, away from the test's loop
    result = await asyncio.to_thread(CliRunner().invoke, app, list(args))
    return result


@pytest.fixture(autouse=True)
def _the_test_database(wallet_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DATABASES, "wallet", wallet_db)
    # wide enough that no id is folded over two lines
    monkeypatch.setattr(consumer_cli, "console", Console(emoji=False, soft_wrap=True, width=400))


@pytest.mark.parametrize("wallet", [None, "0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"])
async def test_an_unattributed_topup_is_listed_then_attributed_once(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler, wallet: str | None
) -> None:
    target = (await ledger.open_wallet("ayla", bucket=42)).wallet_id
    body = topup_body(wallet, 80 * TL, provider="bank", provider_payment_id="wire_0001", reference="havale")
    assert (await consume(pool, handler, message(body)))["result"] == "unattributed"  # type: ignore[index]

    listed = await _cli("topups", "unattributed")
    assert listed.exit_code == 0, listed.output
    assert body["payment_id"] in listed.output and "wire_0001" in listed.output
    assert ("no-reference" if wallet is None else "unknown-wallet") in listed.output

    done = await _cli("topups", "attribute", body["payment_id"], "--wallet", target)
    assert done.exit_code == 0, done.output
    assert "credited to" in done.output
    assert await cash(ledger, target) == 80 * TL
    assert await ledger.store.system_balance(Role.CLEARING, "TRY", "bank") == -80 * TL
    row = await pool.fetchrow(
        "SELECT * FROM wallet.unattributed_topups WHERE payment_id = $1", body["payment_id"]
    )
    assert (row["attributed_wallet"], row["attributed_by"]) == (target, ME)
    tx = await ledger.transaction(f"0042:{body['payment_id']}")
    assert (tx.type, tx.actor, tx.ref) == ("topup", ME, "wire_0001")

    # a second attribution, to the same or another wallet, is refused and credits nothing
    other = (await ledger.open_wallet("bob", bucket=43)).wallet_id
    for wallet_again in (target, other):
        again = await _cli("topups", "attribute", body["payment_id"], "--wallet", wallet_again)
        assert again.exit_code == 1 and "already attributed" in again.output, again.output
    assert (await cash(ledger, target), await cash(ledger, other)) == (80 * TL, 0)

    # open ones only by default; --all shows it with its attribution
    assert "no unattributed top-ups" in (await _cli("topups", "unattributed")).output
    everything = await _cli("topups", "unattributed", "--all")
    assert body["payment_id"] in everything.output and ME in everything.output
    # the message again (redelivered under another id): the operator's now, nothing more
    again_msg = await consume(pool, handler, message(body))
    assert again_msg == {"result": "attributed-already", "reason": row["reason"]}
    assert await cash(ledger, target) == 80 * TL
    await verified(ledger)


async def test_two_operators_at_once_credit_once(
    pool: asyncpg.Pool, ledger: Ledger, consumer_ledger: Ledger, handler: TopupHandler
) -> None:
    target = (await ledger.open_wallet("ayla", bucket=42)).wallet_id
    other = (await ledger.open_wallet("bob", bucket=43)).wallet_id
    body = topup_body(None, 15 * TL)
    await consume(pool, handler, message(body))
    # (the function under the command: two CliRunners at once would share sys.stdout)
    results = await asyncio.gather(
        attribute(consumer_ledger, body["payment_id"], target, operator="a"),
        attribute(consumer_ledger, body["payment_id"], other, operator="b"),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["AlreadyAttributed", "Attribution"], results
    assert await cash(ledger, target) + await cash(ledger, other) == 15 * TL
    await verified(ledger)


async def test_attribution_refusals(pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler) -> None:
    eur = (await ledger.open_wallet("euro", "EUR", bucket=7)).wallet_id
    body = topup_body(None, 15 * TL)
    await consume(pool, handler, message(body))
    cases = {
        "0001:not-a-payment": (eur, "not-unattributed"),
        body["payment_id"]: (eur, "wallet-not-creditable"),
    }
    for payment_id, (wallet, code) in cases.items():
        refused = await _cli("topups", "attribute", payment_id, "--wallet", wallet)
        assert refused.exit_code == 1 and code in refused.output, refused.output
    unknown = await _cli("topups", "attribute", body["payment_id"], "--wallet", "0005:w:nobody")
    assert unknown.exit_code == 1 and "unknown-wallet" in unknown.output
    # nobody can be named on the command line: the attribution is the OS user's
    named = await _cli("topups", "attribute", body["payment_id"], "--wallet", eur, "--operator", "ayla")
    assert named.exit_code == 2 and "No such option" in named.output
    assert await pool.fetchval("SELECT attributed_wallet FROM wallet.unattributed_topups") is None
    await verified(ledger)


async def test_a_payment_the_ledger_has_credited_is_not_attributed_again(
    pool: asyncpg.Pool, ledger: Ledger, handler: TopupHandler, owner: asyncpg.Connection
) -> None:
    """Belt and braces: an unattributed row whose payment the ledger has under its key (in any
    bucket) is refused, so no second credit in another wallet."""
    credited = (await ledger.open_wallet("ayla", bucket=100)).wallet_id
    target = (await ledger.open_wallet("bob", bucket=200)).wallet_id
    body = topup_body(None, 15 * TL)
    await consume(pool, handler, message(body))
    await ledger.topup(body["payment_id"], credited, 15 * TL, provider="stripe", actor="x", ref="x")
    refused = await _cli("topups", "attribute", body["payment_id"], "--wallet", target)
    assert refused.exit_code == 1 and "credited-already" in refused.output, refused.output
    assert await cash(ledger, target) == 0

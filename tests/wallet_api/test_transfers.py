"""Transfers over HTTP: p2p, payment (fee, promo first), B2P, B2B, refund once, promo grants,
reading a transfer with its legs, balances and the statement with its cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from hiwallet.wallet_api import errors, parties
from hiwallet.wallet_api.accounts import Accounts
from hiwallet.wallet_api.adapters import Repo
from hiwallet.wallet_api.domain import Caller
from hiwallet.wallet_api.settings import WalletApiSettings
from tests.wallet_api.conftest import TL, WalletApi, assert_problem


async def test_p2p_moves_cash_and_shows_in_both_statements(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    r = await api.transfer(alice, bob.number, 40 * TL, reference="dinner")
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["type"] == "p2p" and t["status"] == "posted"
    assert (t["from_wallet"], t["to_wallet"], t["amount"], t["fee"]) == (
        alice.wallet_id,
        bob.wallet_id,
        40 * TL,
        0,
    )
    assert t["reference"] == "dinner" and t["id"].startswith(alice.wallet_id[:4] + ":")
    assert sorted((leg["wallet"], leg["amount"]) for leg in t["legs"]) == sorted(
        [(alice.wallet_id, -40 * TL), (bob.wallet_id, 40 * TL)]
    )
    assert await api.balance(alice.wallet_id) == {"cash": 60 * TL, "promo": 0, "held": 0}
    assert await api.balance(bob.wallet_id) == {"cash": 40 * TL, "promo": 0, "held": 0}
    w = (await api.http.get(f"/v1/wallets/{bob.wallet_id}", headers=bob.auth)).json()
    assert (w["cash"], w["promo"], w["held"], w["available"], w["number"]) == (
        40 * TL,
        0,
        0,
        40 * TL,
        bob.number,
    )

    # Both sides read the transfer with its legs; each sees it in their statement.
    for who in (alice, bob):
        read = await api.http.get(f"/v1/transfers/{t['id']}", headers=who.auth)
        assert read.status_code == 200 and read.json() == t
    lines = (await api.http.get(f"/v1/wallets/{alice.wallet_id}/statement", headers=alice.auth)).json()[
        "lines"
    ]
    assert [(line["type"], line["amount"], line["balance_after"]) for line in lines] == [
        ("topup", 100 * TL, 100 * TL),
        ("p2p", -40 * TL, 60 * TL),
    ]
    # each line's counterparty: none for the top-up, bob's number (and no name) for the transfer
    assert [line["counterparty"] for line in lines] == [
        None,
        {"wallet_number": bob.number, "kind": "personal", "name": None},
    ]
    [received] = (await api.http.get(f"/v1/wallets/{bob.wallet_id}/statement", headers=bob.auth)).json()[
        "lines"
    ]
    assert received["counterparty"] == {"wallet_number": alice.number, "kind": "personal", "name": None}
    await api.verify()


async def test_a_payment_and_its_refund_name_the_business_and_the_payer(api: WalletApi) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business("Kahve Dükkanı")
    paid = await api.transfer(payer, shop.number, 30 * TL, reference="order 7")
    assert paid.status_code == 201, paid.text
    refunded = await api.post(f"/v1/transfers/{paid.json()['id']}/refund", {}, shop.auth, key="refund-7")
    assert refunded.status_code == 201, refunded.text
    lines = (await api.http.get(f"/v1/wallets/{payer.wallet_id}/statement", headers=payer.auth)).json()[
        "lines"
    ]
    business = {"wallet_number": shop.number, "kind": "business", "name": "Kahve Dükkanı"}
    assert [(line["type"], line["counterparty"]) for line in lines] == [
        ("topup", None),
        ("payment", business),
        ("refund", business),
    ]
    shop_lines = (await api.http.get(f"/v1/wallets/{shop.wallet_id}/statement", headers=shop.auth)).json()[
        "lines"
    ]
    assert {line["counterparty"]["wallet_number"] for line in shop_lines} == {payer.number}


@pytest.mark.parametrize(
    "wallet_api_settings", [{"statement_party_cache_size": 3}]
)  # the fixture, overridden
async def test_a_statement_read_again_is_the_same_its_counterparties_kept_or_not(api: WalletApi) -> None:
    """wallet-api keeps the counterparties it has read (a line's never changes) and does not look
    them up again: the pages read again, with a cache that holds fewer lines than they have
    (3: it empties as it fills), are the pages read first, lines without one included."""
    payer = await api.customer(funds=100 * TL)
    friend = await api.customer()
    shop = await api.business("Kahve Dükkanı")
    for n in range(3):
        assert (await api.transfer(payer, shop.number, TL, reference=f"order {n}")).status_code == 201
        assert (await api.transfer(payer, friend.number, TL)).status_code == 201
    await api.fund(payer.wallet_id, 5 * TL)

    async def pages() -> list[dict[str, Any]]:
        got, cursor = [], ""
        while True:
            r = await api.http.get(
                f"/v1/wallets/{payer.wallet_id}/statement?limit=3{cursor}", headers=payer.auth
            )
            assert r.status_code == 200, r.text
            got.append(r.json())
            if r.json()["next_cursor"] is None:
                return got
            cursor = f"&cursor={r.json()['next_cursor']}"

    first = await pages()
    assert [
        [line["counterparty"] and line["counterparty"]["kind"] for line in p["lines"]] for p in first
    ] == [
        [None, "business", "personal"],
        ["business", "personal", "business"],
        ["personal", None],
    ]
    business = {"wallet_number": shop.number, "kind": "business", "name": "Kahve Dükkanı"}
    assert first[0]["lines"][1]["counterparty"] == business
    for _ in range(3):
        assert await pages() == first
    whole = (await api.http.get(f"/v1/wallets/{payer.wallet_id}/statement", headers=payer.auth)).json()
    assert whole["lines"] == [line for p in first for line in p["lines"]]
    # someone else still reads none of it
    assert_problem(
        await api.http.get(f"/v1/wallets/{payer.wallet_id}/statement", headers=friend.auth), "not-found", 404
    )


async def test_a_statement_page_whose_lines_are_all_kept_is_counted_with_the_membership(
    api: WalletApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page whose lines wallet-api holds (StatementLines, top-ups' lines included: they have no
    counterparty for good) is answered from them, byte for byte as read in full, after the
    caller's membership and the lines' count in one statement (wallet_statement_known): a
    stranger is refused as before, and a line posted since shows as a next page."""
    payer = await api.customer(funds=100 * TL)
    friend = await api.customer()
    shop = await api.business("Kahve Dükkanı")
    for n in range(2):
        assert (await api.transfer(payer, shop.number, TL, reference=f"order {n}")).status_code == 201
        assert (await api.transfer(payer, friend.number, TL)).status_code == 201
    me = Caller(api.idp.issuer, payer.subject, None, False)
    stranger = Caller(api.idp.issuer, friend.subject, None, False)
    settings = WalletApiSettings()
    kept = Accounts(api.pool, api.ledger, settings)
    bare = Accounts(api.pool, api.ledger, settings.model_copy(update={"statement_party_cache_size": 0}))

    async def pages(accounts: Accounts) -> list[bytes]:
        return [
            orjson.dumps(await accounts.statement(me, payer.wallet_id, purse="cash", cursor=cursor, limit=2))
            for cursor in (None, "2", "4")
        ]

    first = await pages(bare)
    assert await pages(kept) == first
    assert [orjson.loads(p)["next_cursor"] for p in first] == ["2", "4", None]
    # read again: only the last page is read in full (short: whether it ends there is not known)
    full = Repo.wallet_statement_page
    read_in_full: list[int] = []

    async def counted(self: Repo, *args: Any) -> Any:
        read_in_full.append(args[5])
        return await full(self, *args)

    monkeypatch.setattr(Repo, "wallet_statement_page", counted)
    assert await pages(kept) == first and read_in_full == [4]
    with pytest.raises(errors.NotFound):
        await kept.statement(stranger, payer.wallet_id, purse="cash", cursor=None, limit=2)
    with pytest.raises(errors.NotFound):
        await kept.statement(me, friend.wallet_id, purse="cash", cursor=None, limit=2)
    # a line posted since: the kept page of lines 3 and 4 now has a next page
    assert (await api.transfer(payer, friend.number, TL)).status_code == 201
    read_in_full.clear()
    again = await kept.statement(me, payer.wallet_id, purse="cash", cursor="2", limit=2)
    assert again["next_cursor"] == "4" and read_in_full == []
    assert again == await bare.statement(me, payer.wallet_id, purse="cash", cursor="2", limit=2)


async def test_payment_takes_the_fee_and_spends_promo_first(api: WalletApi) -> None:
    payer = await api.customer("unverified", funds=100 * TL)
    shop = await api.business(funds=50 * TL)
    programme = await api.programme(shop)
    # The shop gives the customer 40 TL of promo, then the customer pays the shop 100 TL.
    grant = await api.post(
        "/v1/promos",
        {
            "from_wallet": shop.wallet_id,
            "to_wallet_number": payer.number,
            "amount": 40 * TL,
            "programme": programme,
            "expires_at": (datetime.now(UTC) + timedelta(days=30)).isoformat(),
        },
        shop.auth,
    )
    assert grant.status_code == 201, grant.text
    assert grant.json()["type"] == "promo_grant"
    batches = (await api.http.get(f"/v1/wallets/{payer.wallet_id}/promos", headers=payer.auth)).json()[
        "batches"
    ]
    assert [(b["amount"], b["remaining"], b["funded_by"]) for b in batches] == [
        (40 * TL, 40 * TL, "business")
    ]

    r = await api.transfer(payer, shop.number, 100 * TL)
    assert r.status_code == 201, r.text
    p = r.json()
    # The architecture document's row: promo −40, cash −62, receiver +100, revenue +2.
    assert (p["type"], p["amount"], p["fee"], p["promo_used"]) == ("payment", 100 * TL, 2 * TL, 40 * TL)
    legs = sorted((leg["role"], leg["purse"], leg["amount"]) for leg in p["legs"])
    assert legs == sorted(
        [
            ("user_wallet", "promo", -40 * TL),
            ("user_wallet", "cash", -62 * TL),
            ("user_wallet", "cash", 100 * TL),
            ("revenue", None, 2 * TL),
        ]
    )
    assert await api.balance(payer.wallet_id) == {"cash": 38 * TL, "promo": 0, "held": 0}
    assert await api.balance(shop.wallet_id) == {"cash": 110 * TL, "promo": 0, "held": 0}
    promo_lines = await api.http.get(
        f"/v1/wallets/{payer.wallet_id}/statement", params={"purse": "promo"}, headers=payer.auth
    )
    assert [line["amount"] for line in promo_lines.json()["lines"]] == [40 * TL, -40 * TL]
    await api.verify()


async def test_a_business_refunds_a_payment_once(api: WalletApi) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    payment = (await api.transfer(payer, shop.number, 50 * TL)).json()
    path = f"/v1/transfers/{payment['id']}/refund"

    # The payer cannot refund it; a p2p cannot be refunded.
    assert_problem(await api.post(path, {}, payer.auth), "not-refundable", 422)
    friend = await api.customer()
    p2p = (await api.transfer(payer, friend.number, 1 * TL)).json()
    assert_problem(
        await api.post(f"/v1/transfers/{p2p['id']}/refund", {}, friend.auth), "not-refundable", 422
    )
    # Another business never sees it.
    other = await api.business("Başka", client="merchant-two")
    assert_problem(await api.post(path, {}, other.auth), "not-found", 404)

    r = await api.post(path, {"reference": "returned goods"}, shop.auth, key="refund-1")
    assert r.status_code == 201, r.text
    refund = r.json()
    assert refund["type"] == "refund" and refund["refund_of"] == payment["id"]
    assert sorted(leg["amount"] for leg in refund["legs"]) == sorted(
        -leg["amount"] for leg in payment["legs"]
    )
    assert (refund["from_wallet"], refund["to_wallet"]) == (shop.wallet_id, payer.wallet_id)
    assert await api.balance(payer.wallet_id) == {"cash": 99 * TL, "promo": 0, "held": 0}
    assert await api.balance(shop.wallet_id) == {"cash": 0, "promo": 0, "held": 0}

    replay = await api.post(path, {"reference": "returned goods"}, shop.auth, key="refund-1")
    assert replay.status_code == 201 and replay.json() == refund
    body = assert_problem(await api.post(path, {}, shop.auth), "already-refunded", 409)
    assert body["refund_id"] == refund["id"]
    read = await api.http.get(f"/v1/transfers/{refund['id']}", headers=payer.auth)
    assert read.status_code == 200 and read.json()["refund_of"] == payment["id"]
    await api.verify()


async def test_refund_needs_the_business_to_hold_the_money(api: WalletApi) -> None:
    payer = await api.customer(funds=100 * TL)
    shop = await api.business()
    payment = (await api.transfer(payer, shop.number, 50 * TL)).json()
    supplier = await api.business("Tedarikçi", client=None)
    assert (await api.transfer(shop, supplier.number, 30 * TL)).status_code == 201
    before = await api.counts()
    body = assert_problem(
        await api.post(f"/v1/transfers/{payment['id']}/refund", {}, shop.auth), "insufficient-funds", 422
    )
    assert body["balance"] == 20 * TL and body["amount"] == 50 * TL
    assert await api.counts() == before
    await api.verify()


async def test_b2p_and_b2b(api: WalletApi) -> None:
    shop = await api.business(funds=100 * TL)
    supplier = await api.business("Tedarikçi", client="merchant-two")
    customer = await api.customer("unverified")
    b2p = await api.transfer(shop, customer.number, 10 * TL)
    assert b2p.status_code == 201 and b2p.json()["type"] == "b2p" and b2p.json()["fee"] == 0
    b2b = await api.transfer(shop, supplier.number, 20 * TL)
    assert b2b.status_code == 201 and b2b.json()["type"] == "b2b"
    assert await api.balance(shop.wallet_id) == {"cash": 70 * TL, "promo": 0, "held": 0}
    assert await api.balance(customer.wallet_id) == {"cash": 10 * TL, "promo": 0, "held": 0}
    back = await api.transfer(supplier, shop.number, 5 * TL)
    assert back.status_code == 201 and back.json()["type"] == "b2b"
    await api.verify()


async def test_refusals_of_a_transfer_write_nothing(api: WalletApi) -> None:
    alice = await api.customer(funds=10 * TL)
    bob = await api.customer()
    before = await api.counts()
    body = assert_problem(await api.transfer(alice, bob.number, 11 * TL), "insufficient-funds", 422)
    assert (body["balance"], body["available"], body["amount"]) == (10 * TL, 10 * TL, 11 * TL)
    assert_problem(await api.transfer(alice, alice.number, 1 * TL), "same-wallet", 422)
    unknown = alice.number[:4] + "000000000000"
    unknown = unknown[:-1] + str((10 - sum(_luhn(unknown[:-1])) % 10) % 10)
    assert_problem(await api.transfer(alice, unknown, 1 * TL), "recipient-not-found", 422)
    bad_check = bob.number[:-1] + str((int(bob.number[-1]) + 1) % 10)
    assert_problem(await api.transfer(alice, bad_check, 1 * TL), "invalid-wallet-number", 422)
    assert_problem(await api.transfer(alice, bob.number, 1 * TL, currency="EUR"), "currency-mismatch", 422)
    assert_problem(await api.transfer(alice, bob.number, 1 * TL, currency="XAU"), "unsupported-currency", 422)
    assert await api.counts() == before
    await api.verify()


def _luhn(digits: str) -> list[int]:
    out = []
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        out.append(d - 9 if d > 9 else d)
    return out


async def test_statement_pages_with_a_cursor(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    for i in range(5):
        assert (await api.transfer(alice, bob.number, (i + 1) * TL)).status_code == 201
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (
            await api.http.get(f"/v1/wallets/{bob.wallet_id}/statement", params=params, headers=bob.auth)
        ).json()
        seen += [line["amount"] for line in page["lines"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert pages < 10
    assert seen == [TL, 2 * TL, 3 * TL, 4 * TL, 5 * TL] and pages == 3
    bad = await api.http.get(f"/v1/wallets/{bob.wallet_id}/statement", params={"limit": 0}, headers=bob.auth)
    assert_problem(bad, "validation-error", 422)


async def test_promo_grant_rules(api: WalletApi) -> None:
    shop = await api.business(funds=10 * TL)
    customer = await api.customer("unverified")
    newcomer = await api.customer("unknown")
    other_shop = await api.business("Diğer", client=None)
    soon = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    programme = await api.programme(shop, amount_per_customer=20 * TL)

    def grant(to: str, amount: int = TL, expires_at: str = soon) -> dict[str, object]:
        return {
            "from_wallet": shop.wallet_id,
            "to_wallet_number": to,
            "amount": amount,
            "programme": programme,
            "expires_at": expires_at,
        }

    before = await api.counts()
    assert_problem(
        await api.post("/v1/promos", grant(newcomer.number), shop.auth), "recipient-cannot-receive", 422
    )
    assert_problem(
        await api.post("/v1/promos", grant(other_shop.number), shop.auth), "recipient-cannot-receive", 422
    )
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    assert_problem(
        await api.post("/v1/promos", grant(customer.number, expires_at=past), shop.auth),
        "invalid-request",
        422,
    )
    assert_problem(
        await api.post("/v1/promos", grant(customer.number, 11 * TL), shop.auth), "insufficient-funds", 422
    )
    # A customer does not grant promo money.
    rich = await api.customer(funds=10 * TL)
    as_customer = {**grant(customer.number), "from_wallet": rich.wallet_id}
    assert_problem(await api.post("/v1/promos", as_customer, rich.auth), "not-a-business", 403)
    after = await api.counts()
    assert {k: after[k] - before[k] for k in after} == {
        "transactions": 1,
        "lines": 2,
        "keys": 0,
        "used": 0,
        "accounts": 1,
        "wallets": 1,
    }  # only the funding of `rich`
    ok = await api.post("/v1/promos", grant(customer.number), shop.auth)
    assert ok.status_code == 201 and ok.json()["expires_at"]
    # Read again, the grant shows the same expiry (and the same everything).
    again = await api.http.get(f"/v1/transfers/{ok.json()['id']}", headers=shop.auth)
    assert again.status_code == 200 and again.json() == ok.json()
    await api.verify()


async def test_the_balance_at_the_end_of_each_day_for_a_chart(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    assert (await api.transfer(alice, bob.number, 30 * TL)).status_code == 201
    r = await api.http.get(f"/v1/wallets/{alice.wallet_id}/balances?days=3", headers=alice.auth)
    assert r.status_code == 200, r.text
    today = datetime.now(UTC).date()
    assert r.json() == {
        "wallet_id": alice.wallet_id,
        "currency": "TRY",
        "days": [
            {"day": (today - timedelta(days=2)).isoformat(), "balance": 0},
            {"day": (today - timedelta(days=1)).isoformat(), "balance": 0},
            {"day": today.isoformat(), "balance": 70 * TL},
        ],
    }
    default = (await api.http.get(f"/v1/wallets/{alice.wallet_id}/balances", headers=alice.auth)).json()
    assert len(default["days"]) == 30 and default["days"][-1]["balance"] == 70 * TL
    # someone else's wallet: not found; more than a year: refused
    assert_problem(
        await api.http.get(f"/v1/wallets/{alice.wallet_id}/balances", headers=bob.auth), "not-found", 404
    )
    assert_problem(
        await api.http.get(f"/v1/wallets/{alice.wallet_id}/balances?days=367", headers=alice.auth),
        "validation-error",
        422,
    )


async def test_an_overview_read_again_keeps_closed_days_only_and_answers_the_same(
    api: WalletApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overview keeps the closing balances of days over by more than the grace (ClosedDays)
    and does not probe them again: its answers, with the cache or without, are the same, a line
    posted today after the kept days included; a day inside the grace is never kept."""
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    caller = Caller(api.idp.issuer, alice.subject, None, False)
    cash = f"{alice.wallet_id}:cash"
    settings = WalletApiSettings()
    kept = Accounts(api.pool, api.ledger, settings)
    bare = Accounts(api.pool, api.ledger, settings.model_copy(update={"overview_day_cache_size": 0}))
    # A two-day grace: of five days, the three latest are inside it, whatever the time of day.
    monkeypatch.setattr(parties, "CLOSED_DAY_GRACE", timedelta(days=2))
    first = await kept.overview(caller, alice.wallet_id, days=5)
    assert first == await bare.overview(caller, alice.wallet_id, days=5)
    today = datetime.now(UTC).date()
    assert kept.closed_days.get(cash) == (today - timedelta(days=4), (0, 0))
    assert bare.closed_days.get(cash) is None
    # No grace: every day before today is kept, today never.
    monkeypatch.setattr(parties, "CLOSED_DAY_GRACE", timedelta(0))
    assert await kept.overview(caller, alice.wallet_id, days=5) == first
    assert kept.closed_days.get(cash) == (today - timedelta(days=4), (0, 0, 0, 0))
    # a line posted today, after the kept days: today's balance is read, the kept days are not
    assert (await api.transfer(alice, bob.number, 30 * TL)).status_code == 201
    again = await kept.overview(caller, alice.wallet_id, days=5)
    assert again == await bare.overview(caller, alice.wallet_id, days=5)
    assert again["days"][-1]["balance"] == 70 * TL and again["cash"] == 70 * TL
    days = (await api.http.get(f"/v1/wallets/{alice.wallet_id}/balances?days=5", headers=alice.auth)).json()
    assert again["days"] == days["days"]
    # what is kept is answered as kept (not probed again): a planted value shows through
    kept.closed_days.put(cash, (today - timedelta(days=4), (0, 0, 0, 7)))
    assert (await kept.overview(caller, alice.wallet_id, days=5))["days"][-2]["balance"] == 7


async def test_the_overview_is_the_wallet_its_live_promos_and_its_days_in_one_answer(api: WalletApi) -> None:
    """What the home page asks once per wallet: exactly the three reads' answers, with their
    authorization (a member only) and their bounds."""
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    assert (await api.transfer(alice, bob.number, 30 * TL)).status_code == 201
    r = await api.http.get(f"/v1/wallets/{alice.wallet_id}/overview?days=3", headers=alice.auth)
    assert r.status_code == 200, r.text
    overview = r.json()
    wallet = (await api.http.get(f"/v1/wallets/{alice.wallet_id}", headers=alice.auth)).json()
    promos = (await api.http.get(f"/v1/wallets/{alice.wallet_id}/promos", headers=alice.auth)).json()
    days = (await api.http.get(f"/v1/wallets/{alice.wallet_id}/balances?days=3", headers=alice.auth)).json()
    assert overview == {**wallet, "batches": promos["batches"], "days": days["days"]}
    assert overview["cash"] == 70 * TL and [d["balance"] for d in overview["days"]] == [0, 0, 70 * TL]
    default = (await api.http.get(f"/v1/wallets/{alice.wallet_id}/overview", headers=alice.auth)).json()
    assert len(default["days"]) == 30 and default["days"][-1]["balance"] == 70 * TL
    assert_problem(
        await api.http.get(f"/v1/wallets/{alice.wallet_id}/overview", headers=bob.auth), "not-found", 404
    )
    assert_problem(
        await api.http.get(f"/v1/wallets/{alice.wallet_id}/overview?days=367", headers=alice.auth),
        "validation-error",
        422,
    )

"""The balance a customer is shown never counts expired promo, even before wallet-consumer's
expiry job has returned it: wallet-api's wallet answer (which the front APIs forward) shows the
live promo only, and a payment can spend no more than that answer says is available."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.wallet_api.conftest import TL, WalletApi, assert_problem


async def test_expired_promo_is_neither_shown_nor_spent_before_the_job_runs(api: WalletApi) -> None:
    payer = await api.customer(funds=10 * TL)
    shop = await api.business(funds=100 * TL)
    past = datetime.now(UTC) - timedelta(seconds=1)
    # Granted already expired (the clock moved, not waited for): 40 TL of the shop's, 6 TL of
    # the platform's; and 5 TL that stay live. No expiry job runs in this test.
    await api.ledger.promo_grant(
        "g-shop", payer.wallet_id, 40 * TL, expires_at=past, actor="t", ref="w", business=shop.wallet_id
    )
    await api.ledger.promo_grant("g-platform", payer.wallet_id, 6 * TL, expires_at=past, actor="t", ref="c")
    later = datetime.now(UTC) + timedelta(days=5)
    await api.ledger.promo_grant("g-live", payer.wallet_id, 5 * TL, expires_at=later, actor="t", ref="c")

    w = (await api.http.get(f"/v1/wallets/{payer.wallet_id}", headers=payer.auth)).json()
    assert (w["cash"], w["promo"], w["held"], w["available"]) == (10 * TL, 5 * TL, 0, 15 * TL)
    # and the batches listed are the live one only
    listed = (await api.http.get(f"/v1/wallets/{payer.wallet_id}/promos", headers=payer.auth)).json()
    assert [(b["amount"], b["remaining"]) for b in listed["batches"]] == [(5 * TL, 5 * TL)]
    # and the home page's overview says the same (the web app shows its figures)
    seen = (await api.http.get(f"/v1/wallets/{payer.wallet_id}/overview", headers=payer.auth)).json()
    assert (seen["promo"], seen["available"]) == (5 * TL, 15 * TL)
    assert seen["batches"] == listed["batches"]

    # 15 TL and its 2 % fee is more than available: refused, though the promo account holds 51 TL
    assert_problem(await api.transfer(payer, shop.number, 15 * TL), "insufficient-funds", 422)
    r = await api.transfer(payer, shop.number, 14 * TL)
    assert r.status_code == 201, r.text
    assert r.json()["promo_used"] == 5 * TL  # the live batch only
    w = (await api.http.get(f"/v1/wallets/{payer.wallet_id}", headers=payer.auth)).json()
    assert (w["cash"], w["promo"], w["available"]) == (10 * TL - (14 * TL + 28 - 5 * TL), 0, 1 * TL - 28)

    # The job, when it runs, returns what expired; the customer's answer does not change.
    shop_before = (await api.ledger.wallet_balance(shop.wallet_id)).cash
    assert await api.ledger.expire_promos(actor="job") == 2
    after = (await api.http.get(f"/v1/wallets/{payer.wallet_id}", headers=payer.auth)).json()
    assert after == w
    assert (await api.ledger.wallet_balance(shop.wallet_id)).cash == shop_before + 40 * TL
    await api.verify()

from __future__ import annotations

from tests.wallet_api.conftest import TL, WalletApi


async def test_p2p_and_statement(api: WalletApi) -> None:
    alice = await api.customer(funds=100 * TL)
    bob = await api.customer()
    r = await api.transfer(alice, bob.number, 40 * TL)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["type"] == "p2p" and body["amount"] == 40 * TL
    s = await api.http.get(f"/v1/wallets/{bob.wallet_id}/statement", headers=bob.auth)
    assert s.status_code == 200, s.text
    assert [line["amount"] for line in s.json()["lines"]] == [40 * TL]
    await api.verify()

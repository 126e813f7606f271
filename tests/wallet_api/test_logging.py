"""wallet-api's lines as an operator reads them: one access line per request with the route
template and the request id (the hot lane's included), and nothing of the request itself."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.wallet_api.conftest import WalletApi


def access_lines(err: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "request" and line["service"] == "wallet-api"]


async def test_a_transfer_and_a_read_each_leave_one_access_line(
    api: WalletApi, capsys: pytest.CaptureFixture[str]
) -> None:
    alice = await api.customer(funds=10_000)
    bob = await api.customer()
    capsys.readouterr()
    body = {
        "from_wallet": alice.wallet_id,
        "to_wallet_number": bob.number,
        "amount": 1_250,
        "reference": "rent for Ayşe",
    }
    paid = await api.http.post(
        "/v1/transfers",
        json=body,
        headers={**alice.auth, "Idempotency-Key": "log-1", "X-Request-Id": "client-req-1"},
    )
    assert paid.status_code == 201, paid.text
    assert paid.headers["x-request-id"] == "client-req-1"
    read = await api.http.get(f"/v1/wallets/{alice.wallet_id}", headers=alice.auth)
    assert read.status_code == 200
    err = capsys.readouterr().err
    transfer, wallet = access_lines(err)
    assert (transfer["method"], transfer["route"], transfer["status"]) == ("POST", "/v1/transfers", 201)
    assert transfer["request_id"] == "client-req-1"
    assert (wallet["route"], wallet["status"]) == ("/v1/wallets/{wallet_id}", 200)
    assert wallet["request_id"] == read.headers["x-request-id"]
    for secret in (alice.token, alice.wallet_id, bob.number, "Ayşe", "log-1", alice.username):
        assert secret not in err

"""A request's fingerprint is the SHA-256 of the standard library's compact, key-sorted JSON of
it, whichever writer made the bytes (request_hash writes a plain payload with orjson): a stored
fingerprint must keep matching its own request after an upgrade."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import pytest

from hiwallet.wallet_api.idempotency import request_hash


def _reference(operation: str, payload: Any) -> bytes:
    content = json.dumps([operation, payload], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(content.encode()).digest()


TEXTS = [
    "",
    "plain",
    'a "quoted" \\ back/slash',
    "tab\tnew\nline\r",
    "\x00\x1f\x7f",
    "ünïcödé",
    "emoji 💸",
    "\u2028\u2029",
    "x" * 300,
]


@pytest.mark.parametrize("text", TEXTS)
def test_a_transfer_fingerprint_is_the_standard_librarys(text: str) -> None:
    payload = {
        "from_wallet": "0042:w:0190f3c2-0000-7000-8000-000000000000",
        "to_wallet_number": "0042123456789012",
        "amount": 12_50,
        "currency": "TRY",
        "reference": text,
    }
    assert request_hash("transfer", payload) == _reference("transfer", payload)
    assert request_hash("transfer", {**payload, "reference": None}) == _reference(
        "transfer", {**payload, "reference": None}
    )


@pytest.mark.parametrize(
    "value",
    [0, -1, 2**63 - 1, -(2**63), 2**64, 10**30, True, 1.5, None, ["a"], {"b": 1}],
)
def test_every_kind_of_value_hashes_as_before(value: Any) -> None:
    payload = {"z": value, "a": "first", "M": 3}
    assert request_hash("op", payload) == _reference("op", payload)


def test_random_printable_and_other_text_hashes_as_before() -> None:
    rng = random.Random(26)
    alphabet = [chr(c) for c in range(0, 0x80)] + ["é", "€", "\ud7ff", "𝄞"]
    for _ in range(2_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        payload = {text or "k": text, "amount": rng.randint(-(2**70), 2**70)}
        assert request_hash(text, payload) == _reference(text, payload)

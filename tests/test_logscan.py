"""The log scan itself (tests/logscan.py): what it must find, and the lines of every day (ids,
hashes, timestamps, counts, masked IBANs) it must not take for personal data."""

from __future__ import annotations

import pytest

from tests.logscan import find_secrets

FOUND = {
    "phone number": [
        '{"event":"sms sent","to":"+905321110009"}',
        "code sent to 0532 111 00 09",
        '{"phone":"5321110009"}',
        "+90 532 123 45 67",
    ],
    "TCKN": ['{"event":"registry asked","tckn":"10000000146"}', "tckn 12345678950 checked"],
    "IBAN": [
        '{"destination_iban":"TR330006100519786457841326"}',
        "to TR33 0006 1005 1978 6457 8413 26",
        '{"sender_iban":"DE89370400440532013000"}',
    ],
    "name": [
        '{"sender_name":"Ayşe Yılmaz"}',
        '{"first_name":"AYŞE","last_name":"YILMAZ"}',
        "invitation for Deniz Kaya",
        '{"name":"ZEYNEP NUR KAYA"}',
        "given_name=ismail family_name=çelik",
        "MEHMET ÖZTÜRK",
    ],
}

CLEAN = [
    '{"timestamp":"2026-12-03T12:11:18.123456Z","level":"info","event":"request","duration_ms":5.321}',
    '{"count":5321110009,"purged":10000000146}',  # numbers, not strings: counts
    '{"request_id":"0190aaaa-bbbb-7ccc-8ddd-532111000912"}',
    '{"wallet":"0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000","payment_id":"0042:pi_3Q5321110009"}',
    '{"sha256":"9f10000000146ab5e3a1b5321110009c0ffee12345678950"}',
    '{"destination":"TR** **** **** 1326"}',  # masked
    '{"iban":"TR330006100519786457841327"}',  # one digit off: its check digits fail
    '{"tckn":"10000000147"}',  # one digit off: its check digits fail
    '{"epoch_ms":1733225478123,"kid":"k-5321110009x"}',
    '{"event":"the Validation of Alive accounts","queue":"hiwallet.topups.p2"}',
    '{"event":"transfer","amount_minor":12345678950}',
    '{"actor":"operator:ayla","realm":"hiwallet-staff"}',
]


@pytest.mark.parametrize(("kind", "line"), [(kind, line) for kind, lines in FOUND.items() for line in lines])
def test_personal_data_is_found(kind: str, line: str) -> None:
    assert kind in {k for k, _ in find_secrets(line)}


@pytest.mark.parametrize("line", CLEAN)
def test_ids_hashes_timestamps_and_counts_are_not(line: str) -> None:
    assert find_secrets(line) == []

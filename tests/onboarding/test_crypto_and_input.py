"""The key ring, the keyed hashes and the input rules, without a server."""

from __future__ import annotations

import base64
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hiwallet.contracts.onboarding_api import PHONE_PATTERN, PhoneIn
from hiwallet.onboarding import errors
from hiwallet.onboarding.crypto import Hasher, KeyMisconfigured, KeyRing, Undecryptable, kid_of, place
from hiwallet.onboarding.registry import envelope, turkish_upper
from hiwallet.onboarding.service import _E164, mask_phone, normalize_phone
from hiwallet.onboarding.settings import DEV_DATA_KEYS, DEV_HASH_KEY

KEY_A = "a:" + base64.b64encode(b"A" * 32).decode()
KEY_B = "b:" + base64.b64encode(b"B" * 16).decode()


def test_the_first_key_seals_and_every_key_opens() -> None:
    old = KeyRing.parse(KEY_B)
    sealed_old = old.seal("10000000146", place("customers", "tckn_enc", "c1"))
    ring = KeyRing.parse(f"{KEY_A}, {KEY_B}")
    sealed_new = ring.seal("10000000146", place("customers", "tckn_enc", "c1"))
    assert (kid_of(sealed_old), kid_of(sealed_new)) == ("b", "a")
    assert ring.open(sealed_old, place("customers", "tckn_enc", "c1")) == "10000000146"
    assert ring.needs_rekey(sealed_old) and not ring.needs_rekey(sealed_new)
    # the same text twice: two different ciphertexts (a nonce each)
    assert ring.seal("x", "p") != ring.seal("x", "p")
    with pytest.raises(Undecryptable, match="not in the ring"):
        KeyRing.parse(KEY_A).open(sealed_old, place("customers", "tckn_enc", "c1"))


def test_a_tampered_or_truncated_value_does_not_open() -> None:
    ring = KeyRing.parse(KEY_A)
    sealed = bytearray(ring.seal("Ayşe", "here"))
    sealed[-1] ^= 1
    with pytest.raises(Undecryptable):
        ring.open(bytes(sealed), "here")
    with pytest.raises(Undecryptable):
        ring.open(b"\x01\x01a", "here")
    with pytest.raises(Undecryptable):
        ring.open(b"", "here")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "nokid",
        "a:not base64!",
        "a:" + base64.b64encode(b"short").decode(),
        f"{KEY_A},{KEY_A}",
        "bad kid:AAAA",
    ],
)
def test_a_bad_key_ring_is_refused_without_showing_the_key(text: str) -> None:
    with pytest.raises(KeyMisconfigured) as refused:
        KeyRing.parse(text)
    assert "QUFB" not in str(refused.value)  # the key's base64 is never in the message


def test_keyed_hashes_depend_on_the_key_and_the_purpose() -> None:
    one = Hasher.parse(DEV_HASH_KEY)
    other = Hasher.parse(base64.b64encode(b"k" * 32).decode())
    assert one.email(" Ayse@Example.com ") == one.email("ayse@example.com")
    assert one.tckn("10000000146") != other.tckn("10000000146")
    assert one.tckn("10000000146") != one("email", "10000000146")
    assert one.code("reg-1", "123456") != one.code("reg-2", "123456")
    with pytest.raises(KeyMisconfigured):
        Hasher.parse(base64.b64encode(b"short").decode())
    KeyRing.parse(DEV_DATA_KEYS)


@pytest.mark.parametrize(
    ("given", "e164"),
    [
        ("+905321234567", "+905321234567"),
        ("0532 123 45 67", "+905321234567"),
        ("532-123-4567", "+905321234567"),
        ("(0532) 123 45 67", "+905321234567"),
        ("90 532 123 45 67", "+905321234567"),
        ("0090 532 123 45 67", "+905321234567"),
        ("+44 7911 123456", "+447911123456"),
    ],
)
def test_phone_numbers_as_people_write_them(given: str, e164: str) -> None:
    assert normalize_phone(given) == e164


@pytest.mark.parametrize("given", ["+90 212 123 45 67", "0212 123 45 67", "12345", "+0123456789", "phone"])
def test_phone_numbers_refused(given: str) -> None:
    with pytest.raises(errors.PhoneInvalid):
        normalize_phone(given)


@settings(max_examples=200, derandomize=True, database=None)
@given(st.from_regex(PHONE_PATTERN, fullmatch=True))
def test_what_the_document_calls_a_phone_number_the_service_takes(text: str) -> None:
    """The document's pattern says no more than the service takes (and PhoneIn the pattern)."""
    assume(len(text) <= 32)
    assert PhoneIn(phone=text).phone == text
    assert _E164.fullmatch(normalize_phone(text))


@st.composite
def written_numbers(draw: st.DrawFn) -> str:
    """A number as people write it: a prefix, digits, at most two separators between them."""
    prefix = draw(st.sampled_from(["", "+", "00", "0", "+90", "0090", "90", "(0"]))
    digits = draw(st.lists(st.sampled_from("0123456789"), min_size=6, max_size=16))
    separators = st.sampled_from(["", "", " ", "-", ".", ") ", " (", "  "])
    return prefix + "".join(d + draw(separators) for d in digits)


@settings(max_examples=400, derandomize=True, database=None)
@given(written_numbers())
def test_what_the_service_takes_as_a_phone_number_the_document_says(text: str) -> None:
    """...and no less: a number it would take, written with at most two separators between
    digits, is never refused as malformed."""
    assume(len(text) <= 32)
    try:
        normalize_phone(text)
    except errors.PhoneInvalid:
        return
    assert re.fullmatch(PHONE_PATTERN, text), text
    PhoneIn(phone=text)


@pytest.mark.parametrize(
    "given", ["+90 212 123 45 67", "0212 123 45 67", "12345", "+0123456789", "phone", "05321234567\t"]
)
def test_phone_numbers_refused_by_the_document(given: str) -> None:
    with pytest.raises(ValidationError):
        PhoneIn(phone=given)


def test_the_mask_and_the_registry_request() -> None:
    assert mask_phone("+905321234567") == "+90********67"
    assert turkish_upper("  zeynep   nur ") == "ZEYNEP NUR"
    assert turkish_upper("ismail ılık") == "İSMAİL ILIK"
    body = envelope("10000000146", "Ayşe <x>", "Yılmaz & Co", 1990).decode()
    assert "<Ad>AYŞE &lt;X&gt;</Ad>" in body and "<Soyad>YILMAZ &amp; CO</Soyad>" in body
    assert "<DogumYili>1990</DogumYili>" in body

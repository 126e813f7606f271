"""Personal data at rest: AES-GCM field encryption under a key ring, and keyed hashes.

A sealed field is ``0x01 | len(kid) | kid | nonce(12) | ciphertext+tag``: it names the key that
sealed it, so a ring holding the old and the new key reads both while ``hiwallet onboarding
rekey`` re-seals the old under the new. The associated data binds each value to its place
(``table.column:row id``): a ciphertext copied into another row or column does not open.

The keyed hash (HMAC-SHA256, its own key, a purpose prefix) makes lookups and uniqueness work
without the database ever holding a readable e-mail, phone number or TCKN, and without the
hashes of one purpose matching those of another."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from hiwallet.core import sealing


class KeyMisconfigured(Exception):
    """The key ring or the hash key is not usable; the message says why (never the key)."""


class Undecryptable(Exception):
    """A sealed value cannot be opened: its key is not in the ring, or it was tampered with or
    moved to another place."""


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyMisconfigured(f"{what} is not valid base64") from exc


@dataclass(frozen=True)
class KeyRing:
    """``kid:base64key,...``: the first seals, every one opens. The platform's key ring and sealed
    format (:class:`hiwallet.core.sealing.KeyRing`), for text: a field is sealed from its UTF-8
    and opened to it; its errors are this module's."""

    ring: sealing.KeyRing

    @property
    def active(self) -> str:
        return self.ring.active

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        try:
            return cls(sealing.KeyRing.parse(text))
        except sealing.KeyMisconfigured as exc:  # its message names a kid at most, never a key
            raise KeyMisconfigured(f"the data keys: {exc}") from exc

    def seal(self, plaintext: str, place: str) -> bytes:
        return self.ring.seal(plaintext.encode(), place)

    def open(self, blob: bytes, place: str) -> str:
        try:
            return self.ring.open(blob, place).decode()
        except sealing.Unopenable as exc:
            raise Undecryptable(str(exc)) from exc

    def needs_rekey(self, blob: bytes) -> bool:
        return kid_of(blob) != self.active


def kid_of(blob: bytes) -> str:
    """The kid a sealed value names."""
    try:
        return sealing.kid_of(blob)
    except sealing.Unopenable as exc:
        raise Undecryptable(str(exc)) from exc


def place(table: str, column: str, row_id: str) -> str:
    """The associated data of a field: where it lives."""
    return f"onboarding.{table}.{column}:{row_id}"


@dataclass(frozen=True)
class Hasher:
    key: bytes

    @classmethod
    def parse(cls, text: str) -> Hasher:
        raw = _b64(text, "the hash key")
        if len(raw) < 32:
            raise KeyMisconfigured(f"the hash key is {len(raw)} bytes; at least 32")
        return cls(raw)

    def __call__(self, purpose: str, value: str) -> bytes:
        return hmac.new(self.key, f"{purpose}\x00{value}".encode(), hashlib.sha256).digest()

    def email(self, email: str) -> bytes:
        return self("email", normalize_email(email))

    def tckn(self, tckn: str) -> bytes:
        return self("tckn", tckn.strip())

    def phone(self, phone: str) -> bytes:
        return self("phone", phone)

    def code(self, owner: str, code: str) -> bytes:
        # Bound to its registration or customer: a code hash says nothing about another's.
        return self("code", f"{owner}\x00{code}")


def normalize_email(email: str) -> str:
    return email.strip().lower()

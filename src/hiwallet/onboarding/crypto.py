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
import os
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = 1
_NONCE = 12
_KID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


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
    """``kid:base64key,...``: the first seals, every one opens."""

    keys: dict[str, AESGCM]
    active: str

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        keys: dict[str, AESGCM] = {}
        active = ""
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            kid, sep, encoded = part.partition(":")
            if not sep or not _KID.fullmatch(kid):
                raise KeyMisconfigured("a data key is kid:base64key, the kid 1-32 of A-Z a-z 0-9 _ . -")
            raw = _b64(encoded, f"data key {kid}")
            if len(raw) not in (16, 24, 32):
                raise KeyMisconfigured(f"data key {kid} is {len(raw)} bytes; AES needs 16, 24 or 32")
            if kid in keys:
                raise KeyMisconfigured(f"data key {kid} is given twice")
            keys[kid] = AESGCM(raw)
            active = active or kid
        if not keys:
            raise KeyMisconfigured("no data key")
        return cls(keys, active)

    def seal(self, plaintext: str, place: str) -> bytes:
        kid = self.active.encode()
        nonce = os.urandom(_NONCE)
        sealed = self.keys[self.active].encrypt(nonce, plaintext.encode(), place.encode())
        return bytes([_VERSION, len(kid)]) + kid + nonce + sealed

    def open(self, blob: bytes, place: str) -> str:
        kid = kid_of(blob)
        key = self.keys.get(kid)
        if key is None:
            raise Undecryptable(f"sealed under key {kid}, which is not in the ring")
        start = 2 + len(kid)
        try:
            plain = key.decrypt(blob[start : start + _NONCE], blob[start + _NONCE :], place.encode())
        except InvalidTag as exc:
            raise Undecryptable("the value does not open here (tampered, or moved)") from exc
        return plain.decode()

    def needs_rekey(self, blob: bytes) -> bool:
        return kid_of(blob) != self.active


def kid_of(blob: bytes) -> str:
    if len(blob) < 2 + _NONCE + 16 or blob[0] != _VERSION or len(blob) < 2 + blob[1] + _NONCE + 16:
        raise Undecryptable("not a sealed value")
    return blob[2 : 2 + blob[1]].decode("ascii", errors="replace")


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

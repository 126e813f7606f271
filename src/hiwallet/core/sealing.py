"""Secrets at rest: AES-GCM under a key ring, each sealed value bound to its place.

A sealed value is ``0x01 | len(kid) | kid | nonce(12) | ciphertext+tag``: it names the key that
sealed it, so a ring holding the old and the new key opens both while values are sealed again
under the new one. The associated data is the value's place (e.g. ``table.column:row id``): a
ciphertext copied into another row does not open. A service that keeps a secret it must use
later (a webhook's signing secret) seals it with this; onboarding's personal data
(hiwallet.onboarding.crypto) is sealed by the same ring, as text."""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KeyMisconfigured", "KeyRing", "Unopenable", "kid_of"]

_VERSION = 1
_NONCE = 12
_TAG = 16
_KID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


class KeyMisconfigured(Exception):
    """The key ring is not usable; the message says why (never the key)."""


class Unopenable(Exception):
    """A sealed value does not open: its key is not in the ring, or it was changed or moved."""


@dataclass(frozen=True)
class KeyRing:
    """``kid:base64key,...`` (16, 24 or 32 bytes each): the first seals, every one opens."""

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
                raise KeyMisconfigured("a key is kid:base64key, the kid 1-32 of A-Z a-z 0-9 _ . -")
            try:
                raw = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise KeyMisconfigured(f"key {kid} is not valid base64") from exc
            if len(raw) not in (16, 24, 32):
                raise KeyMisconfigured(f"key {kid} is {len(raw)} bytes; AES needs 16, 24 or 32")
            if kid in keys:
                raise KeyMisconfigured(f"key {kid} is given twice")
            keys[kid] = AESGCM(raw)
            active = active or kid
        if not keys:
            raise KeyMisconfigured("no key")
        return cls(keys, active)

    def seal(self, plaintext: bytes, place: str) -> bytes:
        kid = self.active.encode()
        nonce = os.urandom(_NONCE)
        sealed = self.keys[self.active].encrypt(nonce, plaintext, place.encode())
        return bytes([_VERSION, len(kid)]) + kid + nonce + sealed

    def open(self, blob: bytes, place: str) -> bytes:
        kid = kid_of(blob)
        key = self.keys.get(kid)
        if key is None:
            raise Unopenable(f"sealed under key {kid}, which is not in the ring")
        start = 2 + len(kid)
        try:
            return key.decrypt(blob[start : start + _NONCE], blob[start + _NONCE :], place.encode())
        except InvalidTag as exc:
            raise Unopenable("the value does not open here (changed, or moved)") from exc


def kid_of(blob: bytes) -> str:
    """The kid a sealed value names (the key that sealed it); :class:`Unopenable` if it is not
    a sealed value."""
    if len(blob) < 2 + _NONCE + _TAG or blob[0] != _VERSION or len(blob) < 2 + blob[1] + _NONCE + _TAG:
        raise Unopenable("not a sealed value")
    return blob[2 : 2 + blob[1]].decode("ascii", errors="replace")

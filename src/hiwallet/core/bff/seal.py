"""Sealed cookies: a value the browser carries but can neither read nor change.

AES-256-GCM (``cryptography``) under a key ring: the first key seals, every key opens, so a key
is rotated by putting the new one first and dropping the old once its cookies have expired. The
cookie's name is the associated data, so a value sealed for one cookie is not accepted as
another (the login flow's cookie as the session's, say). A value that does not open (tampered,
truncated, sealed under a key that was dropped, or for another cookie) is ``None``: the caller
treats it as absent."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KEY_BYTES", "SealError", "Sealer", "parse_key_ring"]

KEY_BYTES = 32  # AES-256
_NONCE_BYTES = 12  # GCM's standard nonce; random per seal (2**32 seals per key stay far from a collision)
_KID_MAX = 16
# A browser keeps a cookie of at most 4,096 bytes (RFC 6265 §6.1): refuse to seal more than
# fits, loudly, rather than have the browser drop it silently.
MAX_SEALED_CHARS = 4_000


class SealError(ValueError):
    """A key ring that cannot be used, or a value too large to seal into a cookie."""


def parse_key_ring(value: str) -> dict[str, bytes]:
    """``"kid:base64url-key,kid2:…"`` (first seals) -> ``{kid: key}`` in that order."""
    ring: dict[str, bytes] = {}
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        kid, sep, encoded = part.partition(":")
        if not sep or not kid or len(kid) > _KID_MAX or not kid.isalnum():
            raise SealError(f"a key is 'kid:base64url', with an alphanumeric kid of at most {_KID_MAX}")
        try:
            key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError) as exc:
            raise SealError(f"the key {kid!r} is not base64url") from exc
        if len(key) != KEY_BYTES:
            raise SealError(f"the key {kid!r} is {len(key)} bytes, not {KEY_BYTES}")
        if kid in ring:
            raise SealError(f"the key id {kid!r} appears twice")
        ring[kid] = key
    if not ring:
        raise SealError("the key ring is empty")
    return ring


class Sealer:
    def __init__(self, ring: Mapping[str, bytes]) -> None:
        if not ring:
            raise SealError("the key ring is empty")
        self._ciphers = {kid: AESGCM(key) for kid, key in ring.items()}
        self._current = next(iter(ring))

    def seal(self, name: str, value: Mapping[str, Any]) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[self._current].encrypt(nonce, orjson.dumps(value), name.encode())
        text = f"{self._current}.{base64.urlsafe_b64encode(nonce + sealed).rstrip(b'=').decode()}"
        if len(text) > MAX_SEALED_CHARS:
            raise SealError(f"a sealed {name} of {len(text)} characters does not fit in a cookie")
        return text

    def open(self, name: str, text: str | None) -> dict[str, Any] | None:
        if not text or len(text) > MAX_SEALED_CHARS:
            return None
        kid, sep, encoded = text.partition(".")
        cipher = self._ciphers.get(kid)
        if not sep or cipher is None:
            return None
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            plain = cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], name.encode())
            value = orjson.loads(plain)
        except (binascii.Error, ValueError, InvalidTag, orjson.JSONDecodeError):
            return None
        return value if isinstance(value, dict) else None

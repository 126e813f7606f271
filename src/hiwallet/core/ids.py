"""Identifiers. Generated ids are UUIDv7 (time-ordered) strings; derived ids are UUIDv5."""

from __future__ import annotations

import uuid

from uuid6 import uuid7

# A fixed namespace so that an id derived from (scope, key) is the same on every machine.
HIWALLET_NAMESPACE = uuid.UUID("6f1c3a52-0b7e-4c3e-9d56-2a7e1f9b8c40")


def new_id() -> str:
    return str(uuid7())


def derived_id(*parts: str) -> str:
    """A stable id for what a movement is for, e.g. ``derived_id("refund", original_id)``."""
    return str(uuid.uuid5(HIWALLET_NAMESPACE, "\x1f".join(parts)))

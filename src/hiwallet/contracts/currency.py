"""A currency as every service's API takes it: an ISO 4217 code of the right shape in the request
model, and in the OpenAPI document the enum of the currencies the service supports (its setting,
the one source: a document made from the code alone would admit any three letters). A code of
the right shape that is not supported is 422 ``unsupported-currency`` (contracts.problems), with
the supported ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field, StrictStr

__all__ = ["CURRENCY_MARK", "Currency", "declare_currencies"]

# Marks a currency in a model's JSON schema, until declare_currencies puts the enum in its place.
CURRENCY_MARK = "x-hiwallet-currency"

Currency = Annotated[
    StrictStr,
    Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code.", json_schema_extra={CURRENCY_MARK: True}),
]


def declare_currencies(node: Any, currencies: Sequence[str]) -> None:
    """Every marked currency of an OpenAPI document (``node``, walked in place) becomes the enum
    of ``currencies``."""
    if isinstance(node, dict):
        if node.pop(CURRENCY_MARK, False):
            node["enum"] = list(currencies)
        for value in node.values():
            declare_currencies(value, currencies)
    elif isinstance(node, list):
        for value in node:
            declare_currencies(value, currencies)

"""The withdrawal saga's shared contract (hiwallet.contracts.withdrawals): every message type is
routed to exactly one queue, the topology binds each type where the contract says, and the
models refuse what the saga must never carry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hiwallet.contracts.withdrawals import (
    BANK_QUEUE,
    COMMANDS,
    MESSAGE_TYPES,
    ORCHESTRATOR_QUEUE,
    RESULTS,
    WALLET_QUEUE,
    WITHDRAWALS_EXCHANGE,
    DebitForWithdrawal,
    StartBankTransfer,
    command_id,
    withdrawals_topology,
)


def test_every_type_goes_to_one_queue() -> None:
    assert set(COMMANDS) | set(RESULTS) == set(MESSAGE_TYPES)
    assert not set(COMMANDS) & set(RESULTS)
    topology = withdrawals_topology()
    bound = {
        key: queue.name
        for queue in topology.queues
        for exchange, key in queue.bindings
        if exchange == WITHDRAWALS_EXCHANGE
    }
    assert bound == {**COMMANDS, **RESULTS}
    assert {q.name for q in topology.queues} >= {WALLET_QUEUE, BANK_QUEUE, ORCHESTRATOR_QUEUE}
    assert bound["StartBankTransfer"] == BANK_QUEUE


def test_command_ids_are_stable_per_saga_and_step() -> None:
    assert command_id("s1", "debit") == command_id("s1", "debit")
    assert command_id("s1", "debit") != command_id("s1", "bank")
    assert command_id("s1", "debit") != command_id("s2", "debit")


def test_models_refuse_what_the_saga_must_not_carry() -> None:
    good = {
        "command_id": "c1",
        "saga_id": "s1",
        "wallet": "0001:w:abc",
        "amount_minor": 100,
        "currency": "TRY",
        "requested_by": {"issuer": "http://i", "subject": "u"},
    }
    DebitForWithdrawal.model_validate(good)
    for field, value in [
        ("amount_minor", 0),
        ("amount_minor", 1.5),
        ("amount_minor", "100"),
        ("currency", "try"),
    ]:
        with pytest.raises(ValidationError):
            DebitForWithdrawal.model_validate({**good, field: value})
    with pytest.raises(ValidationError):
        StartBankTransfer.model_validate(
            {
                "command_id": "c",
                "saga_id": "s",
                "amount_minor": 1,
                "currency": "TRY",
                "destination_iban": "tr33 0006",
            }
        )

"""The withdrawal saga end to end, with real processes (tests/e2e/withdrawals.py): a customer's
request to withdrawal-orchestrator with a real token, wallet-consumer's postings, bank-adapter
and bank-fake's transfer, its signed callback through bank-webhook, and back. Each test ends with
the saga in its final state, the wallet right to the kuruş (amount + fee) and the ledger
verified.
"""

from __future__ import annotations

import asyncio

from tests.e2e.withdrawals import FEE_MINOR, WithdrawalSystem

TL = 100


async def test_happy_path(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    iban = system.iban()
    saga_id = await system.withdraw(customer, 250 * TL, iban)

    saga = await system.ended(
        saga_id,
        "completed",
        customer.wallet_id,
        1_000 * TL - 250 * TL - FEE_MINOR,
        ["withdrawal", "settlement_withdrawal"],
    )
    assert saga["fee_minor"] == FEE_MINOR
    assert await system.path(saga_id) == [
        "initiated",
        "debited",
        "bank_transfer_pending",
        "settling",
        "completed",
    ]
    [transfer] = await system.transfers(saga_id)
    assert (transfer["state"], transfer["outcome_source"]) == ("succeeded", "callback")
    assert saga["bank_reference"] == transfer["bank_reference"]
    [at_bank] = await system.bank.transfers(transfer["command_id"])
    assert (at_bank["status"], at_bank["amount_minor"], at_bank["destination_iban"]) == (
        "succeeded",
        250 * TL,
        iban,
    )

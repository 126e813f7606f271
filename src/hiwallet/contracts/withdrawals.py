"""The withdrawal saga's messages and topology: the contract its processes share.

Every command and result of the saga travels through ``hiwallet.withdrawals`` (direct exchange,
routing key = the message's type: docs/architecture.md). The bodies are JSON objects with the fields of the
models below (snake_case: ``CommandId``, ``SagaId``, ``Amount``, ``Currency``,
``DestinationIban`` are ``command_id``, ``saga_id``, ``amount_minor``, ``currency``,
``destination_iban``). The AMQP message's ``type`` is the model's name and its correlation id the
saga id.

- A command's ``command_id`` is derived from the saga and the step (:func:`command_id`), so a
  command published again (the stuck saga scan) carries the same id: its handler finds the stored
  response under that id and publishes it again instead of acting twice.
- A result carries the ``command_id`` of the command it answers.

Queues (quorum, a delivery limit, dead letters to ``hiwallet.withdrawals.dead``): the wallet's
commands to ``hiwallet.withdrawals.wallet`` (wallet-consumer), the bank's to
``hiwallet.withdrawals.bank`` (bank-adapter), every result to ``hiwallet.withdrawals.orchestrator``.
No single active consumer: the saga's state, not the queue's order, decides what a result means,
so several instances may consume each queue.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from hiwallet.contracts.topups import DEAD_LETTER_EXCHANGE
from hiwallet.core.broker import DELIVERY_LIMIT, ExchangeSpec, QueueSpec, Topology, dead_letter_topology
from hiwallet.core.ids import derived_id

__all__ = [
    "BANK_QUEUE",
    "COMMANDS",
    "MESSAGE_TYPES",
    "ORCHESTRATOR_QUEUE",
    "RESULTS",
    "WALLET_QUEUE",
    "WITHDRAWALS_DEAD_LETTER_KEY",
    "WITHDRAWALS_DEAD_LETTER_QUEUE",
    "WITHDRAWALS_EXCHANGE",
    "BankTransferFailed",
    "BankTransferSucceeded",
    "DebitForWithdrawal",
    "RefundWithdrawal",
    "RejectReason",
    "Requester",
    "SettleWithdrawal",
    "StartBankTransfer",
    "WithdrawalDebitRejected",
    "WithdrawalDebited",
    "WithdrawalMessage",
    "WithdrawalRefunded",
    "WithdrawalSettled",
    "command_id",
    "withdrawals_topology",
]

WITHDRAWALS_EXCHANGE = "hiwallet.withdrawals"
WALLET_QUEUE = "hiwallet.withdrawals.wallet"
BANK_QUEUE = "hiwallet.withdrawals.bank"
ORCHESTRATOR_QUEUE = "hiwallet.withdrawals.orchestrator"
WITHDRAWALS_DEAD_LETTER_KEY = "hiwallet.withdrawals"
WITHDRAWALS_DEAD_LETTER_QUEUE = "hiwallet.withdrawals.dead"

_ID = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9:_.\-|]+$")]
_AMOUNT = Annotated[StrictInt, Field(gt=0, le=10**15)]
_FEE = Annotated[StrictInt, Field(ge=0, le=10**15)]
_CURRENCY = Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")]
_TEXT = Annotated[StrictStr, Field(max_length=500)]
_IBAN = Annotated[StrictStr, Field(min_length=15, max_length=34, pattern=r"^[A-Z]{2}[0-9]{2}[A-Z0-9]+$")]

# Why wallet-consumer refused a debit (the saga ends ``rejected``). An unknown wallet is
# "membership": the orchestrator must not learn which wallets exist.
RejectReason = Literal["insufficient_funds", "tier", "limit", "membership", "currency", "invalid"]


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    command_id: _ID
    saga_id: _ID


class Requester(BaseModel):
    """The identity that asked for the withdrawal: the token's issuer and subject."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    issuer: Annotated[StrictStr, Field(min_length=1, max_length=500)]
    subject: Annotated[StrictStr, Field(min_length=1, max_length=255)]


# -- commands -------------------------------------------------------------------------------


class DebitForWithdrawal(_Message):
    """wallet −(amount+fee), clearing(bank) +amount, revenue +fee; after membership, tier and
    the monthly withdrawal limit are checked for ``requested_by``."""

    wallet: _ID
    amount_minor: _AMOUNT
    currency: _CURRENCY
    requested_by: Requester


class StartBankTransfer(_Message):
    amount_minor: _AMOUNT
    currency: _CURRENCY
    destination_iban: _IBAN


class SettleWithdrawal(_Message):
    """clearing(bank) −amount, nostro +amount: the bank's transfer left our account."""

    wallet: _ID
    amount_minor: _AMOUNT
    currency: _CURRENCY
    debit_transaction_id: _ID


class RefundWithdrawal(_Message):
    """The debit's legs negated, all three; ``actor`` is who caused it (``system`` when the bank
    refused, the member of staff who cancelled a reviewed withdrawal)."""

    wallet: _ID
    debit_transaction_id: _ID
    actor: Annotated[StrictStr, Field(min_length=1, max_length=200)]


# -- results --------------------------------------------------------------------------------


class WithdrawalDebited(_Message):
    transaction_id: _ID
    amount_minor: _AMOUNT
    fee_minor: _FEE
    currency: _CURRENCY


class WithdrawalDebitRejected(_Message):
    reason: RejectReason
    detail: _TEXT = ""


class BankTransferSucceeded(_Message):
    bank_reference: _ID


class BankTransferFailed(_Message):
    bank_reference: _ID | None = None
    reason: _TEXT


class WithdrawalSettled(_Message):
    transaction_id: _ID


class WithdrawalRefunded(_Message):
    transaction_id: _ID


WithdrawalMessage = (
    DebitForWithdrawal
    | StartBankTransfer
    | SettleWithdrawal
    | RefundWithdrawal
    | WithdrawalDebited
    | WithdrawalDebitRejected
    | BankTransferSucceeded
    | BankTransferFailed
    | WithdrawalSettled
    | WithdrawalRefunded
)

# routing key (= type name) -> queue it is bound to
COMMANDS: dict[str, str] = {
    "DebitForWithdrawal": WALLET_QUEUE,
    "SettleWithdrawal": WALLET_QUEUE,
    "RefundWithdrawal": WALLET_QUEUE,
    "StartBankTransfer": BANK_QUEUE,
}
RESULTS: dict[str, str] = {
    "WithdrawalDebited": ORCHESTRATOR_QUEUE,
    "WithdrawalDebitRejected": ORCHESTRATOR_QUEUE,
    "BankTransferSucceeded": ORCHESTRATOR_QUEUE,
    "BankTransferFailed": ORCHESTRATOR_QUEUE,
    "WithdrawalSettled": ORCHESTRATOR_QUEUE,
    "WithdrawalRefunded": ORCHESTRATOR_QUEUE,
}
MESSAGE_TYPES: dict[str, type[BaseModel]] = {
    model.__name__: model
    for model in (
        DebitForWithdrawal,
        StartBankTransfer,
        SettleWithdrawal,
        RefundWithdrawal,
        WithdrawalDebited,
        WithdrawalDebitRejected,
        BankTransferSucceeded,
        BankTransferFailed,
        WithdrawalSettled,
        WithdrawalRefunded,
    )
}

Step = Literal["debit", "bank", "settle", "refund"]


def command_id(saga_id: str, step: Step) -> str:
    """The id of a saga's command at ``step``: the same every time it is published."""
    return derived_id("withdrawal-command", saga_id, step)


def withdrawals_topology(
    *,
    exchange: str = WITHDRAWALS_EXCHANGE,
    dead_letter_exchange: str = DEAD_LETTER_EXCHANGE,
    dead_letter_key: str = WITHDRAWALS_DEAD_LETTER_KEY,
    dead_letter_queue: str = WITHDRAWALS_DEAD_LETTER_QUEUE,
) -> Topology:
    """``hiwallet.withdrawals`` (direct) and its three queues, each bound by message type, with
    the dead letters. Every process of the saga declares it whole (declaring is idempotent), so
    no process depends on another having started first."""
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": DELIVERY_LIMIT,
        "x-dead-letter-exchange": dead_letter_exchange,
        "x-dead-letter-routing-key": dead_letter_key,
    }
    routes = {**COMMANDS, **RESULTS}
    queues = tuple(
        QueueSpec(
            queue,
            dict(arguments),
            tuple((exchange, kind) for kind, bound in routes.items() if bound == queue),
        )
        for queue in (WALLET_QUEUE, BANK_QUEUE, ORCHESTRATOR_QUEUE)
    )
    own = Topology(exchanges=(ExchangeSpec(exchange, "direct"),), queues=queues)
    return own + dead_letter_topology(dead_letter_exchange, dead_letter_queue, dead_letter_key)

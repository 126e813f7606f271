"""withdrawal-orchestrator: the withdrawal saga's orchestrator. A customer's
request becomes a saga (withdrawal.sagas) and its first command; each result of wallet-consumer
and the bank moves it on, with the next command, through the outbox and its relay to
``hiwallet.withdrawals``; large withdrawals wait for a review; a periodic scan publishes the
command of a saga that waited too long again. docs/withdrawals.md."""

from hiwallet.withdrawals.domain import ALLOWED, TERMINAL, WAITING, State
from hiwallet.withdrawals.service import WithdrawalService

__all__ = ["ALLOWED", "TERMINAL", "WAITING", "State", "WithdrawalService"]

"""wallet-consumer: takes ``TopupRecorded`` from ``hiwallet.topups.p0..p3`` and credits the
wallet through the ledger's declared API, in the same database transaction as its record of the
message (core.consumer); a top-up it cannot attribute is stored for an operator
(``hiwallet topups unattributed`` / ``attribute``). It also handles the withdrawal saga's
wallet commands (debit, settle, refund: withdrawals.py) from ``hiwallet.withdrawals.wallet``,
their responses published through ``wallet.outbox`` by a relay in this process. Health,
readiness and metrics on 9101.
"""

from hiwallet.wallet_consumer.attribution import (
    AlreadyAttributed,
    Attribution,
    AttributionRefused,
    CreditedElsewhere,
    NoSuchTopup,
    NotCreditable,
    attribute,
)
from hiwallet.wallet_consumer.handler import CONSUMER_NAME, TopupHandler, is_transient, parse
from hiwallet.wallet_consumer.topups import (
    MESSAGE_TYPE,
    TopupRecorded,
    Unattributed,
    UnattributedTopup,
    count_unattributed,
    list_unattributed,
)
from hiwallet.wallet_consumer.withdrawals import (
    WITHDRAWALS_CONSUMER_NAME,
    WithdrawalHandler,
    WithdrawalLimits,
)

__all__ = [
    "CONSUMER_NAME",
    "MESSAGE_TYPE",
    "WITHDRAWALS_CONSUMER_NAME",
    "AlreadyAttributed",
    "Attribution",
    "AttributionRefused",
    "CreditedElsewhere",
    "NoSuchTopup",
    "NotCreditable",
    "TopupHandler",
    "TopupRecorded",
    "Unattributed",
    "UnattributedTopup",
    "WithdrawalHandler",
    "WithdrawalLimits",
    "attribute",
    "count_unattributed",
    "is_transient",
    "list_unattributed",
    "parse",
]

"""wallet-consumer: takes ``TopupRecorded`` from ``hiwallet.topups.p0..p3`` and credits the
wallet through the ledger's declared API, in the same database transaction as its record of the
message (core.consumer); a top-up it cannot attribute is stored for an operator
(``hiwallet topups unattributed`` / ``attribute``). Health, readiness and metrics on 9101.
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

__all__ = [
    "CONSUMER_NAME",
    "MESSAGE_TYPE",
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
    "attribute",
    "count_unattributed",
    "is_transient",
    "list_unattributed",
    "parse",
]

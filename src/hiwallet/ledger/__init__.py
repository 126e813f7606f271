"""The ledger core (every writer of money goes through it), and its declared API.

Every service that reads or writes the ledger - wallet-api and wallet-consumer - imports from
this package only, never from its modules (an import-linter contract in pyproject.toml holds
it; tests/ledger/test_api.py checks that ``__all__`` is exactly this list and that every name
resolves). What is not here is the
ledger's own business: the store's SQL and argument encoding, the translation of driver errors,
fault injection, the verifier's queries.

- :class:`Ledger`: the use cases (topup, transfer, payment, promos, refunds, holds, sweeps ...),
  each one posting, also in a caller's unit of work (``conn``); the building of a transfer's,
  a promo grant's and a refund's posting; the batched path for a caller whose own SQL posts
  through ``ledger_api.post_batch`` (:meth:`Ledger.batch_arguments`, :meth:`Ledger.answer`,
  :meth:`Ledger.error_of`); reads.
- :class:`LedgerStore` and :func:`init_connection`: built once per process over a pool.
- :class:`Fees` and :class:`FeePolicy`: the fee policy a :class:`Ledger` applies;
  :class:`LedgerSettings` (``HIWALLET_LEDGER_*``) where its defaults come from.
- the errors: refusals (:class:`LedgerError` and its subclasses), :class:`LedgerUnavailable`
  (a retry can cure it) and :class:`LedgerInternalError` (a defect: a 500, never "retry").
- the model: what goes in and comes out.
- the books' checks: :func:`verify_ledger` (verify: the whole ledger from its lines) and the reads of
  reconciliation and the daily summary (:func:`balance_mismatches`, :func:`unsettled_topups`,
  :func:`late_invoices`, :func:`nostro_movements`, :func:`day_figures`), which report and never fix
  (hiwallet.reconciliation keeps what they find).
- account ids and limits: what a caller needs to name accounts and check input as the ledger
  will.

In SQL, its declared API is the schema ``ledger_api`` (migrations/wallet/0015: views of its
accounts and transactions, ``post_batch``): all that a service's own statements may name of the
ledger (tests/test_ledger_boundary.py; docs/ledger.md, "The SQL interface").
"""

from hiwallet.ledger.accounts import (
    BUCKETS,
    CENTRAL_BUCKET,
    Role,
    bucket_of,
    cash_account,
    new_wallet_id,
    promo_account,
    random_bucket,
    system_account,
    wallet_of,
)
from hiwallet.ledger.errors import (
    AccountNotFound,
    CurrencyMismatch,
    HoldNotUsable,
    InsufficientFunds,
    InvalidCursor,
    InvalidPosting,
    InvalidRequest,
    LedgerError,
    LedgerInternalError,
    LedgerUnavailable,
    NotFound,
    NothingToExpire,
    NotRefundable,
    TransactionIdReused,
    TransactionNotFound,
)
from hiwallet.ledger.model import (
    REFUNDABLE,
    AccountState,
    HoldResult,
    Leg,
    LineResult,
    Posting,
    PostResult,
    PromoBatch,
    Statement,
    StatementLine,
    TransactionView,
    TxType,
    WalletBalance,
)
from hiwallet.ledger.reconcile import (
    BalanceMismatch,
    DayFigures,
    LateInvoice,
    NostroMovement,
    UnsettledTopup,
    balance_mismatches,
    day_figures,
    late_invoices,
    nostro_movements,
    unsettled_topups,
)
from hiwallet.ledger.rules import MAX_AMOUNT_MINOR, MAX_KEY, MAX_TEXT, FeePolicy, check_amount, check_text
from hiwallet.ledger.service import Fees, Ledger
from hiwallet.ledger.settings import LedgerSettings, get_ledger_settings
from hiwallet.ledger.store import (
    MAX_BALANCE_DAYS,
    MAX_BATCH,
    MAX_STATEMENT_PAGE,
    LedgerStore,
    init_connection,
)
from hiwallet.ledger.verify import VerifyReport
from hiwallet.ledger.verify import verify as verify_ledger

__all__ = [
    "BUCKETS",
    "CENTRAL_BUCKET",
    "MAX_AMOUNT_MINOR",
    "MAX_BALANCE_DAYS",
    "MAX_BATCH",
    "MAX_KEY",
    "MAX_STATEMENT_PAGE",
    "MAX_TEXT",
    "REFUNDABLE",
    "AccountNotFound",
    "AccountState",
    "BalanceMismatch",
    "CurrencyMismatch",
    "DayFigures",
    "FeePolicy",
    "Fees",
    "HoldNotUsable",
    "HoldResult",
    "InsufficientFunds",
    "InvalidCursor",
    "InvalidPosting",
    "InvalidRequest",
    "LateInvoice",
    "Ledger",
    "LedgerError",
    "LedgerInternalError",
    "LedgerSettings",
    "LedgerStore",
    "LedgerUnavailable",
    "Leg",
    "LineResult",
    "NostroMovement",
    "NotFound",
    "NotRefundable",
    "NothingToExpire",
    "PostResult",
    "Posting",
    "PromoBatch",
    "Role",
    "Statement",
    "StatementLine",
    "TransactionIdReused",
    "TransactionNotFound",
    "TransactionView",
    "TxType",
    "UnsettledTopup",
    "VerifyReport",
    "WalletBalance",
    "balance_mismatches",
    "bucket_of",
    "cash_account",
    "check_amount",
    "check_text",
    "day_figures",
    "get_ledger_settings",
    "init_connection",
    "late_invoices",
    "new_wallet_id",
    "nostro_movements",
    "promo_account",
    "random_bucket",
    "system_account",
    "unsettled_topups",
    "verify_ledger",
    "wallet_of",
]

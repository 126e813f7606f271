"""The ledger's declared API (hiwallet.ledger.__all__): exactly these names, each resolving, and
the only ledger names the rest of hiwallet uses. import-linter (make lint) keeps every other
package from importing the ledger's modules; this keeps them to the declared names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hiwallet
import hiwallet.ledger

DECLARED = {
    # the facade, its construction and its fee policy
    "Ledger",
    "LedgerStore",
    "init_connection",
    "Fees",
    "LedgerSettings",
    "get_ledger_settings",
    "FeePolicy",
    # errors: refusals, "a retry can cure it", and defects
    "LedgerError",
    "InvalidRequest",
    "InvalidPosting",
    "InvalidCursor",
    "NotFound",
    "AccountNotFound",
    "TransactionNotFound",
    "CurrencyMismatch",
    "InsufficientFunds",
    "TransactionIdReused",
    "HoldNotUsable",
    "NotRefundable",
    "NothingToExpire",
    "LedgerUnavailable",
    "LedgerInternalError",
    # the model
    "TxType",
    "REFUNDABLE",
    "Leg",
    "Posting",
    "PostResult",
    "LineResult",
    "AccountState",
    "WalletBalance",
    "Statement",
    "StatementLine",
    "TransactionView",
    "HoldResult",
    "PromoBatch",
    # account ids, and the limits a caller checks input against
    "BUCKETS",
    "CENTRAL_BUCKET",
    "Role",
    "bucket_of",
    "cash_account",
    "promo_account",
    "system_account",
    "wallet_of",
    "new_wallet_id",
    "random_bucket",
    "check_amount",
    "check_text",
    "MAX_AMOUNT_MINOR",
    "MAX_TEXT",
    "MAX_KEY",
    "MAX_BATCH",
    "MAX_STATEMENT_PAGE",
    "MAX_BALANCE_DAYS",
    # the books' checks: verify, and the reads of reconciliation and the daily summary
    "verify_ledger",
    "VerifyReport",
    "balance_mismatches",
    "unsettled_topups",
    "late_invoices",
    "nostro_movements",
    "day_figures",
    "BalanceMismatch",
    "UnsettledTopup",
    "LateInvoice",
    "NostroMovement",
    "DayFigures",
}


def test_the_declared_api_is_exactly_all() -> None:
    assert len(hiwallet.ledger.__all__) == len(set(hiwallet.ledger.__all__)), "a name is listed twice"
    assert set(hiwallet.ledger.__all__) == DECLARED


def test_every_declared_name_resolves() -> None:
    module = hiwallet.ledger
    for name in module.__all__:
        assert getattr(module, name, None) is not None, name
    namespace: dict[str, object] = {}
    exec("from hiwallet.ledger import *", namespace)  # what a star import gives
    assert set(namespace) - {"__builtins__"} == DECLARED


def _ledger_names_used(tree: ast.AST) -> set[str]:
    """The names a module takes from hiwallet.ledger: ``from hiwallet.ledger import X`` and
    ``ledger.X`` after ``from hiwallet import ledger``."""
    used: set[str] = set()
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "hiwallet.ledger":
            used.update(alias.name for alias in node.names)
        if isinstance(node, ast.ImportFrom) and node.module == "hiwallet":
            aliases.update(a.asname or a.name for a in node.names if a.name == "ledger")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add(node.attr)
    return used


def test_the_rest_of_hiwallet_uses_only_declared_names() -> None:
    root = Path(hiwallet.__file__).parent
    used: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if (root / "ledger") in path.parents:
            continue
        names = _ledger_names_used(ast.parse(path.read_text(), str(path)))
        if names - DECLARED:
            used[str(path.relative_to(root))] = names - DECLARED
    assert not used, f"names outside hiwallet.ledger.__all__: {used}"
    # and the check sees something: wallet-api does use the API
    wallet_api = root / "wallet_api" / "transfers.py"
    assert {"Posting", "Ledger", "LedgerError"} <= _ledger_names_used(ast.parse(wallet_api.read_text()))


async def test_a_consumer_writes_through_the_api(ledger: hiwallet.ledger.Ledger) -> None:
    """What wallet-consumer and the withdrawal orchestrator will use: a posting in their own
    unit of work (rolled back with it), and a batch of postings, each answered."""
    from tests.ledger.conftest import TL, funded_wallet

    wallet = await funded_wallet(ledger, "carol", 10 * TL, bucket=5)
    with pytest.raises(RuntimeError):
        async with ledger.unit_of_work() as conn:
            await ledger.topup("t-uow", wallet, TL, provider="stripe", actor="consumer", ref="m1", conn=conn)
            raise RuntimeError("the consumer's own write failed")
    assert (await ledger.wallet_balance(wallet)).cash == 10 * TL
    answers = await ledger.post_batch(
        [
            ledger.topup_posting("t-1", wallet, TL, provider="stripe", actor="consumer", ref="m2"),
            ledger.withdrawal_posting("w-1", wallet, 100 * TL, actor="consumer", ref="m3"),
            ledger.withdrawal_posting("w-2", wallet, TL, actor="consumer", ref="m4"),
        ]
    )
    assert isinstance(answers[0], hiwallet.ledger.PostResult)
    assert isinstance(answers[1], hiwallet.ledger.InsufficientFunds)
    assert isinstance(answers[2], hiwallet.ledger.PostResult)
    # the withdrawal fee (200) comes on top
    assert (await ledger.wallet_balance(wallet)).cash == 10 * TL + TL - TL - 2 * TL

"""The withdrawal saga end to end, with real processes (tests/e2e/withdrawals.py): a customer's
request to withdrawal-orchestrator with a real token, wallet-consumer's postings, bank-adapter
and bank-fake's transfer, its signed callback through bank-webhook, and back. Each test ends with
the saga in its final state, the wallet right to the kuruş (amount + fee) and the ledger
verified. The faults (processes killed, RabbitMQ away) are in test_withdrawal_faults.py.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import httpx
import orjson

from hiwallet.core.actors import operator_actor
from hiwallet.withdrawals.domain import masked_iban
from tests.e2e import harness
from tests.e2e.collector import Collector, Span
from tests.e2e.withdrawals import (
    FEE_MINOR,
    WithdrawalSystem,
    bank_command,
    debit_command,
    refund_command,
    settle_command,
    total,
)
from tests.waiting import until

TL = 100
# The module's processes export their spans to a collector (tests/e2e/conftest.py): every test
# here runs with tracing on; test_a_withdrawal_is_one_trace reads them.
TRACED = True
collector: Collector | None = None  # set by the module's fixture
# Above HIWALLET_WITHDRAWAL_REVIEW_ABOVE_MINOR (10,000.00 TRY by default): waits for staff.
REVIEWED = 15_000 * TL
# Who a review's decision is recorded as: the operating-system user running the command.
OPERATOR = operator_actor()
DONE = ["withdrawal", "settlement_withdrawal"]


async def test_happy_path(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer, stranger = await system.customer(funds=1_000 * TL), await system.customer()
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

    # The customer reads it (the IBAN masked); a stranger finds nothing (wallet-api says so).
    seen = await system.get(customer, f"/v1/withdrawals/{saga_id}")
    assert seen.status_code == 200, seen.text
    assert (seen.json()["state"], seen.json()["fee_minor"]) == ("completed", FEE_MINOR)
    assert seen.json()["destination_iban"].endswith(iban[-4:]) and iban not in seen.text
    listed = await system.get(customer, "/v1/withdrawals", wallet=customer.wallet_id)
    assert [w["id"] for w in listed.json()["withdrawals"]] == [saga_id], listed.text
    assert (await system.get(stranger, f"/v1/withdrawals/{saga_id}")).status_code == 404
    assert (await system.get(stranger, "/v1/withdrawals", wallet=customer.wallet_id)).status_code == 404
    # The orchestrator logs the IBAN masked (the module's leak check looks for it unmasked, in
    # both forms, in every process's log).
    assert system.orchestrator.log_holds(masked_iban(iban)), system.orchestrator.tail()


async def test_the_bank_rejects_the_transfer_and_all_three_legs_are_given_back(
    withdrawals: WithdrawalSystem,
) -> None:
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    iban = system.iban()
    await system.bank.rule(iban, outcome="reject", failure_reason="AC04")
    saga_id = await system.withdraw(customer, 300 * TL, iban)

    saga = await system.ended(saga_id, "failed", customer.wallet_id, 1_000 * TL, ["withdrawal", "refund"])
    assert await system.path(saga_id) == [
        "initiated",
        "debited",
        "bank_transfer_pending",
        "compensating",
        "failed",
    ]
    assert "AC04" in (saga["reason"] or "") + (saga["reason_detail"] or ""), dict(saga)
    # wallet −(amount+fee), clearing +amount, revenue +fee: each leg netted back to zero.
    legs = await system.legs(saga_id)
    assert len(legs) >= 3 and all(amount == 0 for amount in legs.values()), legs
    # The refund gave back what the debit counted against the monthly limit.
    assert await system.withdrawal_limit_used(customer.account_id) == 0
    [transfer] = await system.transfers(saga_id)
    assert transfer["state"] == "failed"
    seen = await system.get(customer, f"/v1/withdrawals/{saga_id}")
    assert seen.json()["state"] == "failed"


async def test_refused_at_the_debit_nothing_moves(withdrawals: WithdrawalSystem) -> None:
    """Insufficient funds (one kuruş short of the amount and its fee), an Unverified tier, the
    monthly limit exceeded (50,000.00 TRY for a Verified account by default), a stranger's
    wallet: each saga rejected with its reason, no posting, nothing counted against a limit, no
    bank transfer."""
    system = withdrawals
    short = 50 * TL + FEE_MINOR - 1
    poor = await system.customer(funds=short)
    unverified = await system.customer("unverified", funds=100 * TL)
    rich = await system.customer(funds=60_000 * TL)
    owner, stranger = await system.customer(funds=100 * TL), await system.customer(funds=100 * TL)
    iban = system.iban()
    cases = [
        (poor, poor.wallet_id, 50 * TL, "insufficient_funds"),
        (unverified, unverified.wallet_id, 10 * TL, "tier"),
        (rich, rich.wallet_id, 50_000 * TL + 1, "limit"),
        (stranger, owner.wallet_id, 10 * TL, "membership"),
    ]
    saga_ids = await asyncio.gather(
        *(system.withdraw(who, amount, iban, wallet=wallet) for who, wallet, amount, _ in cases)
    )
    for saga_id, (_, wallet, _, reason) in zip(saga_ids, cases, strict=True):
        funds = {poor.wallet_id: short, unverified.wallet_id: 100 * TL, rich.wallet_id: 60_000 * TL}
        saga = await system.ended(saga_id, "rejected", wallet, funds.get(wallet, 100 * TL), [])
        assert saga["reason"] == reason, dict(saga)
        assert await system.path(saga_id) == ["initiated", "rejected"]
        assert await system.transfers(saga_id) == []
    assert await system.cash(stranger.wallet_id) == 100 * TL
    for who in (poor, unverified, rich, owner, stranger):
        assert await system.withdrawal_limit_used(who.account_id) == 0
    # The customer sees why.
    seen = await system.get(poor, f"/v1/withdrawals/{saga_ids[0]}")
    assert (seen.json()["state"], seen.json()["reason"]) == ("rejected", "insufficient_funds"), seen.text


async def test_the_whole_balance_amount_and_fee_to_the_kurus(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer = await system.customer(funds=75 * TL + FEE_MINOR)
    saga_id = await system.withdraw(customer, 75 * TL, system.iban())
    await system.ended(saga_id, "completed", customer.wallet_id, 0, ["withdrawal", "settlement_withdrawal"])


async def test_the_callback_lost_the_bank_reconciliation_closes_it(withdrawals: WithdrawalSystem) -> None:
    """Two transfers decided without a word to us, one paid, one refused: the reconciliation
    (every second, for transfers pending more than 5 s: the module's settings) asks the bank
    and each saga ends as the bank decided."""
    system = withdrawals
    customer, other = await system.customer(funds=500 * TL), await system.customer(funds=500 * TL)
    paid, refused = system.iban(), system.iban()
    await system.bank.rule(paid, lose_callback=True)
    await system.bank.rule(refused, lose_callback=True, outcome="reject", failure_reason="AC06")
    found_before = total(await system.adapter.metrics(), "hiwallet_bank_reconciliation_found_total")
    completed = await system.withdraw(customer, 120 * TL, paid)
    failed = await system.withdraw(other, 130 * TL, refused)

    await system.ended(
        completed,
        "completed",
        customer.wallet_id,
        500 * TL - 120 * TL - FEE_MINOR,
        ["withdrawal", "settlement_withdrawal"],
    )
    saga = await system.ended(failed, "failed", other.wallet_id, 500 * TL, ["withdrawal", "refund"])
    assert "AC06" in (saga["reason"] or "") + (saga["reason_detail"] or ""), dict(saga)
    for saga_id, state in ((completed, "succeeded"), (failed, "failed")):
        [transfer] = await system.transfers(saga_id)
        assert (transfer["state"], transfer["outcome_source"]) == (state, "reconciliation")
        assert await system.inbox(transfer["bank_reference"]) == []
    found = total(await system.adapter.metrics(), "hiwallet_bank_reconciliation_found_total")
    assert found >= found_before + 2


async def test_the_callback_delivered_twice(withdrawals: WithdrawalSystem) -> None:
    """Twice with the same webhook-id (a retry), and twice with distinct ids (the bank said it
    twice), both at once: one outcome, one settlement."""
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    same, distinct = system.iban(), system.iban()
    await system.bank.rule(same, duplicate_callback=2)
    await system.bank.rule(distinct, duplicate_callback=2, duplicate_distinct_ids=True)
    before = await system.webhook.metrics()
    first = await system.withdraw(customer, 100 * TL, same)
    second = await system.withdraw(customer, 200 * TL, distinct)

    for saga_id in (first, second):
        await system.reaches(saga_id, "completed")
    expected = 1_000 * TL - 300 * TL - 2 * FEE_MINOR
    for saga_id in (first, second):
        await system.ended(
            saga_id, "completed", customer.wallet_id, expected, ["withdrawal", "settlement_withdrawal"]
        )
        [transfer] = await system.transfers(saga_id)
        assert transfer["outcome_source"] == "callback"
    [same_transfer], [distinct_transfer] = await system.transfers(first), await system.transfers(second)
    assert len(await system.inbox(same_transfer["bank_reference"])) == 1
    assert len(await system.inbox(distinct_transfer["bank_reference"])) == 2
    # bank-webhook received the second of each: a repeat of a webhook id (nothing stored), and
    # a second word on an outcome recorded already (kept, nothing announced).
    after = await system.webhook.metrics()
    for outcome in ("duplicate", "already"):
        more = total(after, "hiwallet_bank_webhooks_total", outcome=outcome) - total(
            before, "hiwallet_bank_webhooks_total", outcome=outcome
        )
        assert more >= 1, (outcome, after)


async def test_a_command_redelivered_posts_nothing_twice(withdrawals: WithdrawalSystem) -> None:
    """Every command of two ended sagas (one completed, one refunded) published again with its
    command id (as the stuck saga scan does, each a new message): the stored responses are
    published again, the orchestrator ignores them as late, nothing is posted, refunded or
    transferred twice."""
    system = withdrawals
    customer, other = await system.customer(funds=1_000 * TL), await system.customer(funds=1_000 * TL)
    refused = system.iban()
    await system.bank.rule(refused, outcome="reject")
    completed = await system.withdraw(customer, 100 * TL, system.iban())
    failed = await system.withdraw(other, 200 * TL, refused)
    expected = 1_000 * TL - 100 * TL - FEE_MINOR
    done = await system.ended(completed, "completed", customer.wallet_id, expected, DONE)
    refunded = await system.ended(failed, "failed", other.wallet_id, 1_000 * TL, ["withdrawal", "refund"])
    before_orchestrator = await system.orchestrator.metrics()
    before_consumer = await system.consumer.metrics()

    again = [
        ("DebitForWithdrawal", debit_command(done)),
        ("StartBankTransfer", bank_command(done)),
        ("SettleWithdrawal", settle_command(done)),
        ("DebitForWithdrawal", debit_command(refunded)),
        ("StartBankTransfer", bank_command(refunded)),
        ("RefundWithdrawal", refund_command(refunded)),
    ]
    for kind, body in again:
        await system.publish(kind, body, body["saga_id"])

    async def all_ignored() -> bool:
        now = total(await system.orchestrator.metrics(), "hiwallet_withdrawal_results_ignored_total")
        return now >= total(before_orchestrator, "hiwallet_withdrawal_results_ignored_total") + len(again)

    await harness.until(all_ignored, 20, "every stored response published again and ignored")
    after_consumer = await system.consumer.metrics()
    republished = total(after_consumer, "hiwallet_withdrawal_commands_handled", result="republished") - total(
        before_consumer, "hiwallet_withdrawal_commands_handled", result="republished"
    )
    assert republished == 4, after_consumer  # the wallet's four; the bank's two by bank-adapter
    await system.ended(completed, "completed", customer.wallet_id, expected, DONE)
    await system.ended(failed, "failed", other.wallet_id, 1_000 * TL, ["withdrawal", "refund"])
    for saga_id in (completed, failed):
        [transfer] = await system.transfers(saga_id)
        assert len(await system.bank.transfers(transfer["command_id"])) == 1


async def _no_transfer(system: WithdrawalSystem, saga_id: str) -> bool:
    return await system.transfers(saga_id) == []


async def test_review_released(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer = await system.customer(funds=20_000 * TL)
    saga_id = await system.withdraw(customer, REVIEWED, system.iban())
    await system.reaches(saga_id, "under_review")
    # it waits: nothing goes to the bank meanwhile
    await harness.stays(lambda: _no_transfer(system, saga_id), 0.5, "no transfer", interval_s=0.05)
    assert await system.cash(customer.wallet_id) == 20_000 * TL - REVIEWED - FEE_MINOR

    status, out = await system.cli("withdrawals", "review")
    assert status == 0 and saga_id in out, out
    status, out = await system.cli("withdrawals", "release", saga_id)
    assert status == 0, out
    saga = await system.ended(
        saga_id,
        "completed",
        customer.wallet_id,
        20_000 * TL - REVIEWED - FEE_MINOR,
        ["withdrawal", "settlement_withdrawal"],
    )
    assert saga["reviewed_by"] == OPERATOR
    assert await system.path(saga_id) == [
        "initiated",
        "debited",
        "under_review",
        "bank_transfer_pending",
        "settling",
        "completed",
    ]
    # Released twice by mistake: refused, nothing more.
    status, out = await system.cli("withdrawals", "release", saga_id)
    assert status != 0, out


async def test_review_cancelled(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer = await system.customer(funds=20_000 * TL)
    saga_id = await system.withdraw(customer, REVIEWED, system.iban())
    await system.reaches(saga_id, "under_review")

    status, out = await system.cli("withdrawals", "cancel", saga_id)
    assert status == 0, out
    saga = await system.ended(saga_id, "cancelled", customer.wallet_id, 20_000 * TL, ["withdrawal", "refund"])
    assert saga["reviewed_by"] == OPERATOR
    assert await system.path(saga_id) == ["initiated", "debited", "under_review", "cancelling", "cancelled"]
    assert await system.transfers(saga_id) == []
    # The reversal's actor is who cancelled: the operator running the command.
    refunds = await system.fetch(
        system.wallet_db,
        "SELECT DISTINCT actor FROM ledger.transactions WHERE ref = $1 AND type = 'refund'",
        f"withdrawal:{saga_id}",
    )
    assert [r["actor"] for r in refunds] == [OPERATOR]
    legs = await system.legs(saga_id)
    assert len(legs) >= 3 and all(amount == 0 for amount in legs.values()), legs
    assert await system.withdrawal_limit_used(customer.account_id) == 0


async def test_the_same_idempotency_key_twice_and_at_once_makes_one_saga(
    withdrawals: WithdrawalSystem,
) -> None:
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    iban = system.iban()

    key = str(uuid.uuid4())
    first = await system.request(customer, 100 * TL, iban, key=key)
    again = await system.request(customer, 100 * TL, iban, key=key)
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers.get("idempotent-replayed") == "true"

    concurrent_key = str(uuid.uuid4())
    answers = await asyncio.gather(
        *(system.request(customer, 150 * TL, iban, key=concurrent_key) for _ in range(6))
    )
    assert {a.status_code for a in answers} <= {202, 409}, [(a.status_code, a.text) for a in answers]
    accepted = {a.json()["id"] for a in answers if a.status_code == 202}
    assert len(accepted) == 1, [(a.status_code, a.text) for a in answers]

    sagas = await system.sagas_of(customer.wallet_id)
    assert sorted(s["id"] for s in sagas) == sorted([first.json()["id"], *accepted])
    expected = 1_000 * TL - 250 * TL - 2 * FEE_MINOR
    for saga in sagas:
        await system.ended(
            saga["id"], "completed", customer.wallet_id, expected, ["withdrawal", "settlement_withdrawal"]
        )


async def test_a_forged_bank_callback_is_refused_and_nothing_is_stored(withdrawals: WithdrawalSystem) -> None:
    system = withdrawals
    customer = await system.customer(funds=1_000 * TL)
    iban = system.iban()
    await system.bank.rule(iban, outcome="hold")
    saga_id = await system.withdraw(customer, 100 * TL, iban)
    await system.reaches(saga_id, "bank_transfer_pending")
    [transfer] = await harness.until(lambda: system.transfers(saga_id), 20, "the transfer recorded")
    reference = transfer["bank_reference"]
    refused_before = total(await system.webhook.metrics(), "hiwallet_bank_webhooks_total", outcome="refused")

    # The transfer "failed": that would refund the customer while the bank pays out.
    body = orjson.dumps(
        {
            "type": "transfer.failed",
            "timestamp": "2026-12-01T12:00:00Z",
            "data": {
                "reference": reference,
                "client_reference": transfer["command_id"],
                "status": "failed",
                "failure_reason": "AC04",
                "amount_minor": 100 * TL,
                "currency": "TRY",
            },
        }
    )
    forged = harness.standard_webhook_headers(
        body, secret="whsec_" + "Zm9yZ2VkLXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVm"
    )
    genuine = harness.standard_webhook_headers(body.replace(b"AC04", b"AC01"))  # signed, then altered
    unsigned: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=system.webhook.url, timeout=10) as http:
        for headers in (forged, genuine, unsigned):
            answer = await http.post(
                "/v1/webhooks/bank", content=body, headers={"content-type": "application/json", **headers}
            )
            assert answer.status_code == 400, answer.text
            assert answer.headers["content-type"].startswith("application/problem+json")
    assert await system.inbox(reference) == []
    assert (await system.transfers(saga_id))[0]["state"] == "pending"
    assert (await system.saga(saga_id))["state"] == "bank_transfer_pending"
    refused = total(await system.webhook.metrics(), "hiwallet_bank_webhooks_total", outcome="refused")
    assert refused == refused_before + 3

    # The bank's own word, signed: the saga completes as the bank decided.
    await system.bank.decide(reference, "accept")
    await system.ended(
        saga_id,
        "completed",
        customer.wallet_id,
        1_000 * TL - 100 * TL - FEE_MINOR,
        ["withdrawal", "settlement_withdrawal"],
    )


async def test_a_withdrawal_is_one_trace(withdrawals: WithdrawalSystem) -> None:
    """From the customer's request through the saga's messages, the bank's transfer and its
    callback, to the settlement: every span in one trace, each one's parent in it (core.tracing,
    migrations/bank/0005)."""
    system, traces = withdrawals, collector
    assert traces is not None
    customer = await system.customer(funds=1_000 * TL)
    trace_id, root_id = os.urandom(16).hex(), os.urandom(8).hex()
    response = await system.request(
        customer, 100 * TL, system.iban(), traceparent=f"00-{trace_id}-{root_id}-01"
    )
    assert response.status_code == 202, response.text
    saga_id = response.json()["id"]
    await system.reaches(saga_id, "completed")

    def of_trace() -> list[Span]:
        return [s for s in traces.spans() if s.trace_id == trace_id]

    def keys(spans: list[Span], service: str, kind: int) -> set[object]:
        return {
            s.attributes.get("messaging.rabbitmq.destination.routing_key")
            for s in spans
            if s.service == service and s.kind == kind
        }

    def whole() -> bool:
        spans = of_trace()
        ids = {s.span_id for s in spans} | {root_id}
        # the settlement handled back at the orchestrator: the last consumer span of the saga
        return "WithdrawalSettled" in keys(spans, "withdrawal-orchestrator", 5) and all(
            s.parent_id in ids for s in spans
        )

    await until(whole, 30, "the withdrawal's spans exported, each one's parent among them")
    spans = of_trace()
    server = [s for s in spans if s.service == "withdrawal-orchestrator" and s.kind == 2]
    assert [(s.name, s.parent_id) for s in server] == [("POST /v1/withdrawals", root_id)]
    # Each step of the saga, consumed where it belongs, in this one trace.
    assert {"DebitForWithdrawal", "SettleWithdrawal"} <= keys(spans, "wallet-consumer", 5)
    assert {"StartBankTransfer"} <= keys(spans, "bank-adapter", 5)
    assert {"WithdrawalDebited", "BankTransferSucceeded", "WithdrawalSettled"} <= keys(
        spans, "withdrawal-orchestrator", 5
    )
    # The bank's call (bank-adapter's httpx client, in a batch: core.tracing.continuing) and the
    # orchestrator's statements.
    assert any(s.service == "bank-adapter" and s.kind == 3 and s.name == "POST" for s in spans)
    assert any(
        s.service == "withdrawal-orchestrator" and s.kind == 3 and "db.query.text" in s.attributes
        for s in spans
    )

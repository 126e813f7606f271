"""withdrawal-orchestrator's own metrics, in the app's registry beside the HTTP ones (the
relay's and the outbox's are core.outbox.OutboxMetrics, the consumer's
core.consumer.ConsumerMetrics, in the same registry). No label holds an id."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from hiwallet.withdrawals.domain import State


class WithdrawalMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()
        self.registry = registry
        self.requested = Counter(
            "hiwallet_withdrawals_requested_total",
            "POST /v1/withdrawals by outcome (created, replayed)",
            ["outcome"],
            registry=registry,
        )
        self.sagas = Gauge(
            "hiwallet_withdrawal_sagas", "Withdrawal sagas by state (refreshed)", ["state"], registry=registry
        )
        self.oldest_in_state = Gauge(
            "hiwallet_withdrawal_oldest_in_state_seconds",
            "How long the oldest saga in each state has been in it (refreshed; 0 when none is): "
            "a saga waiting long in a non-final state is stuck",
            ["state"],
            registry=registry,
        )
        self.transitions = Counter(
            "hiwallet_withdrawal_transitions_total",
            "Changes of a saga's state, by from and to",
            ["from_state", "to_state"],
            registry=registry,
        )
        self.ignored = Counter(
            "hiwallet_withdrawal_results_ignored_total",
            "Results that did not fit their saga's state (late or duplicate): acked, nothing changed",
            ["type", "state"],
            registry=registry,
        )
        self.republished = Counter(
            "hiwallet_withdrawal_stuck_republished_total",
            "Commands published again by the stuck saga scan",
            ["state"],
            registry=registry,
        )
        for state in State:
            self.sagas.labels(state.value).set(0)
            self.oldest_in_state.labels(state.value).set(0)

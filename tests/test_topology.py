"""The deployment's whole broker topology, as every process declares it (the registry's
``topology`` of each deployable): every queue quorum (replicated in a cluster), the
consistent-hash partitions single-active-consumer (one key's messages in order), every queue a
consumer works from with a delivery limit and dead letters that reach a dead-letter queue, and
the dead-letter queues without either (listed while consumers run; never dropped for being
looked at: core.broker.dead_letter_topology). A new classic queue fails here."""

from __future__ import annotations

import fnmatch
from dataclasses import replace

import pytest

from hiwallet.contracts.deployables import DEPLOYABLES, deployment_topology
from hiwallet.core.broker import QueueSpec, Topology


def problems(topology: Topology) -> list[str]:
    exchanges = {e.name: e for e in topology.exchanges}
    # (dead-letter exchange, key) -> the dead-letter queues bound there
    dead_queues = {
        q.name
        for q in topology.queues
        for exchange, key in q.bindings
        if any(
            o.arguments.get("x-dead-letter-exchange") == exchange
            and o.arguments.get("x-dead-letter-routing-key") == key
            for o in topology.queues
        )
    }
    found: list[str] = []
    for q in topology.queues:
        args = q.arguments
        if args.get("x-queue-type") != "quorum":
            found.append(f"{q.name}: not quorum ({args.get('x-queue-type', 'classic')})")
        partitioned = any(exchanges[e].type == "x-consistent-hash" for e, _ in q.bindings if e in exchanges)
        if partitioned and args.get("x-single-active-consumer") is not True:
            found.append(f"{q.name}: a consistent-hash partition without single active consumer")
        if not q.bindings:
            found.append(f"{q.name}: bound to nothing")
        for exchange, _ in q.bindings:
            if exchange not in exchanges:
                found.append(f"{q.name}: bound to {exchange}, which the topology does not declare")
        if q.name in dead_queues:
            for arg in ("x-delivery-limit", "x-single-active-consumer", "x-dead-letter-exchange"):
                if arg in args:
                    found.append(f"{q.name}: a dead-letter queue with {arg}")
            continue
        limit = args.get("x-delivery-limit")
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            found.append(f"{q.name}: no delivery limit (1..100): {limit!r}")
        dlx, key = args.get("x-dead-letter-exchange"), args.get("x-dead-letter-routing-key")
        if dlx not in exchanges:
            found.append(f"{q.name}: dead letters to {dlx!r}, not an exchange of the topology")
        elif not any((dlx, key) in d.bindings for d in topology.queues if d.name in dead_queues):
            found.append(f"{q.name}: its dead letters ({dlx} / {key}) reach no dead-letter queue")
    return found


def test_every_queue_of_the_deployment_is_as_the_design_needs() -> None:
    topology = deployment_topology()
    names = {q.name for q in topology.queues}
    # the families the design names (SYSTEM.md, docs/events.md): all present
    for expected in ("hiwallet.topups.p0", "hiwallet.topups.p3", "hiwallet.withdrawals.bank",
                     "hiwallet.onboarding.wires", "hiwallet.events.dead"):  # fmt: skip
        assert expected in names
    assert problems(topology) == []


def test_each_process_declares_the_queues_it_consumes() -> None:
    for d in DEPLOYABLES:
        declared = {q.name for q in d.topology_in_force().queues}
        for pattern in d.consumes:
            assert fnmatch.filter(declared, pattern), f"{d.name} consumes {pattern} but declares none"


def _with(topology: Topology, name: str, arguments: dict[str, object]) -> Topology:
    queues = tuple(replace(q, arguments=arguments) if q.name == name else q for q in topology.queues)
    return Topology(topology.exchanges, queues)


@pytest.mark.parametrize(
    ("queue", "arguments", "complaint"),
    [
        ("hiwallet.withdrawals.bank", {}, "not quorum"),
        ("hiwallet.topups.p2", {"x-queue-type": "quorum", "x-delivery-limit": 10,
                                "x-dead-letter-exchange": "hiwallet.dead-letters",
                                "x-dead-letter-routing-key": "hiwallet.topups"}, "single active consumer"),
        ("hiwallet.onboarding.wires", {"x-queue-type": "quorum"}, "no delivery limit"),
        ("hiwallet.events.dead", {"x-queue-type": "quorum", "x-delivery-limit": 10},
         "dead-letter queue with"),
    ],
)  # fmt: skip
def test_the_check_finds_a_queue_declared_otherwise(
    queue: str, arguments: dict[str, object], complaint: str
) -> None:
    found = problems(_with(deployment_topology(), queue, arguments))
    assert any(queue in line and complaint in line for line in found), found


def test_a_new_classic_queue_fails() -> None:
    topology = deployment_topology()
    events = next(e.name for e in topology.exchanges if e.type == "topic")
    extra = QueueSpec("hiwallet.someone.new", {}, ((events, "some.event"),))
    found = problems(Topology(topology.exchanges, (*topology.queues, extra)))
    assert any("hiwallet.someone.new: not quorum" in line for line in found), found

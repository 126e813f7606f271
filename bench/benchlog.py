"""What a person running a benchmark sees: its figures, and a progress bar for each timed phase.
Its log lines go to a file.

Every process of ours writes JSON log lines on stderr (core/logging.py): the migrations a bench
runs, the services it starts, their access lines. On the terminal they bury the figures (and a
terminal's speed would be measured with the services). So a bench calls :func:`to_file` first:
from then on this process's stderr is :data:`LOG`, a file under bench/results/logs/ whose path
it prints, and so is every process's it starts (they inherit the descriptor; a bench that hands
a child a log file of its own hands it this one). A bench started by another (ledger_bench's
wallet-api runs) finds the path in ``HIWALLET_BENCH_LOG`` and appends to its parent's file.
Each line is written once, by one ``write`` of an appending descriptor: the lines of several
processes do not interleave. A failure's traceback is shown on the terminal as well.

The bars are rich's, on stdout, refreshed twice a second by rich's own thread from the clock
(:func:`phase`): next to nothing of the load client's CPU, which some benches measure.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, Task, TextColumn
from rich.progress_bar import ProgressBar
from rich.text import Text

ENV = "HIWALLET_BENCH_LOG"
RESULTS = Path(__file__).parent / "results"
LOGS = RESULTS / "logs"
# One file per bench run; inherited by the benches a bench starts.
LOG = Path(os.environ.get(ENV) or LOGS / f"{Path(sys.argv[0]).stem}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.jsonl")
# There before any process is handed it (a tool that imports a bench without calling to_file).
LOG.parent.mkdir(parents=True, exist_ok=True)

console = Console(emoji=False, highlight=False)
_state: dict[str, Any] = {"terminal": None}


def to_file() -> Path:
    """Send this process's stderr, and so its children's, to :data:`LOG`; print the path (once
    per run: not in a bench another bench started). Idempotent."""
    if _state["terminal"] is not None:
        return LOG
    inherited = bool(os.environ.get(ENV))
    sys.stderr.flush()
    fd = os.open(LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _state["terminal"] = os.fdopen(os.dup(2), "w", buffering=1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ[ENV] = str(LOG)
    sys.excepthook = _show_failure
    if not inherited:
        console.print(f"logs: {LOG}")
    return LOG


def save(bench: str, report: dict[str, Any], *, at: datetime | None = None) -> Path:
    """Write a run's report to ``bench/results/<bench>-<UTC time>.json``; its path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{bench}-{at or datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def finish(bench: str, report: dict[str, Any]) -> None:
    """Save the report, show its summary and where it is; a run that stopped early exits 1."""
    path = save(bench, report)
    print(json.dumps(report["summary"], indent=2))
    print(f"results: {path}")
    if "failed" in report:
        print(f"the run stopped early: {report['failed']}")
        sys.exit(1)


def _show_failure(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    # In the log with the lines that led to it, and on the terminal, where the person is.
    traceback.print_exception(kind, exc, tb, file=sys.stderr)
    terminal = _state["terminal"]
    if terminal is not None:
        traceback.print_exception(kind, exc, tb, file=terminal)
        terminal.write(f"(the log: {LOG})\n")


class _ClockBar(ProgressColumn):
    """A bar filled by the time elapsed since the phase began (its total in seconds): nothing
    to update from the measuring code."""

    def render(self, task: Task) -> ProgressBar:
        total = task.total or 1.0
        return ProgressBar(total=total, completed=min(task.elapsed or 0.0, total), width=40)


class _ClockText(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"{min(task.elapsed or 0.0, task.total or 0.0):.0f}/{task.total or 0:.0f} s")


@contextmanager
def phase(description: str, seconds: float) -> Iterator[None]:
    """A progress bar for a timed phase of about ``seconds``, on the terminal while it runs
    (nothing when stdout is not a terminal); what the phase prints appears above it."""
    if not console.is_terminal:
        yield
        return
    with Progress(
        TextColumn("{task.description}"),
        _ClockBar(),
        _ClockText(),
        console=console,
        transient=True,
        refresh_per_second=2,
    ) as progress:
        progress.add_task(description, total=max(seconds, 0.1))
        yield

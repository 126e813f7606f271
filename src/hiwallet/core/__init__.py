"""The shared kernel: settings, database, broker, outbox and consumer, HTTP app, tokens, ids, logging,
and the contracts several services share (messages, topology, permissions). No money rules: those
are the ledger's. It depends on no service package."""

# Imported first, whatever the process: until configure_logging names the service, structlog
# writes JSON lines without locals (not its default console lines, whose tracebacks show them).
from hiwallet.core import logging as _logging  # noqa: F401

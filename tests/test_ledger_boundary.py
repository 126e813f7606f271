"""The ledger is reached only through its declared API, in SQL too (docs/ledger.md, "The SQL
interface").

In Python, services import ``hiwallet.ledger`` (its ``__all__``; import-linter and
tests/ledger/test_api.py hold it). In SQL, what a service's own statements may name of the
ledger is the ``ledger_api`` schema (migrations/wallet/0015: views the planner inlines and the
batched posting function), never an object of the ``ledger`` schema: its tables, types and
functions are the ledger's business, free to change under its API.

What counts as naming a ledger object, in a SQL text with its comments taken out (``--`` to the
end of the line, ``/* */``; string literals stay: dynamic SQL in a literal is a use):
- the schema ``ledger`` qualifying a name, in any case or quoted: ``ledger.accounts``,
  ``LEDGER.post_batch(...)``, ``"ledger"."lines"``, ``hiwallet_wallet.ledger.x``; and
- a ``search_path`` that lists ``ledger`` (an unqualified name would then reach it).
``ledger_api.`` is not ``ledger.``: the SQL interface may be named by anyone.

Where the rule applies:
1. every ``.sql`` file under ``src/`` but the ledger's own (``src/hiwallet/ledger/``);
2. every file under ``migrations/`` but the ledger's migrations of the wallet database
   (LEDGER_MIGRATIONS: a new one is added there, as a name to ``__all__``), the wallet
   database's ``grants.sql`` (who may do what: it names the ledger's objects to guard them)
   and its generated ``schema.sql`` (held by 3.), and the migrations applied before the rule
   that crossed it (BEFORE_THE_RULE, each with what it named: migrations are append-only,
   core/db.py refuses an edited one);
3. every object of the migrated wallet database (its ``schema.sql``, which
   tests/core/test_schema.py holds equal to a fresh migrate) outside the schemas ``ledger``
   and ``ledger_api``: a function, view, table, constraint, trigger or grant of a service
   names no ledger object. KNOWN_CROSSINGS are what the migrations of BEFORE_THE_RULE left;
   each must still cross (fixed, it is taken off the list).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LEDGER_SRC = SRC / "hiwallet" / "ledger"
MIGRATIONS = ROOT / "migrations"
WALLET = MIGRATIONS / "wallet"

# The ledger's own migrations of the wallet database.
LEDGER_MIGRATIONS = {
    "0001_ledger.sql",
    "0002_posting.sql",
    "0003_system_accounts.sql",
    "0006_balance_check_per_statement.sql",
    "0009_open_account_function.sql",
    "0012_staff_money_types.sql",  # the goodwill account's role and transaction type
    "0015_ledger_api.sql",
    "0022_ledger_api_posting_type.sql",  # ledger_api.posting_in, a domain over its posting type
    "0024_ledger_api_wallet_purses.sql",  # ledger_api.wallet_purses, a wallet's balances read with its own
    "0025_ledger_api_statement_reads.sql",  # ledger_api.lines, transaction_wallet_accounts, promo_batches
    "0026_post_batch_lookups.sql",  # ledger.post_batch's lookups in a call of many
    "0027_open_accounts.sql",  # ledger.open_accounts, many wallets' accounts in one statement
    "0028_ledger_read_probes.sql",  # lines_by_time with the version; transaction_wallet_accounts by ANY
    "0029_post_batch_fixed_cost.sql",  # ledger.post_batch: fewer statements a call of a few postings
}
# Applied before the rule, and naming ledger objects outside the ledger's own work.
BEFORE_THE_RULE = {
    "0005_wallet_transfer.sql": "wallet-api's wallet.transfer_batch, posting through ledger.post_batch",
    "0007_transfer_batch_set_based.sql": "wallet.transfer_batch again",
    "0008_one_posting_path.sql": "the ledger's one posting path, and wallet.transfer_batch taking its "
    "ledger.posting_in[]",
    "0013_staff_money.sql": "wallet-api's staff money, and the goodwill account added to "
    "ledger.ensure_system_accounts",
}
# What those left in the schema (pg_dump's "Type schema.name" of the object): nothing now.
# wallet-api's wallet.transfer_batch, which posted through ledger.post_batch and took
# ledger.posting_in[], was made again by migration 0023 on ledger_api (post_batch, posting_in).
KNOWN_CROSSINGS: set[str] = set()
# The wallet database's files that are not a service's SQL (see 2.).
NOT_SERVICE_SQL = {WALLET / "grants.sql", WALLET / "schema.sql"}

_QUALIFIED = re.compile(r'(?<![\w$])("ledger"|ledger)\s*\.', re.IGNORECASE)
_SEARCH_PATH = re.compile(r"search_path\s*(?:=|\bto\b)[^;\n]*?(?<![\w$])\"?ledger\"?(?![\w$])", re.IGNORECASE)
_DUMP_HEADER = re.compile(
    r"^-- Name: (?P<name>[^;]+); Type: (?P<type>[^;]+); Schema: (?P<schema>[^;]+);", re.M
)


def without_comments(sql: str) -> str:
    """``sql`` with its ``--`` and ``/* */`` comments blanked; string literals ('...', with ''
    inside) are kept whole, so a ``--`` in one is not taken for a comment."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            j = i + 1
            while j < n and not (sql[j] == "'" and (j + 1 >= n or sql[j + 1] != "'")):
                j += 2 if sql[j] == "'" else 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def ledger_names(sql: str) -> list[str]:
    """What ``sql`` names of the ledger schema (see the module's rule), each as written."""
    code = without_comments(sql)
    found = [code[m.start() : m.end() + 40].split("(")[0].split()[0] for m in _QUALIFIED.finditer(code)]
    return found + [m.group(0) for m in _SEARCH_PATH.finditer(code)]


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ledger.accounts",
        "SELECT LEDGER.post_batch($1)",
        'SELECT * FROM "ledger"."lines"',
        "SELECT * FROM ledger . transactions",
        "SELECT * FROM hiwallet_wallet.ledger.accounts",
        "EXECUTE format('SELECT 1 FROM ledger.holds')",
        "SELECT '--' || a.id FROM ledger.accounts a",
        "ALTER FUNCTION wallet.f SET search_path = pg_catalog, ledger, wallet",
        "SET search_path TO ledger",
    ],
)
def test_these_name_a_ledger_object(sql: str) -> None:
    assert ledger_names(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ledger_api.accounts",
        "SELECT ledger_api.post_batch($1)",
        "-- reads ledger.accounts\nSELECT 1",
        "/* ledger.post_batch */ SELECT 1",
        "SELECT 1 FROM wallet.ledger_entries",
        "SELECT myledger.x",
        "SELECT 'the ledger' AS who",
        "SET search_path = pg_catalog, ledger_api, wallet",
    ],
)
def test_these_do_not(sql: str) -> None:
    assert ledger_names(sql) == []


def test_no_service_sql_names_a_ledger_object() -> None:
    files = [p for p in sorted(SRC.rglob("*.sql")) if not p.is_relative_to(LEDGER_SRC)]
    assert any("wallet_consumer" in str(p) for p in files)  # the files it is about are seen
    crossing = {_relative(p): names for p in files if (names := ledger_names(p.read_text()))}
    assert crossing == {}, (
        "a service's SQL names the ledger's objects: name its SQL interface (ledger_api, "
        "migrations/wallet/0015) or use hiwallet.ledger's Python API; if the ledger lacks what is "
        f"needed, the ledger adds it to ledger_api (docs/ledger.md, 'The SQL interface'): {crossing}"
    )


def test_only_the_ledgers_migrations_name_its_objects() -> None:
    files = sorted(p for p in MIGRATIONS.rglob("*.sql") if p not in NOT_SERVICE_SQL)
    allowed = {WALLET / name for name in LEDGER_MIGRATIONS | BEFORE_THE_RULE.keys()}
    assert allowed <= set(files), sorted(map(_relative, allowed - set(files)))  # no stale name
    crossing = {
        _relative(p): names for p in files if p not in allowed and (names := ledger_names(p.read_text()))
    }
    assert crossing == {}, (
        "a migration outside the ledger's names its objects: a service's functions and views name "
        f"ledger_api only; a migration of the ledger's own goes on LEDGER_MIGRATIONS: {crossing}"
    )
    # the ledger's do name them (the scan sees what it is meant to)
    assert all(
        ledger_names((WALLET / name).read_text()) for name in LEDGER_MIGRATIONS | BEFORE_THE_RULE.keys()
    )


def schema_objects(dump: str) -> dict[str, tuple[str, str]]:
    """The objects of a schema.sql: ``"Type schema.name"`` -> (the object's schema, its SQL)."""
    headers = list(_DUMP_HEADER.finditer(dump))
    objects: dict[str, tuple[str, str]] = {}
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        body = dump[header.end() : following.start() if following else len(dump)]
        name = header["name"].split("(")[0].strip()
        key = f"{header['type']} {header['schema']}.{name}"
        previous = objects.get(key, (header["schema"], ""))[1]
        objects[key] = (header["schema"], previous + body)  # overloads: one entry
    return objects


def test_no_object_of_a_service_in_the_wallet_database_names_a_ledger_object() -> None:
    objects = schema_objects((WALLET / "schema.sql").read_text())
    assert len(objects) > 100 and "VIEW ledger_api.accounts" in objects, sorted(objects)[:20]
    crossing = {
        key: ledger_names(sql)
        for key, (schema, sql) in objects.items()
        if schema not in ("ledger", "ledger_api") and ledger_names(sql)
    }
    assert set(crossing) == KNOWN_CROSSINGS, (
        "the objects of wallet-api and wallet-consumer name only ledger_api of the ledger (a "
        "crossing on KNOWN_CROSSINGS that is gone is taken off it)",
        crossing,
    )

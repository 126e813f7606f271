"""wallet-api's tables and queries keep the Citus rules (docs/wallet-api.md): every named query
on a distributed table names its bucket, or is annotated as a reference-table or multi-shard
query; every table is in the map (tests/ledger/test_schema_rules.py checks keys and the map)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hiwallet.core.queries import load_queries
from hiwallet.wallet_api.idempotency import STORE

SRC = Path(__file__).parents[2] / "src" / "hiwallet"
MAP = json.loads((SRC / "ledger" / "citus_tables.json").read_text())["tables"]
QUERIES = SRC / "wallet_api" / "sql" / "queries.sql"
# a table, not a function call (wallet.transfer(...) routes by its first argument, the bucket)
_TABLE = re.compile(r"\bwallet\.(\w+)\b(?!\s*\()")
_BUCKET_FILTER = re.compile(r"\bbucket\s*=\s*(\$\d+|ANY\s*\(\s*\$\d+)")


def test_every_named_query_names_its_bucket() -> None:
    text = QUERIES.read_text()
    problems = []
    for name, sql in load_queries(QUERIES).items():
        block = text[text.index(f"-- name: {name}") :].split("-- name:", 2)[1]
        tables = {f"wallet.{t}" for t in _TABLE.findall(sql)}
        assert tables <= set(MAP), (name, tables - set(MAP))
        distributed = {t for t in tables if MAP[t] == "distributed"}
        if not distributed or "citus: multi-shard read" in block:
            continue
        inserts = re.findall(r"INSERT INTO wallet\.\w+ (?:AS \w+ )?\(bucket,", sql)
        if len(inserts) == len(_TABLE.findall(sql)):
            continue  # only inserts, and an insert routes by the bucket it carries
        if not _BUCKET_FILTER.search(sql):
            problems.append(f"{name}: no bucket filter")
    assert not problems, problems


def test_the_reference_table_is_only_read_by_identity() -> None:
    for name, sql in load_queries(QUERIES).items():
        if "wallet.identity_accounts" in sql and sql.lstrip().startswith("SELECT"):
            assert "issuer = $1 AND subject = $2" in sql, name


def test_the_idempotency_stores_queries_keep_the_rules_too() -> None:
    # wallet-api's idempotency table is core.idempotency's store: its queries are rendered there.
    queries = STORE.queries()
    assert _BUCKET_FILTER.search(queries["begin"]) and "k.bucket = $2" in queries["begin"]
    assert "INSERT INTO wallet.idempotency_keys (bucket," in queries["put"]
    assert "citus: multi-shard read" in queries["purge"]

"""A service's served OpenAPI document checked as tests/wallet_api/test_contract.py checks
wallet-api's: Schemathesis generates requests from the document and sends them over HTTP to the
running service, positive and negative for each operation and its coverage phase (boundaries,
each required part missing, the methods a path does not have), with every built-in check
(``--checks all``) and one of ours (:func:`positive_data_is_never_malformed`). No answer is a
server error; every answer matches the document (status, content type, headers, body schema);
negative data is refused; positive data is never refused as malformed.

Small and reproducible: Hypothesis derandomized, ``examples`` cases per operation and mode (a
modest number: the suite stays fast). Each service's ``test_contract.py`` says which token goes
with the cases, which paths it checks elsewhere, and how it points positive cases at real
resources (``steer``) so that generation reaches past the 404s into the use cases."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.hypothesis.builder import HypothesisTestConfig, HypothesisTestMode, create_test

from tests.strength import scaled

PROBLEM = "https://hiwallet.dev/problems/"
# 8 with `make test`'s profile, 64 with HYPOTHESIS_PROFILE=long (tests/strength.py): each case
# is a request to a running service, generated and checked in this process.
EXAMPLES = scaled(0.32)
# Refusals that say "your request breaks the document": never the answer to a request the
# document calls valid (a 422 of the domain, a refusal by design, is admitted).
MALFORMED = frozenset(
    {"validation-error", "unsupported-currency", "idempotency-key-missing", "idempotency-key-invalid"}
)
_DEFAULT_ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]  # schemathesis' minus 5xx

Steer = Callable[[Any], None]

_SETTINGS = {
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
    "database": None,
    "derandomize": True,
}


def positive_data_is_never_malformed(malformed: Collection[str]) -> Any:
    def check(ctx: Any, response: Any, case: Any) -> bool | None:
        meta = case.meta
        if meta is None or not meta.generation.mode.is_positive or response.status_code not in (400, 422):
            return None
        try:
            slug = str(response.json().get("type", "")).removeprefix(PROBLEM)
        except ValueError:
            slug = "?"
        if slug in malformed:
            raise AssertionError(f"valid per the document, refused as {slug}: {response.text[:500]}")
        return None

    # Passed to each call, not registered: the registry is global, and wallet-api's test
    # registers its own under this name.
    check.__name__ = "positive_data_is_never_malformed"
    return check


def digest(case: Any) -> bytes:
    """A case's own digest: which half of the positive cases is steered, replayably."""
    seen = repr((case.operation.label, case.path_parameters, case.query, case.body))
    return hashlib.sha256(seen.encode()).digest()


def is_positive(case: Any) -> bool:
    return case.meta is not None and case.meta.generation.mode is GenerationMode.POSITIVE


def _config(*, coverage_only: bool, accepted: Collection[str]) -> SchemathesisConfig:
    phases = {"examples": {"enabled": False}, "fuzzing": {"enabled": False}} if coverage_only else {}
    return SchemathesisConfig.from_dict(
        {
            # Server errors are never "accepted" here (schemathesis' default admits 5xx).
            "checks": {"positive_data_acceptance": {"expected-statuses": [*_DEFAULT_ACCEPTED, *accepted]}},
            "phases": phases,
            "generation": {"mode": "all"},
        }
    )


def load(
    base_url: str,
    *,
    token: Callable[[], str] | None = None,
    exclude_path_regex: str | None = None,
    coverage_only: bool = False,
    accepted: Collection[str] = ("422",),
) -> Any:
    """The service's document as Schemathesis reads it, with ``token()`` as the bearer of every
    case (set by its auth hook, so a negative case stays negative in what it was built to break)."""
    schema = schemathesis.openapi.from_url(
        f"{base_url}/openapi.json", config=_config(coverage_only=coverage_only, accepted=accepted)
    )
    if exclude_path_regex:
        schema = schema.exclude(path_regex=exclude_path_regex)
    if token is not None:

        @schema.auth()
        class _Bearer:
            def get(self, case: Any, context: Any) -> str:
                assert token is not None
                return token()

            def set(self, case: Any, data: str, context: Any) -> None:
                case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    return schema


def check_document(
    base_url: str,
    *,
    token: Callable[[], str] | None = None,
    exclude_path_regex: str | None = None,
    steer: Steer | None = None,
    examples: int = EXAMPLES,
    malformed: Collection[str] = MALFORMED,
    accepted: Collection[str] = ("422",),
) -> Counter[str]:
    """Every operation positive and negative (``examples`` each), then its coverage phase.
    Fails with every operation's failure; else what was answered ("METHOD /path STATUS": count),
    for the caller to assert that the use cases were reached."""
    extra = [positive_data_is_never_malformed(malformed)]
    failures: dict[str, str] = {}
    seen: Counter[str] = Counter()

    def call(case: Any) -> None:
        if steer is not None and is_positive(case):  # a negative case keeps what it was built to break
            steer(case)
        response = case.call_and_validate(additional_checks=extra)
        seen[f"{case.operation.label} {response.status_code}"] += 1

    schema = load(base_url, token=token, exclude_path_regex=exclude_path_regex, accepted=accepted)
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, **_SETTINGS)
            def generated(case: Any) -> None:
                call(case)

            try:
                generated()
            except Unsatisfiable:
                # No negative case exists (every part of the request may be any string, e.g. a
                # path id that is refused as not found): nothing to check.
                if mode is GenerationMode.POSITIVE:
                    raise
            except (Exception, BaseExceptionGroup) as exc:  # Schemathesis' FailureGroup is a Base one
                failures[f"{operation.label} ({mode.value})"] = str(exc)[:3000]

    coverage = load(
        base_url, token=token, exclude_path_regex=exclude_path_regex, coverage_only=True, accepted=accepted
    )
    for result in coverage.get_all_operations():
        operation = result.ok()
        # Built with the builder the pytest plugin uses (its lazy loader fails on pytest 9).
        test = create_test(
            operation=operation,
            test_func=call,
            config=HypothesisTestConfig(
                project=coverage.config, modes=[HypothesisTestMode.COVERAGE], settings=settings(**_SETTINGS)
            ),
        )
        try:
            test()
        except (Exception, BaseExceptionGroup) as exc:
            failures[f"{operation.label} (coverage)"] = str(exc)[:3000]
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    return seen

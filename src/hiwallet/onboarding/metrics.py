"""onboarding's own metrics, in the app's registry beside the HTTP ones. No label holds an id, an
address, a number or a name: only steps, outcomes and the dependencies' names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Histogram

# From a cached token's round trip to a registry that takes seconds.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class OnboardingMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()
        self.registry = registry
        self.registrations = Counter(
            "hiwallet_onboarding_registrations_total",
            "Registration steps done (started, email_verified, user_created, user_adopted, completed)",
            ["step"],
            registry=registry,
        )
        self.verifications = Counter(
            "hiwallet_onboarding_verifications_total",
            "Verification attempts by kind (phone, identity, consent) and outcome (ok or the refusal)",
            ["kind", "outcome"],
            registry=registry,
        )
        self.tier_raises = Counter(
            "hiwallet_onboarding_tier_raises_total",
            "Tier raises asked of wallet-api, by tier and outcome (done, deferred)",
            ["tier", "outcome"],
            registry=registry,
        )
        # What a registration's time goes to: the bench reads the share of each.
        self.dependency = Histogram(
            "hiwallet_onboarding_dependency_seconds",
            "Calls to a dependency (identity, wallet-api, mail, sms, registry), by operation",
            ["dependency", "operation"],
            buckets=_BUCKETS,
            registry=registry,
        )

    @contextmanager
    def timed(self, dependency: str, operation: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.dependency.labels(dependency, operation).observe(time.perf_counter() - start)

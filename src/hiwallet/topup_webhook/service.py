"""Receiving a notification: verify the raw bytes, read them, store them (topup.ingest), count
and log what happened. The HTTP route and the reconciliation both end in :meth:`ingest`."""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from hiwallet.core.webhooks import (
    StandardWebhookSignature,
    StripeSignature,
    VerificationFailed,
    Verifier,
)
from hiwallet.topup_webhook import errors, providers
from hiwallet.topup_webhook.metrics import TopupMetrics
from hiwallet.topup_webhook.providers import Notification
from hiwallet.topup_webhook.settings import TopupWebhookSettings
from hiwallet.topup_webhook.store import Outcome, StoreUnavailable, TopupStore, Unstorable

log = structlog.get_logger(__name__)


def verifiers_for(settings: TopupWebhookSettings) -> dict[str, Verifier]:
    return {
        "stripe": StripeSignature(settings.secrets_of("stripe"), settings.tolerance_s),
        "bank": StandardWebhookSignature(settings.secrets_of("bank"), settings.tolerance_s),
    }


class TopupService:
    def __init__(self, store: TopupStore, verifiers: Mapping[str, Verifier], metrics: TopupMetrics) -> None:
        self.store = store
        self.verifiers = verifiers
        self.metrics = metrics

    async def receive(
        self, provider: str, body: bytes, headers: Mapping[str, str], request_id: str | None
    ) -> Outcome:
        """A webhook request: refused (errors.*) unless verified and readable; else stored."""
        verifier = self.verifiers.get(provider)
        if verifier is None:
            raise errors.UnknownProvider(f"no provider {provider!r}")
        try:
            verified = verifier.verify(body, headers)
        except VerificationFailed as exc:
            self.metrics.webhooks.labels(provider, "refused").inc()
            # the reason and the provider; never the body or a header's value
            log.warning("webhook refused", provider=provider, reason=exc.reason, body_bytes=len(body))
            raise errors.SignatureRefused(f"refused: {exc.reason}", reason=exc.reason) from exc
        try:
            notification = providers.read(provider, body, verified.message_id)
        except providers.Unreadable as exc:
            self.metrics.webhooks.labels(provider, "unreadable").inc()
            log.warning("webhook unreadable", provider=provider, reason=str(exc), body_bytes=len(body))
            raise errors.NotificationUnreadable(str(exc)) from exc
        return await self.ingest(notification, "webhook", request_id)

    async def ingest(self, notification: Notification, route: str, request_id: str | None = None) -> Outcome:
        provider = notification.provider
        if notification.unreadable is not None:
            # stored all the same (the provider sent it; an operator can read it), credited never
            log.warning(
                "notification names no readable payment",
                provider=provider,
                event_id=notification.event_id,
                event_type=notification.event_type,
                reason=notification.unreadable,
            )
        try:
            outcome = await self.store.ingest(notification, route, request_id)
        except Unstorable as exc:
            self.metrics.webhooks.labels(provider, "unreadable").inc()
            log.warning(
                "notification unstorable", provider=provider, event_id=notification.event_id, error=str(exc)
            )
            raise errors.NotificationUnreadable("the notification cannot be stored as JSON") from exc
        except StoreUnavailable as exc:
            self.metrics.webhooks.labels(provider, "unavailable").inc()
            raise errors.Unavailable(
                "the notification could not be stored; send it again", headers={"Retry-After": "5"}
            ) from exc
        if route == "webhook":
            self.metrics.webhooks.labels(provider, outcome.value).inc()
        # A payment recorded is logged by the store, one line a commit (store._log_recorded).
        payment = notification.payment
        if outcome is Outcome.MISMATCH and payment is not None:
            log.warning(
                "notification disagrees with the payment's record",
                provider=provider,
                payment_id=payment.id,
                event_id=notification.event_id,
            )
        return outcome

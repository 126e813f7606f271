"""core/webhooks.py (the verifiers topup-webhook and bank-webhook share) against the providers'
own packages: what they sign we accept, what their verify refuses we refuse, with several
secrets and signatures at once."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import stripe
from standardwebhooks import Webhook, WebhookVerificationError

from hiwallet.core.webhooks import (
    MAX_SIGNATURES,
    StandardWebhookSignature,
    StripeSignature,
    VerificationFailed,
    standard_webhooks_key,
)
from tests.topup_webhook.conftest import BANK_SECRET, BANK_SECRET_NEW, STRIPE_SECRET, STRIPE_SECRET_NEW

BODY = b'{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}'


def reason(verify: object) -> str:
    with pytest.raises(VerificationFailed) as caught:
        verify()  # type: ignore[operator]
    return caught.value.reason


def test_stripe_what_the_package_signs_is_accepted_with_either_secret() -> None:
    header = stripe.WebhookSignature.generate_signature_header(BODY.decode(), STRIPE_SECRET)
    for secrets in ([STRIPE_SECRET], [STRIPE_SECRET_NEW, STRIPE_SECRET]):
        assert StripeSignature(secrets, 300).verify(BODY, {"stripe-signature": header}).timestamp > 0
    assert reason(
        lambda: StripeSignature([STRIPE_SECRET_NEW], 300).verify(BODY, {"stripe-signature": header})
    ) == ("signature-mismatch")


def test_stripe_any_of_several_v1_signatures_and_the_packages_verdicts_agree() -> None:
    t = int(time.time())
    ours = stripe.WebhookSignature._compute_signature(f"{t}.{BODY.decode()}", STRIPE_SECRET)
    other = stripe.WebhookSignature._compute_signature(f"{t}.{BODY.decode()}", "whsec_other")
    header = f"t={t},v0=abc,v1={other},v1={ours}"
    assert stripe.WebhookSignature.verify_header(BODY, header, STRIPE_SECRET, 300)
    assert StripeSignature([STRIPE_SECRET], 300).verify(BODY, {"stripe-signature": header})
    altered = BODY.replace(b"pi_1", b"pi_2")
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(altered, header, STRIPE_SECRET, 300)
    assert reason(
        lambda: StripeSignature([STRIPE_SECRET], 300).verify(altered, {"stripe-signature": header})
    ) == ("signature-mismatch")
    old = t - 301
    stale = f"t={old},v1=" + stripe.WebhookSignature._compute_signature(
        f"{old}.{BODY.decode()}", STRIPE_SECRET
    )
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY, stale, STRIPE_SECRET, 300)
    assert reason(
        lambda: StripeSignature([STRIPE_SECRET], 300).verify(BODY, {"stripe-signature": stale})
    ) == ("stale-timestamp")


@pytest.mark.parametrize(
    "header",
    ["", "v1=" + "a" * 64, "t=12x,v1=" + "a" * 64, "t=1,t=2,v1=" + "a" * 64, "t=1,v0=abc", "t=1," * 600],
)
def test_stripe_malformed_headers(header: str) -> None:
    expected = "unsigned" if not header else "malformed-signature"
    assert reason(
        lambda: StripeSignature([STRIPE_SECRET], 300).verify(BODY, {"stripe-signature": header})
    ) == (expected)


def _sw_headers(secrets: list[str], when: datetime, msg_id: str = "msg_1") -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": " ".join(Webhook(s).sign(msg_id, when, BODY.decode()) for s in secrets),
    }


def _package_accepts(secret: str, headers: dict[str, str]) -> bool:
    try:
        Webhook(secret).verify(BODY, headers)
    except WebhookVerificationError:
        return False
    return True


def test_standard_webhooks_what_the_package_signs_is_accepted_and_both_agree() -> None:
    now = datetime.now(UTC)
    for signed_with, configured in (
        ([BANK_SECRET], [BANK_SECRET]),
        ([BANK_SECRET_NEW, BANK_SECRET], [BANK_SECRET]),
        ([BANK_SECRET_NEW], [BANK_SECRET, BANK_SECRET_NEW]),
    ):
        headers = _sw_headers(signed_with, now)
        verified = StandardWebhookSignature(configured, 300).verify(BODY, headers)
        assert verified.message_id == "msg_1"
        assert any(_package_accepts(s, headers) for s in configured)
    headers = _sw_headers([BANK_SECRET_NEW], now)
    with pytest.raises(WebhookVerificationError):
        Webhook(BANK_SECRET).verify(BODY, headers)
    assert reason(lambda: StandardWebhookSignature([BANK_SECRET], 300).verify(BODY, headers)) == (
        "signature-mismatch"
    )
    # the id is signed: the same signature under another id does not verify
    moved = {**_sw_headers([BANK_SECRET], now), "webhook-id": "msg_2"}
    assert reason(lambda: StandardWebhookSignature([BANK_SECRET], 300).verify(BODY, moved)) == (
        "signature-mismatch"
    )


def test_standard_webhooks_tolerance_both_ways_and_configurable() -> None:
    now = time.time()
    for offset, expected in ((-400, "stale-timestamp"), (400, "future-timestamp")):
        headers = _sw_headers([BANK_SECRET], datetime.fromtimestamp(now + offset, tz=UTC))
        with pytest.raises(WebhookVerificationError):
            Webhook(BANK_SECRET).verify(BODY, headers)
        assert (
            reason(lambda h=headers: StandardWebhookSignature([BANK_SECRET], 300).verify(BODY, h)) == expected
        )  # type: ignore[misc]
        # a wider tolerance than the package's fixed five minutes
        assert StandardWebhookSignature([BANK_SECRET], 600).verify(BODY, headers)


@pytest.mark.parametrize(
    "change",
    [
        {"webhook-id": ""},
        {"webhook-id": "msg.with.dots"},
        {"webhook-timestamp": "soon"},
        {"webhook-signature": "v1,not base64!"},
        {"webhook-signature": "v1a,abc"},
        {"webhook-signature": " ".join(["v1,AAAA"] * (MAX_SIGNATURES + 1))},
    ],
)
def test_standard_webhooks_malformed_headers(change: dict[str, str]) -> None:
    headers = {**_sw_headers([BANK_SECRET], datetime.now(UTC)), **change}
    assert reason(lambda: StandardWebhookSignature([BANK_SECRET], 300).verify(BODY, headers)) == (
        "malformed-signature"
    )


def test_standard_webhooks_secrets_with_or_without_prefix_and_padding() -> None:
    key = standard_webhooks_key(BANK_SECRET)
    assert standard_webhooks_key(BANK_SECRET.removeprefix("whsec_").rstrip("=")) == key
    with pytest.raises(ValueError):
        standard_webhooks_key("whsec_***")

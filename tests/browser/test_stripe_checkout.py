"""stripe-fake's hosted checkout, as a person pays on it: the merchant's server makes a Checkout
Session with the official ``stripe`` client, the person opens its page in chromium, a declined
card is told on the page, the test card pays, the browser goes back to the success URL, and the
payment is reported as Stripe reports a paid session (both events, signed, verified by
``stripe.Webhook``)."""

from __future__ import annotations

from typing import Any

import pytest
import stripe
from playwright.async_api import Page, Route

from hiwallet.fakes.stripe import TEST_CARD_DECLINED, TEST_CARD_SUCCEEDS
from tests.browser.conftest import check_page
from tests.fakes.conftest import STRIPE_KEY, STRIPE_SECRET, Fake, Receiver

WALLET = "0421:w:0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"
SUCCESS = "http://127.0.0.1:8002/topups/done?session={CHECKOUT_SESSION_ID}"
CANCEL = "http://127.0.0.1:8002/topups/cancelled"


def _client(fake: Fake) -> stripe.StripeClient:
    return stripe.StripeClient(STRIPE_KEY, base_addresses={"api": fake.base_url}, max_network_retries=0)


def _session(fake: Fake, amount: int = 25_000) -> Any:
    return _client(fake).v1.checkout.sessions.create(
        params={
            "mode": "payment",
            "success_url": SUCCESS,
            "cancel_url": CANCEL,
            "client_reference_id": WALLET,
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": "try",
                        "unit_amount": amount,
                        "product_data": {"name": "HiWallet top-up"},
                    },
                }
            ],
        }
    )


async def _back_at_the_merchant(page: Page) -> list[str]:
    reached: list[str] = []

    async def answer(route: Route) -> None:
        reached.append(route.request.url)
        await route.fulfill(status=200, content_type="text/html", body="<!doctype html><title>back</title>")

    await page.route("http://127.0.0.1:8002/**", answer)
    return reached


async def test_a_person_pays_on_the_hosted_page(page: Page, stripe_fake: Fake, receiver: Receiver) -> None:
    session = _session(stripe_fake)
    assert session.status == "open" and session.payment_status == "unpaid"
    assert session.url.endswith(f"/c/pay/{session.id}")
    reached = await _back_at_the_merchant(page)

    await page.goto(f"{stripe_fake.base_url}/c/pay/{session.id}")
    await check_page(page, "stripe-fake checkout")
    await page.get_by_label("Card number").fill(TEST_CARD_DECLINED)
    await page.get_by_label("Expiry (MM / YY)").fill("12 / 34")
    await page.get_by_label("CVC").fill("123")
    await page.get_by_role("button", name="Pay").click()
    assert "declined" in (await page.get_by_role("alert").inner_text())
    assert not receiver.requests  # nothing paid, nothing reported

    await page.get_by_label("Card number").fill(TEST_CARD_SUCCEEDS)
    await page.get_by_label("Expiry (MM / YY)").fill("12 / 34")
    await page.get_by_label("CVC").fill("123")
    await page.get_by_role("button", name="Pay").click()
    await page.wait_for_url("http://127.0.0.1:8002/topups/done**")
    assert reached == [f"http://127.0.0.1:8002/topups/done?session={session.id}"]

    first, second = receiver.wait_for(2)
    events = [
        stripe.Webhook.construct_event(r.body, r.headers["stripe-signature"], STRIPE_SECRET)
        for r in (first, second)
    ]
    assert [e.type for e in events] == ["checkout.session.completed", "payment_intent.succeeded"]
    paid = events[0].data.object
    assert (paid.id, paid.payment_status, paid.amount_total) == (session.id, "paid", 25_000)
    assert events[1].data.object.metadata["wallet"] == WALLET
    assert paid.payment_intent == events[1].data.object.id

    client = stripe.StripeClient(
        STRIPE_KEY, base_addresses={"api": stripe_fake.base_url}, max_network_retries=0
    )
    assert client.v1.checkout.sessions.retrieve(session.id).status == "complete"
    # A paid session's page is closed: paying twice is not possible.
    closed = await page.goto(f"{stripe_fake.base_url}/c/pay/{session.id}")
    assert closed is not None and closed.status == 410


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"mode": "subscription"}, "mode"),
        ({"success_url": "javascript:alert(1)"}, "success_url"),
        ({"success_url": None}, "success_url"),
    ],
)
def test_a_session_the_fake_cannot_make_is_refused_as_stripe_refuses(
    stripe_fake: Fake, params: dict[str, Any], param: str
) -> None:
    data = {
        "mode": "payment",
        "success_url": SUCCESS,
        "line_items[0][price_data][currency]": "try",
        "line_items[0][price_data][unit_amount]": "100",
        **params,
    }
    with stripe_fake.client() as client:
        answer = client.post("/v1/checkout/sessions", data={k: v for k, v in data.items() if v is not None})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param

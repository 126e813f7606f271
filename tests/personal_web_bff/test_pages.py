"""personal-web-bff in a real browser: a signed-in customer's wallets in English and Turkish, the
language switch remembered, the movements, a transfer whose form is submitted twice moving money
once, the cookies' flags, CSRF refusals, wallet-api away (a 503 page), logout. Every page passes
axe-core (no serious or critical violation) at a desktop's and a phone's width."""

from __future__ import annotations

import re

import httpx
from playwright.async_api import BrowserContext, Page, expect

from tests.browser.conftest import check_page
from tests.personal_web_bff.conftest import Bff, sign_in
from tests.servers import stop

TL = 100


async def _session_cookie(context: BrowserContext) -> str:
    return next(c["value"] for c in await context.cookies() if c["name"] == "hiwallet-session")


async def test_the_wallets_in_english_then_turkish_remembered(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    who = await bff.api.customer(funds=123_456)
    await sign_in(page, bff, who)
    await expect(page.get_by_role("heading", name="Your wallets")).to_be_visible()
    await expect(page.get_by_test_id("available")).to_have_text("₺1,234.56")
    await expect(page.get_by_test_id("cash")).to_have_text("₺1,234.56")
    await expect(page.get_by_test_id("promo")).to_have_text("₺0.00")
    await expect(page.get_by_role("heading", name=re.compile(who.number))).to_be_visible()
    # the chart of the last 30 days, drawn on the server (no script), named for a screen reader
    chart = page.get_by_role("img", name=re.compile("Cash over the last 30 days"))
    await expect(chart).to_have_accessible_name(re.compile("from ₺0.00 to ₺1,234.56"))
    assert len((await chart.locator("polyline").get_attribute("points") or "").split()) == 30
    # where to wire money to top up: our account, the wallet named in the reference
    await expect(page.get_by_role("heading", name="Top up by bank transfer")).to_be_visible()
    await expect(page.get_by_test_id("wire-iban")).to_have_text("TR42 0006 1000 0000 0012 3456 78")
    await expect(page.get_by_test_id("wire-reference")).to_have_text(f"HiWallet {who.wallet_id}")
    await check_page(page, "pweb home en")

    await page.get_by_role("button", name="Türkçe").click()
    await expect(page.get_by_role("heading", name="Cüzdanlarınız")).to_be_visible()
    await expect(page.get_by_test_id("available")).to_have_text("1.234,56 ₺")
    await expect(page.get_by_role("heading", name="Havale ile para yükle")).to_be_visible()
    assert await page.locator("html").get_attribute("lang") == "tr"
    await expect(page.get_by_role("img", name=re.compile("Son 30 günde nakit"))).to_be_visible()
    await check_page(page, "pweb home tr")
    await page.reload()  # remembered: the cookie, over the browser's English
    await expect(page.get_by_role("heading", name="Cüzdanlarınız")).to_be_visible()
    await page.get_by_role("button", name="English").click()
    await expect(page.get_by_role("heading", name="Your wallets")).to_be_visible()


async def test_the_cookies_are_sealed_httponly_and_lax(page: Page, context: BrowserContext, bff: Bff) -> None:
    who = await bff.api.customer(funds=TL)
    await sign_in(page, bff, who)
    await page.get_by_role("button", name="Türkçe").click()
    cookies = {c["name"]: c for c in await context.cookies()}
    for name in ("hiwallet-session", "hiwallet-locale"):
        cookie = cookies[name]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/", cookie
        assert not cookie["secure"]  # plain http on loopback: the documented development exception
    assert who.token not in cookies["hiwallet-session"]["value"]
    assert await page.evaluate("document.cookie") == ""  # script reads none of them
    async with httpx.AsyncClient() as client:
        answer = await client.get(bff.base_url + "/static/app.css")
    assert answer.status_code == 200 and "text/css" in answer.headers["content-type"]


async def test_a_transfer_submitted_twice_moves_money_once(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    sender = await bff.api.customer(funds=100 * TL)
    receiver = await bff.api.customer()
    await sign_in(page, bff, sender)
    await page.get_by_role("link", name="Send money").first.click()
    await check_page(page, "pweb send form")
    await page.get_by_label("Wallet number").fill(receiver.number)
    await page.get_by_label("Amount").fill("12,50")
    await page.get_by_label("Note for the recipient (optional)").fill("kira")
    await page.get_by_role("button", name="Continue").click()
    await expect(page.get_by_role("heading", name="Check and confirm")).to_be_visible()
    await expect(page.get_by_test_id("amount")).to_have_text("₺12.50")
    await check_page(page, "pweb send review")
    fields = {
        name: await page.locator(f"form[action='/send/confirm'] input[name='{name}']").get_attribute("value")
        for name in ("csrf", "key", "from", "to", "amount", "reference")
    }
    # A double click: the form may be posted twice, with the form's one Idempotency-Key.
    await page.get_by_role("button", name="Confirm and send").dblclick()
    await expect(page.get_by_role("heading", name="Sent")).to_be_visible()
    await expect(page.get_by_test_id("fee")).to_have_text("₺0.00")  # a person: no fee
    await expect(page.get_by_test_id("available")).to_have_text("₺87.50")
    await check_page(page, "pweb send done")

    # The same form posted again later (back and submit again): the same Idempotency-Key.
    async with httpx.AsyncClient(
        base_url=bff.base_url, cookies={"hiwallet-session": await _session_cookie(context)}
    ) as client:
        again = await client.post("/send/confirm", data=fields, headers={"Origin": bff.base_url})
    assert again.status_code == 200, again.text
    assert "12,50 ₺" in again.text and "87,50 ₺" in again.text  # no Accept-Language: Turkish
    assert (await bff.api.balance(receiver.wallet_id))["cash"] == 1250
    assert (await bff.api.balance(sender.wallet_id))["cash"] == 100 * TL - 1250

    # A new form is a new key: a second transfer moves money again.
    await page.goto(bff.base_url + "/send")
    await page.get_by_label("Wallet number").fill(receiver.number)
    await page.get_by_label("Amount").fill("1")
    await page.get_by_role("button", name="Continue").click()
    await page.get_by_role("button", name="Confirm and send").click()
    await expect(page.get_by_role("heading", name="Sent")).to_be_visible()
    assert (await bff.api.balance(receiver.wallet_id))["cash"] == 1350

    # Each movement, with its reference, newest last in the statement's order.
    await page.goto(bff.base_url + "/")
    await page.get_by_role("link", name="Movements").click()
    await expect(page.get_by_role("heading", name="Movements")).to_be_visible()
    movements = page.locator(".movement")
    await expect(movements).to_have_count(3)  # the funding, the two transfers
    await expect(movements.filter(has_text="kira")).to_contain_text("−₺12.50")
    # each transfer names its other wallet; the funding (a top-up) names none
    await expect(movements.filter(has_text="kira")).to_contain_text(f"To {receiver.number}")
    await expect(page.locator(".movement .party")).to_have_count(2)
    await check_page(page, "pweb movements")


async def test_a_transfer_refused_by_wallet_api_says_why(page: Page, bff: Bff) -> None:
    sender = await bff.api.customer(funds=5 * TL)
    receiver = await bff.api.customer()
    await sign_in(page, bff, sender, "/send")
    await page.get_by_label("Wallet number").fill(receiver.number)
    await page.get_by_label("Amount").fill("50")
    await page.get_by_role("button", name="Continue").click()
    await page.get_by_role("button", name="Confirm and send").click()
    await expect(page.get_by_role("alert")).to_have_text("Your available balance is not enough for this.")
    assert (await bff.api.balance(receiver.wallet_id))["cash"] == 0
    await page.get_by_label("Amount").fill("abc")
    await page.get_by_role("button", name="Continue").click()
    await expect(page.get_by_label("Amount")).to_have_attribute("aria-invalid", "true")
    await check_page(page, "pweb send refused")


async def test_forms_without_the_token_or_from_elsewhere_are_refused(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    sender = await bff.api.customer(funds=100 * TL)
    receiver = await bff.api.customer()
    await sign_in(page, bff, sender, "/send")
    key = await page.locator("input[name='key']").get_attribute("value")
    csrf = await page.locator("input[name='csrf']").first.get_attribute("value")
    form = {"key": key, "from": sender.wallet_id, "to": receiver.number, "amount": "10"}
    async with httpx.AsyncClient(
        base_url=bff.base_url, cookies={"hiwallet-session": await _session_cookie(context)}
    ) as client:
        here = {"Origin": bff.base_url}
        no_token = await client.post("/send/confirm", data=form, headers=here)
        wrong = await client.post("/send/confirm", data={**form, "csrf": "x" * 43}, headers=here)
        elsewhere = await client.post(
            "/send/confirm", data={**form, "csrf": csrf}, headers={"Origin": "http://evil.example"}
        )
        locale = await client.post(
            "/locale", data={"csrf": csrf, "locale": "en"}, headers={"Origin": "http://evil.example"}
        )
        logout = await client.post("/logout", data={}, headers=here)
    for refused in (no_token, wrong, elsewhere, locale, logout):
        assert refused.status_code == 403, refused.text
        assert refused.headers["content-type"].startswith("text/html")
        assert (
            "Bu formun süresi dolmuş ya da bu siteden gelmemiş" in refused.text
        )  # Turkish: no Accept-Language
    assert (await bff.api.balance(receiver.wallet_id))["cash"] == 0
    await page.set_content(no_token.text)  # the page a person would see, checked as such
    await check_page(page, "pweb csrf refused")


async def test_wallet_api_away_is_a_503_page_saying_what_to_do(page: Page, bff: Bff) -> None:
    who = await bff.api.customer(funds=TL)
    await sign_in(page, bff, who)
    stop(bff.api.server, bff.api.thread)
    answer = await page.goto(bff.base_url + "/")
    assert answer is not None and answer.status == 503
    assert answer.headers["retry-after"] == "30"
    await expect(page.get_by_role("heading", name="A part of HiWallet is not answering")).to_be_visible()
    await expect(page.get_by_text("wallet-api")).to_be_visible()
    await expect(page.get_by_text("try again in a minute")).to_be_visible()
    await check_page(page, "pweb wallet-api away")


async def test_logout_signs_out_here_and_at_the_provider(
    page: Page, context: BrowserContext, bff: Bff
) -> None:
    who = await bff.api.customer(funds=TL)
    await sign_in(page, bff, who)
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="You are signed out")).to_be_visible()
    await check_page(page, "pweb signed out")
    assert "hiwallet-session" not in {c["name"] for c in await context.cookies()}
    await page.goto(bff.base_url + "/")
    await page.get_by_label("Password").wait_for()  # the provider asks again: its session ended too


async def test_paying_a_business_shows_the_fee_charged(page: Page, bff: Bff) -> None:
    """wallet-api offers no quote: the confirmation says a payment adds a fee, and the page after
    shows what was charged (TransferOut's fee), which the ledger's balances confirm."""
    who = await bff.api.customer(funds=100 * TL)
    shop = await bff.api.business()
    await sign_in(page, bff, who, "/send")
    await page.get_by_label("Wallet number").fill(shop.number)
    await page.get_by_label("Amount").fill("50")
    await page.get_by_role("button", name="Continue").click()
    await expect(page.get_by_text("Paying a business adds a fee")).to_be_visible()
    await page.get_by_role("button", name="Confirm and send").click()
    await expect(page.get_by_role("heading", name="Sent")).to_be_visible()
    fee = 100 * TL - 50 * TL - (await bff.api.balance(who.wallet_id))["cash"]
    assert fee > 0
    await expect(page.get_by_test_id("fee")).to_have_text(f"₺{fee // 100}.{fee % 100:02d}")
    assert (await bff.api.balance(shop.wallet_id))["cash"] == 50 * TL

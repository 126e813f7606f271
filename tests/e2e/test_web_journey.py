"""A person's whole journey through the personal web app, against the whole system as `hiwallet
up` runs it (every deployable a real process, on free ports, fresh databases), in a real
browser, once in English and once in Turkish (one person per language, one `hiwallet up` for
both): register (the code from the mail catcher), verify (the phone by an SMS from sms-fake, the
identity against nvi-fake's registry, the two documents), a wire from the person's own bank
account (bank-fake; onboarding's `wires` consumer makes them Verified: the sender's TCKN is
theirs), a card top-up on stripe-fake's hosted page, a transfer to the demo customer, a
payment to the demo business (its fee shown once charged), a withdrawal to their own IBAN
(bank-fake decides at once), and the movements page showing each
of them with its amount, the balance adding up. Every page a person sees is checked with
axe-core and photographed (tests/browser/conftest.py `check_page`).

The texts the test looks for are the app's own: the English message ids, and for Turkish their
translations read from the app's catalogue (src/hiwallet/personal_web_bff/locale)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from babel.messages.pofile import read_po
from playwright.async_api import Browser, Page, expect

from hiwallet.core.pages import format_money
from hiwallet.fakes.stripe import TEST_CARD_SUCCEEDS
from tests.browser.conftest import ACTION_TIMEOUT_MS, browser, check_page  # noqa: F401
from tests.e2e import harness
from tests.e2e.onboarding import AYSE, MEHMET, new_email, new_phone
from tests.e2e.up_system import Output, fresh_databases, running_up, system_env, wait_running
from tests.e2e.withdrawals import new_iban, printed

TL = 100
PASSWORD = "web journey pass 1"
CATALOGUE = (
    Path(__file__).resolve().parents[2] / "src/hiwallet/personal_web_bff/locale/tr/LC_MESSAGES/messages.po"
)
# Each language's person: nvi-fake's citizens (a TCKN is bound to one customer per system).
PEOPLE = {"en": ("en-GB", AYSE), "tr": ("tr-TR", MEHMET)}
# The amounts of the journey (minor units).
WIRE, CARD, SENT, PAID, WITHDRAWN = 500 * TL, 250 * TL, 12_050, 40 * TL, 100 * TL
# The page waits for what other processes do (a wire, a webhook, the saga) on a shared machine.
SLOW_MS = 60_000


def texts(locale: str) -> Callable[[str], str]:
    """The app's text for a message id in ``locale`` (its catalogue; English is the id)."""
    if locale == "en":
        return lambda message: message
    with CATALOGUE.open("rb") as po:
        catalog = read_po(po, locale=locale)

    def translated(message: str) -> str:
        found = catalog.get(message)
        assert found is not None and found.string, f"no {locale} text for {message!r}"
        return str(found.string)

    return translated


class Up:
    def __init__(self, ports: dict[str, int], out: Output) -> None:
        self.ports = ports
        self.out = out

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    @property
    def web(self) -> str:
        return self.url("personal-web-bff")

    def demo_number(self, who: str = "customer") -> str:
        """The demo customer's (or business's) wallet number, as up's banner prints it."""
        found = re.search(rf"demo {who}.*?\n\s+wallet \S+\s+number (\S+)", self.out.path.read_text())
        assert found, self.out.path.read_text()
        return found.group(1)

    async def email_code(self, email: str) -> str:
        async with httpx.AsyncClient(base_url=self.url("mail"), timeout=10) as mail:

            async def arrived() -> dict[str, Any] | None:
                found = (await mail.get("/api/v1/search", params={"query": f"to:{email}"})).json()
                if not found["messages"]:
                    return None
                message: dict[str, Any] = (
                    await mail.get(f"/api/v1/message/{found['messages'][0]['ID']}")
                ).json()
                return message

            message = await harness.until(arrived, 30, "the mail with the code")
        return code_in(message["Text"])

    async def sms_code(self, phone: str) -> str:
        async with httpx.AsyncClient(base_url=self.url("sms"), timeout=10) as sms:

            async def sent() -> list[dict[str, Any]] | None:
                got = await sms.get(
                    "/v1/sms", params={"to": phone}, headers={"Authorization": "Bearer sms_dev_key"}
                )
                data: list[dict[str, Any]] = got.json()["data"]
                return data or None

            data = await harness.until(sent, 30, "the SMS with the code")
        return code_in(data[0]["body"])

    async def wire(self, who: dict[str, str], iban: str, to: str, reference: str, amount_minor: int) -> None:
        """The person's bank sends a wire from their own account: to our IBAN, with the reference,
        both as the home page shows them."""
        async with httpx.AsyncClient(base_url=self.url("bank"), timeout=10) as bank:
            sent = await bank.post(
                "/v1/topups",
                json={
                    "sender_name": f"{who['given_name']} {who['family_name']}",
                    "sender_iban": iban,
                    "sender_tckn": who["tckn"],
                    "receiver_iban": to,
                    "reference": reference,
                    "amount_minor": amount_minor,
                    "currency": "TRY",
                },
                headers={"Authorization": f"Bearer {harness.BANK_API_KEY}"},
            )
        assert sent.status_code == 200, sent.text


def code_in(text: str) -> str:
    found = re.search(r"\b([0-9]{6})\b", text)
    assert found, "no code in the message"
    return found.group(1)


@pytest.fixture(scope="module")
async def databases() -> AsyncIterator[dict[str, str]]:
    async with fresh_databases() as names:
        yield names


@pytest.fixture(scope="module")
def up(databases: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    # The web app on a free port: up gives identity its redirect URI there (the realm files
    # name the default port's).
    env, ports = system_env(databases)
    directory = tmp_path_factory.mktemp("journey")
    # Killed at the end, not stopped in order: test_up tests the stopping.
    with running_up(env, directory / "up.log", graceful=False) as (proc, out):
        wait_running(proc, out)
        yield Up(ports, out)
        assert proc.poll() is None, "hiwallet up exited during the journey"


async def test_a_person_in_english_and_one_in_turkish_register_verify_top_up_pay_withdraw_and_read_it(
    browser: Browser,  # noqa: F811
    up: Up,
) -> None:
    """The two people at once (each their own browser profile): the journeys wait mostly for
    other processes (a mail, a webhook, the saga), so together they cost little more than one."""
    # A task group: should one journey fail, the other is cancelled (not left running on a
    # system the fixture is stopping).
    async with asyncio.TaskGroup() as group:
        for language in PEOPLE:
            group.create_task(journey(browser, up, language))


async def journey(browser: Browser, up: Up, language: str) -> None:  # noqa: F811
    browser_locale, who = PEOPLE[language]
    context = await browser.new_context(locale=browser_locale, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        await steps(await context.new_page(), up, who, language)
    finally:
        await context.close()


async def steps(page: Page, up: Up, who: dict[str, str], language: str) -> None:
    _ = texts(language)

    def money(minor: int) -> str:
        return format_money(minor, "TRY", language)

    web = up.web
    email, phone, iban = new_email(), new_phone(), new_iban()

    # -- register: the address, the code from the mail, a password; then the provider's sign-in
    await page.goto(f"{web}/register")
    assert await page.locator("html").get_attribute("lang") == language
    await check_page(page, f"journey {language} register")
    await page.get_by_label(_("E-mail address"), exact=True).fill(email)
    await page.get_by_role("button", name=_("Send me a code")).click()
    await page.get_by_label(_("Code from the e-mail"), exact=True).fill(await up.email_code(email))
    await page.get_by_label(_("Choose a password"), exact=True).fill(PASSWORD)
    await check_page(page, f"journey {language} register code")
    await page.get_by_role("button", name=_("Open my account")).click()
    await page.get_by_label("E-mail or username").fill(email)  # identity's page (English only)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{web}/verify")

    # -- verify: phone, identity, the two documents
    tier = page.get_by_test_id("tier")
    await expect(tier).to_have_text(f"{_('Your level:')} {_('New')}")
    await check_page(page, f"journey {language} verify")
    await page.get_by_label(_("Mobile number"), exact=True).fill(phone)
    await page.get_by_role("button", name=_("Send me a code")).click()
    await page.get_by_label(_("Code from the SMS"), exact=True).fill(await up.sms_code(phone))
    await page.get_by_role("button", name=_("Verify my phone")).click()
    await expect(page.get_by_role("heading", name=_("Your mobile phone"))).to_have_count(0)
    await page.get_by_label(_("T.C. identity number"), exact=True).fill(who["tckn"])
    await page.get_by_label(_("Given name"), exact=True).fill(who["given_name"])
    await page.get_by_label(_("Family name"), exact=True).fill(who["family_name"])
    await page.get_by_label(_("Date of birth"), exact=True).fill(who["birth_date"])
    await page.get_by_role("button", name=_("Verify my identity")).click()
    await expect(page.get_by_role("heading", name=_("Your identity"))).to_have_count(0)
    await page.get_by_role("button", name=_("I accept the user agreement")).click()
    await page.get_by_role("button", name=_("I have read the privacy notice")).click()
    await expect(tier).to_have_text(f"{_('Your level:')} {_('Identity checked')}")
    await check_page(page, f"journey {language} verified identity")

    # -- a wire from the person's own bank account: in the wallet, and the level is Verified
    await page.goto(f"{web}/")
    await expect(page.get_by_role("heading", name=_("Your wallets"))).to_be_visible()
    # where to wire: our IBAN and the reference naming the wallet, as the page shows them
    our_iban = await page.get_by_test_id("wire-iban").inner_text()
    reference = await page.get_by_test_id("wire-reference").inner_text()
    await check_page(page, f"journey {language} home")
    await up.wire(who, iban, our_iban, reference, WIRE)

    async def level_verified() -> bool:
        await page.goto(f"{web}/verify")
        return await tier.inner_text() == f"{_('Your level:')} {_('Verified')}"

    # the page asked again each half second (each asks onboarding and wallet-api)
    await harness.until(
        level_verified, SLOW_MS / 1000, "the level Verified after the own wire", interval_s=0.5
    )
    await check_page(page, f"journey {language} verified")
    await page.goto(f"{web}/")
    await expect(page.get_by_test_id("available")).to_have_text(money(WIRE))

    # -- a card top-up on stripe-fake's hosted page
    await page.get_by_role("link", name=_("Top up by card")).first.click()
    await check_page(page, f"journey {language} topup")
    await page.get_by_label(_("Amount"), exact=True).fill(str(CARD // TL))
    await page.get_by_role("button", name=_("Continue to payment")).click()
    await page.get_by_label("Card number").fill(TEST_CARD_SUCCEEDS)  # the provider's page
    await page.get_by_label("Expiry (MM / YY)").fill("12 / 34")
    await page.get_by_label("CVC").fill("123")
    await page.get_by_role("button", name="Pay").click()
    await page.wait_for_url(f"{web}/topup/done**")
    heading = page.get_by_role("heading", name=_("Your top-up is in your wallet"))
    await expect(heading).to_be_visible(timeout=SLOW_MS)
    await expect(page.get_by_test_id("amount")).to_have_text(money(CARD))
    await expect(page.get_by_test_id("available")).to_have_text(money(WIRE + CARD))
    await check_page(page, f"journey {language} topup done")

    # -- a transfer to another customer (the demo customer, their wallet number)
    demo = up.demo_number()
    await page.goto(f"{web}/")
    await page.get_by_role("link", name=_("Send money")).first.click()
    await page.get_by_label(_("Wallet number"), exact=True).fill(demo)
    await page.get_by_label(_("Amount"), exact=True).fill(f"{SENT // TL},{SENT % TL:02d}")
    await page.get_by_label(_("Note for the recipient (optional)")).fill(f"journey {language}")
    await page.get_by_role("button", name=_("Continue"), exact=True).click()
    await expect(page.get_by_role("heading", name=_("Check and confirm"))).to_be_visible()
    await expect(page.get_by_test_id("amount")).to_have_text(money(SENT))
    await check_page(page, f"journey {language} send review")
    await page.get_by_role("button", name=_("Confirm and send")).click()
    await expect(page.get_by_role("heading", name=_("Sent"), exact=True)).to_be_visible()
    await expect(page.get_by_test_id("fee")).to_have_text(money(0))  # to a person: no fee
    await expect(page.get_by_test_id("available")).to_have_text(money(WIRE + CARD - SENT))
    await check_page(page, f"journey {language} sent")

    # -- a payment to the demo business: a business's payment adds a fee, shown once charged
    await page.goto(f"{web}/")
    await page.get_by_role("link", name=_("Send money")).first.click()
    await page.get_by_label(_("Wallet number"), exact=True).fill(up.demo_number("business"))
    await page.get_by_label(_("Amount"), exact=True).fill(str(PAID // TL))
    await page.get_by_role("button", name=_("Continue"), exact=True).click()
    await expect(page.get_by_role("heading", name=_("Check and confirm"))).to_be_visible()
    await page.get_by_role("button", name=_("Confirm and send")).click()
    await expect(page.get_by_role("heading", name=_("Sent"), exact=True)).to_be_visible()
    paid_fee = int(re.sub(r"[^0-9]", "", await page.get_by_test_id("fee").inner_text()))
    assert paid_fee > 0
    await expect(page.get_by_test_id("available")).to_have_text(money(WIRE + CARD - SENT - PAID - paid_fee))
    await check_page(page, f"journey {language} paid")

    # -- a withdrawal to the person's own IBAN, followed to the bank
    await page.goto(f"{web}/")
    await page.get_by_role("link", name=_("Withdraw")).first.click()
    await page.get_by_label(_("IBAN"), exact=True).fill(printed(iban))
    await page.get_by_label(_("Amount"), exact=True).fill(str(WITHDRAWN // TL))
    await check_page(page, f"journey {language} withdraw")
    await page.get_by_role("button", name=_("Withdraw")).click()
    await page.wait_for_url(f"{web}/withdrawals/**")
    await expect(page.get_by_test_id("state")).to_have_text(
        _("Sent: the bank has the money."), timeout=SLOW_MS
    )
    await expect(page.get_by_test_id("amount")).to_have_text(money(WITHDRAWN))
    # the fee as shown (two decimals in either language's format)
    fee = int(re.sub(r"[^0-9]", "", await page.get_by_test_id("fee").inner_text()))
    await expect(page.get_by_test_id("fee")).to_have_text(money(fee))
    await check_page(page, f"journey {language} withdrawn")

    # -- the movements: each of them with its amount and the balance after it; the balance adds up
    await page.goto(f"{web}/")
    await page.get_by_role("link", name=_("Movements")).first.click()
    await expect(page.get_by_role("heading", name=_("Movements"))).to_be_visible()
    await check_page(page, f"journey {language} movements")
    expected = [
        (_("Top-up"), WIRE),
        (_("Top-up"), CARD),
        (_("Transfer"), -SENT),
        (_("Payment"), -(PAID + paid_fee)),  # the amount and its fee, one line
        (_("Withdrawal"), -(WITHDRAWN + fee)),
    ]
    lines = page.locator(".movement")
    await expect(lines).to_have_count(len(expected))
    balance = 0
    for line, (kind, amount) in zip(await lines.all(), expected, strict=True):
        balance += amount
        await expect(line.locator(".what")).to_have_text(kind)
        await expect(line.locator(".amount")).to_have_text(money(amount))
        await expect(line.locator(".muted")).to_contain_text(f"{_('Balance')} {money(balance)}")
    assert balance == WIRE + CARD - SENT - PAID - paid_fee - WITHDRAWN - fee
    transfer = lines.nth(2)
    await expect(transfer.locator(".party")).to_have_text(_("To %(party)s") % {"party": demo})
    await expect(transfer.locator(".ref")).to_have_text(f"journey {language}")
    await expect(page.get_by_text(f"{_('Available')} {money(balance)}")).to_be_visible()
    await page.goto(f"{web}/")
    await expect(page.get_by_test_id("available")).to_have_text(money(balance))

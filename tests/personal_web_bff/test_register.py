"""Registration and verification from the web app, against onboarding's real processes
(onboarding, the mail catcher, sms-fake, nvi-fake, the first wire's path; wallet-api in a
thread): the address checked by the code read from the mail catcher, a password, sign-in, then
the phone by SMS, the identity against nvi-fake's registry, the two documents; each page shows
the level and what it allows this month."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.browser.conftest import check_page
from tests.e2e import harness
from tests.e2e.onboarding import AYSE, OnboardingSystem, new_email, new_phone, onboarding_system
from tests.identity.conftest import IdentityServer
from tests.personal_web_bff.conftest import Bff, running_bff

PASSWORD = "web onboarding pass 1"


@pytest.fixture(scope="module")
async def vhost() -> AsyncIterator[str]:
    name = f"hwt{os.getpid()}-{uuid.uuid4().hex[:8]}"
    await harness.add_vhost(name)
    yield name
    await harness.delete_vhost(name)


@pytest.fixture
async def onboarding(
    vhost: str,
    onboarding_template: str,
    wallet_template: str,
    topup_template: str,
    customer_idp: IdentityServer,
    staff_idp: IdentityServer,
    tmp_path: Path,
) -> AsyncIterator[OnboardingSystem]:
    templates = (onboarding_template, wallet_template, topup_template)
    async with onboarding_system(vhost, templates, customer_idp, staff_idp, tmp_path) as running:
        yield running


@pytest.fixture
async def onboarding_bff(onboarding: OnboardingSystem, bff_port: int) -> AsyncIterator[Bff]:
    async with running_bff(onboarding.api, bff_port, onboarding_url=onboarding.url("onboarding")) as running:
        yield running


async def test_a_person_registers_and_verifies(
    page: Page, onboarding: OnboardingSystem, onboarding_bff: Bff
) -> None:
    email, phone = new_email(), new_phone()
    onboarding.personal.update({email, phone, phone[3:], AYSE["tckn"]})
    await page.goto(onboarding_bff.base_url + "/register")
    await check_page(page, "pweb register")
    await page.get_by_label("E-mail address").fill(email)
    await page.get_by_role("button", name="Send me a code").click()
    await page.get_by_label("Code from the e-mail").fill(await onboarding.email_code(email))
    await page.get_by_label("Choose a password").fill(PASSWORD)
    await check_page(page, "pweb register code")
    await page.get_by_role("button", name="Open my account").click()

    await page.get_by_label("E-mail or username").fill(email)  # the provider's sign-in page
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(onboarding_bff.base_url + "/verify")
    await expect(page.get_by_role("heading", name="Your verification")).to_be_visible()
    await expect(page.get_by_test_id("tier")).to_have_text("Your level: New")
    await check_page(page, "pweb verify start")

    await page.get_by_label("Mobile number").fill(phone)
    await page.get_by_role("button", name="Send me a code").click()
    await page.get_by_label("Code from the SMS").fill(await onboarding.sms_code(phone))
    await page.get_by_role("button", name="Verify my phone").click()
    await expect(page.get_by_role("heading", name="Your mobile phone")).to_have_count(0)

    await page.get_by_label("T.C. identity number").fill(AYSE["tckn"])
    await page.get_by_label("Given name").fill(AYSE["given_name"])
    await page.get_by_label("Family name").fill(AYSE["family_name"])
    await page.get_by_label("Date of birth").fill(AYSE["birth_date"])
    await page.get_by_role("button", name="Verify my identity").click()
    await expect(page.get_by_role("heading", name="Your identity")).to_have_count(0)

    await page.get_by_role("button", name="I accept the user agreement").click()
    await page.get_by_role("button", name="I have read the privacy notice").click()
    await expect(page.get_by_role("button", name="I have read the privacy notice")).to_have_count(0)
    await check_page(page, "pweb verify done")
    # phone, identity and both documents: the tier is raised in wallet-api (unverified)
    await expect(page.get_by_test_id("tier")).to_have_text("Your level: Identity checked")
    await expect(page.get_by_test_id("next")).to_contain_text("Verified")
    await expect(page.get_by_role("heading", name="What your level allows this month")).to_be_visible()
    assert onboarding.leaks() == [], onboarding.leaks()

"""A real browser for the tests of pages: Debian's chromium (``make browser`` installs it),
driven by Playwright's async API (on the tests' one event loop: the sync API would run a loop
of its own in the thread, which pytest-asyncio's loop cannot share), as a person would use the
pages; each page checked with axe-core and photographed at a desktop's and a phone's width.

Screenshots are the run's artifacts, kept in ``$HIWALLET_TEST_ARTIFACTS`` (default
``test-artifacts/`` at the repository's root, not committed)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

ARTIFACTS = Path(
    os.environ.get("HIWALLET_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
# A desktop's and a phone's width (CSS pixels).
WIDTHS = (1280, 390)
# What must not be on any page: axe-core's two highest impacts.
BLOCKING_IMPACTS = frozenset({"serious", "critical"})
# A page and its checks are given this long for each action (a shared machine is slow at times).
ACTION_TIMEOUT_MS = 15_000

_axe = Axe()


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError("Debian's chromium is not installed: `make browser` installs it (as root)")
    return path


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # As root (CI), chromium's sandbox cannot start: it runs without it there, on our own pages.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = await playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=args)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    """A fresh browser profile (no cookies), in English unless a test opens its own."""
    opened = await browser.new_context(locale="en-GB", viewport={"width": WIDTHS[0], "height": 900})
    opened.set_default_timeout(ACTION_TIMEOUT_MS)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def page(context: BrowserContext) -> Page:
    return await context.new_page()


async def blocking_violations(page: Page) -> list[str]:
    """axe-core's serious and critical violations on the page as it stands, one line each."""
    results = await _axe.run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — {len(v['nodes'])} node(s), e.g. {v['nodes'][0]['target']}"
        for v in results.response["violations"]
        if v.get("impact") in BLOCKING_IMPACTS
    ]


async def check_page(page: Page, name: str) -> None:
    """The page passes axe-core at each width and is photographed there (the run's artifacts)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, before the pages load)
    original = page.viewport_size
    try:
        for width in WIDTHS:
            await page.set_viewport_size({"width": width, "height": 900})
            violations = await blocking_violations(page)
            assert not violations, f"{name} at {width} px:\n" + "\n".join(violations)
            safe = re.sub(r"[^a-z0-9-]+", "-", name.lower())
            await page.screenshot(path=str(ARTIFACTS / f"{safe}-{width}.png"), full_page=True)
    finally:
        if original is not None:
            await page.set_viewport_size(original)


# identity's servers (the sign-in pages every BFF sends a person to)
# the outside institutions' fakes and a receiver of their webhooks (stripe-fake's hosted checkout)
from tests.fakes.conftest import receiver, stripe_fake, stripe_overrides, stripe_settings  # noqa: E402, F401
from tests.identity.conftest import (  # noqa: E402, F401
    customer_idp,
    identity_factory,
    identity_template,
    staff_identity_template,
    staff_idp,
)

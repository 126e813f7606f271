"""Password hashing is bounded: at most ``argon2_max_concurrent_hashes`` argon2 hashes at once
(each holds ``argon2_memory_kib``), a request that cannot get a slot in time is answered 503.

The count is observed where the hashes run (``Passwords.running``/``peak_running``, counted in the
hashing threads), never by timing.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher

from hiwallet.identity.errors import PasswordHashingBusy
from hiwallet.identity.passwords import Passwords
from hiwallet.identity.settings import IdentitySettings
from tests.identity.conftest import PASSWORD, IdentityServer, ServerFactory, post_form
from tests.identity.test_code_flow import MOBILE_REDIRECT, auth_params, pkce_pair

CHEAP = {"argon2_time_cost": 1, "argon2_memory_kib": 1024, "argon2_parallelism": 1}
WAIT_S = 10.0  # an upper bound for a thread to reach the gate on a loaded machine, never a figure


class GatedHasher:
    """Stands in for argon2 (the seam: ``Passwords._hasher``): each call blocks until the gate
    opens, so the test decides when hashes finish and can see how many run at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def hash(self, password: str) -> str:
        if not self.gate.wait(WAIT_S):
            raise RuntimeError("the gate was never opened")
        return "hashed:" + password

    def verify(self, stored_hash: str, password: str) -> bool:
        if not self.gate.wait(WAIT_S):
            raise RuntimeError("the gate was never opened")
        return stored_hash == "hashed:" + password


async def until(condition: Any) -> None:
    for _ in range(int(WAIT_S / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_no_more_hashes_at_once_than_the_limit() -> None:
    passwords = Passwords(IdentitySettings(**CHEAP, argon2_max_concurrent_hashes=2))
    gated = GatedHasher()
    passwords._hasher = gated  # type: ignore[assignment]
    try:
        work = [asyncio.create_task(passwords.hash(f"p{i}")) for i in range(6)]
        work += [asyncio.create_task(passwords.verify(f"hashed:v{i}", f"v{i}")) for i in range(2)]
        await until(lambda: passwords.running == 2)
        # Eight were asked for; two run, six wait for a slot.
        assert passwords.running == 2
        assert not any(task.done() for task in work)
        gated.gate.set()
        results = await asyncio.gather(*work)
        assert results == [f"hashed:p{i}" for i in range(6)] + [True, True]
        assert passwords.peak_running == 2
        assert passwords.running == 0
    finally:
        gated.gate.set()
        await passwords.close()


async def test_a_request_that_gets_no_slot_in_time_is_refused_and_the_slot_comes_back() -> None:
    passwords = Passwords(IdentitySettings(**CHEAP, argon2_max_concurrent_hashes=1, argon2_slot_wait_s=0.05))
    gated = GatedHasher()
    passwords._hasher = gated  # type: ignore[assignment]
    try:
        first = asyncio.create_task(passwords.hash("first"))
        await until(lambda: passwords.running == 1)
        with pytest.raises(PasswordHashingBusy) as busy:
            await passwords.verify("hashed:second", "second")
        assert busy.value.status == 503
        assert busy.value.headers == {"Retry-After": "1"}
        gated.gate.set()
        assert await first == "hashed:first"
        # The refused request took no slot: the next one gets one.
        assert await passwords.verify("hashed:third", "third") is True
        assert passwords.peak_running == 1
    finally:
        gated.gate.set()
        await passwords.close()


async def test_a_cancelled_request_keeps_its_slot_until_its_hash_is_done() -> None:
    """A client that goes away does not free the memory its hash holds, so it must not free the
    slot either."""
    passwords = Passwords(IdentitySettings(**CHEAP, argon2_max_concurrent_hashes=1, argon2_slot_wait_s=0.05))
    gated = GatedHasher()
    passwords._hasher = gated  # type: ignore[assignment]
    try:
        gone = asyncio.create_task(passwords.hash("gone"))
        await until(lambda: passwords.running == 1)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        with pytest.raises(PasswordHashingBusy):
            await passwords.hash("next")
        gated.gate.set()
        await until(lambda: passwords.running == 0)
        assert await passwords.hash("after") == "hashed:after"
        assert passwords.peak_running == 1
    finally:
        gated.gate.set()
        await passwords.close()


def _passwords(server: IdentityServer) -> Passwords:
    passwords: Passwords = server.server.config.app.state.realm.passwords
    return passwords


def test_concurrent_sign_ins_all_succeed_within_the_limit(identity_factory: ServerFactory) -> None:
    idp = identity_factory("hiwallet", argon2_max_concurrent_hashes=2)
    users = [f"slot-user-{i}" for i in range(8)]
    for user in users:
        idp.create_user(user)
    passwords = _passwords(idp)
    passwords.peak_running = 0  # the sign-ins' own figure, not the registrations'

    def sign_in(user: str) -> int:
        answer = httpx.post(
            idp.token_url,
            data={
                "grant_type": "password",
                "client_id": "personal-mobile-api",
                "username": user,
                "password": PASSWORD,
            },
            timeout=30,
        )
        return answer.status_code

    with ThreadPoolExecutor(len(users)) as pool:
        statuses = list(pool.map(sign_in, users))
    assert statuses == [200] * len(users)
    assert 1 <= passwords.peak_running <= 2
    metrics = httpx.get(idp.base_url + "/metrics", timeout=10).text
    assert "hiwallet_identity_password_hashes_running 0.0" in metrics


def test_a_sign_in_that_gets_no_slot_is_answered_503_problem(identity_factory: ServerFactory) -> None:
    idp = identity_factory("hiwallet", argon2_max_concurrent_hashes=1, argon2_slot_wait_s=0.05)
    idp.create_user("waiting")
    passwords = _passwords(idp)
    gated = GatedHasher()
    real = passwords._hasher
    passwords._hasher = gated  # type: ignore[assignment]
    form = {
        "grant_type": "password",
        "client_id": "personal-mobile-api",
        "username": "waiting",
        "password": PASSWORD,
    }
    try:
        with ThreadPoolExecutor(1) as pool:
            holding = pool.submit(httpx.post, idp.token_url, data=form, timeout=30)
            for _ in range(int(WAIT_S / 0.01)):
                if passwords.running == 1:
                    break
                threading.Event().wait(0.01)
            assert passwords.running == 1
            refused = httpx.post(idp.token_url, data=form, timeout=30)
            assert refused.status_code == 503
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["type"].endswith("password-hashing-busy")
            gated.gate.set()
            # the gated "hash" does not verify the stored argon2 hash: the held sign-in fails
            # as a wrong password would, which is all this test needs from it
            assert holding.result().status_code == 401
        passwords._hasher = real
        assert httpx.post(idp.token_url, data=form, timeout=30).status_code == 200
    finally:
        gated.gate.set()
        passwords._hasher = real


def test_the_login_page_gives_the_form_back_when_no_slot_is_free(identity_factory: ServerFactory) -> None:
    idp = identity_factory("hiwallet", argon2_max_concurrent_hashes=1, argon2_slot_wait_s=0.05)
    idp.create_user("browser-user")
    passwords = _passwords(idp)
    gated = GatedHasher()
    real = passwords._hasher
    passwords._hasher = gated  # type: ignore[assignment]
    _, challenge = pkce_pair()
    params = auth_params("personal-mobile-api", MOBILE_REDIRECT, challenge)
    grant = {
        "grant_type": "password",
        "client_id": "personal-mobile-api",
        "username": "browser-user",
        "password": PASSWORD,
    }
    try:
        with ThreadPoolExecutor(1) as pool, httpx.Client() as browser:
            page = browser.get(f"{idp.issuer}/protocol/openid-connect/auth", params=params)
            assert page.status_code == 200
            holding = pool.submit(httpx.post, idp.token_url, data=grant, timeout=30)
            for _ in range(int(WAIT_S / 0.01)):
                if passwords.running == 1:
                    break
                threading.Event().wait(0.01)
            assert passwords.running == 1
            busy = post_form(browser, idp.base_url, page, username="browser-user", password=PASSWORD)
            assert busy.status_code == 503
            assert "Too many sign-ins at once" in busy.text
            gated.gate.set()
            holding.result()
            passwords._hasher = real
            # the same flow goes on: the form given back signs the person in
            signed_in = post_form(browser, idp.base_url, busy, username="browser-user", password=PASSWORD)
            assert signed_in.status_code == 302
    finally:
        gated.gate.set()
        passwords._hasher = real


def test_a_sign_in_stores_an_outdated_hash_again_under_todays_parameters(
    identity_factory: ServerFactory,
) -> None:
    """A change of the argon2 settings (2026-12-05: 64 MiB to 19 MiB) reaches each user at their
    next sign-in: the old hash still verifies, and a proven password is stored again under
    today's parameters; a wrong password changes nothing."""
    idp = identity_factory("hiwallet")  # the tests' cheap hashing: t=1, 1 MiB, 1 lane
    idp.create_user("rehashed")
    (before,) = idp.sql("SELECT password_hash FROM users WHERE username = 'rehashed'")
    assert "$m=1024,t=1,p=1$" in before["password_hash"]
    passwords = _passwords(idp)
    passwords._hasher = PasswordHasher(time_cost=2, memory_cost=2048, parallelism=1)  # "today's"
    form = {"grant_type": "password", "client_id": "personal-mobile-api", "username": "rehashed"}

    wrong = httpx.post(idp.token_url, data={**form, "password": "not-the-password"}, timeout=30)
    assert wrong.status_code == 401
    (unchanged,) = idp.sql("SELECT password_hash FROM users WHERE username = 'rehashed'")
    assert unchanged["password_hash"] == before["password_hash"]

    assert httpx.post(idp.token_url, data={**form, "password": PASSWORD}, timeout=30).status_code == 200
    (after,) = idp.sql("SELECT password_hash FROM users WHERE username = 'rehashed'")
    assert "$m=2048,t=2,p=1$" in after["password_hash"]
    assert not passwords.needs_rehash(after["password_hash"])
    # the new hash is the same password's
    assert httpx.post(idp.token_url, data={**form, "password": PASSWORD}, timeout=30).status_code == 200

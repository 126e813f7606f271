"""A stand-in for staff-admin's ``GET /v1/me`` (the contract's shape), in-process on a real
socket (tests/servers.py): employees by subject, read on every call, and an outage that is a
real refused connection. The real staff-admin process is used by tests/e2e/test_staff_endpoints.py;
this one lets a service's tests run without it."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.servers import serve, stop, wait_started

PROBLEM = "https://hiwallet.dev/problems/"


def claims_of(token: str) -> dict[str, Any]:
    """The token's claims, not verified: the service asking has verified it already."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


class StaffAdminStub:
    def __init__(self) -> None:
        self.employees: dict[str, set[str]] = {}
        self.calls = 0
        self.answer: tuple[int, Any] | None = None  # a forced answer, whoever asks
        self.delay_s = 0.0  # a slow staff-admin
        self.url = ""
        self._port: int | None = None
        self._server: tuple[uvicorn.Server, threading.Thread] | None = None
        app = FastAPI()

        @app.get("/v1/me")
        async def me(request: Request) -> JSONResponse:
            self.calls += 1
            if self.delay_s:
                await asyncio.sleep(self.delay_s)  # a slow staff-admin: the behaviour under test
            if self.answer is not None:
                return JSONResponse(self.answer[1], status_code=self.answer[0])
            sub = claims_of(request.headers.get("authorization", "").removeprefix("Bearer "))["sub"]
            if sub not in self.employees:
                problem = {"type": PROBLEM + "staff-not-allowed", "title": "no", "status": 403}
                return JSONResponse(problem, status_code=403, media_type="application/problem+json")
            body = {"subject": sub, "email": None, "name": sub, "active": True, "roles": []}
            return JSONResponse({**body, "permissions": sorted(self.employees[sub])})

        self.app = app

    def start(self) -> StaffAdminStub:
        """Started, on the port it had before a stop (an outage ends where it began)."""
        if self._port is None:
            url, server, thread = serve(self.app, "staff-admin-stub")
            self._port = int(url.rsplit(":", 1)[1])
        else:
            server = uvicorn.Server(
                uvicorn.Config(
                    self.app, host="127.0.0.1", port=self._port, log_level="warning", log_config=None
                )
            )
            thread = threading.Thread(target=server.run, name="staff-admin-stub", daemon=True)
            thread.start()
            wait_started(server, thread, "the staff-admin stand-in")
        self.url, self._server = f"http://127.0.0.1:{self._port}", (server, thread)
        return self

    def stop(self) -> None:
        if self._server is not None:
            stop(*self._server)
            self._server = None


def staff_login(idp: Any, username: str) -> tuple[str, str]:
    """A real employee login on the staff realm (password, TOTP enrolment on the identity
    pages, the code flow of backoffice-bff): the access token and its subject."""
    import httpx

    from tests.identity.test_staff_totp import finish, start_login
    from tests.identity.test_verifier import post_otp

    idp.create_user(username)
    with httpx.Client() as browser:
        setup, verifier = start_login(idp, browser, username)
        callback = post_otp(idp, browser, setup)
    token = finish(idp, callback, verifier)["access_token"]
    return token, str(claims_of(token)["sub"])

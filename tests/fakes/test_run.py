"""`hiwallet run stripe-fake|bank-fake|mail-catcher|sms-fake|nvi-fake`: each its own process,
configured by its own environment."""

from __future__ import annotations

import os
import signal
import smtplib
import subprocess
import sys
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest

from tests.servers import free_port
from tests.waiting import until_sync

HIWALLET = str(Path(sys.executable).parent / "hiwallet")


def _health(process: subprocess.Popen[bytes], port: int) -> httpx.Response | None:
    """Its /health's answer, None while it is not listening yet; raises if it exited."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
    except httpx.TransportError:
        if process.poll() is not None:
            raise
        return None


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("stripe-fake", "STRIPE_FAKE_"),
        ("bank-fake", "BANK_FAKE_"),
        ("mail-catcher", "MAIL_CATCHER_"),
        ("sms-fake", "SMS_FAKE_"),
        ("nvi-fake", "NVI_FAKE_"),
    ],
)
def test_runs_as_its_own_process_on_its_settings_port(name: str, prefix: str) -> None:
    port = free_port()
    # the mail catcher's SMTP port too (a free one), not 1025 that a running system may hold
    env = {**os.environ, f"{prefix}PORT": str(port), "MAIL_CATCHER_SMTP_PORT": str(free_port())}
    process = subprocess.Popen([HIWALLET, "run", name], env=env, stdout=subprocess.DEVNULL)
    try:
        response = until_sync(lambda: _health(process, port), 30, f"{name} serving", interval_s=0.1)
        assert response.json() == {"status": "ok"}
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0


def test_the_mail_catcher_process_catches_smtp_and_logs_no_address_or_text() -> None:
    http_port, smtp_port = free_port(), free_port()
    env = {**os.environ, "MAIL_CATCHER_PORT": str(http_port), "MAIL_CATCHER_SMTP_PORT": str(smtp_port)}
    process = subprocess.Popen(
        [HIWALLET, "run", "mail-catcher"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        until_sync(
            lambda: _health(process, http_port), 30, "the mail catcher serving", interval_s=0.1
        ).raise_for_status()
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = (
            "no-reply@hiwallet.example",
            "ayse@example.com",
            "code",
        )
        message.set_content("Your code is 735194")
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as smtp:
            smtp.send_message(message)
        caught = httpx.get(f"http://127.0.0.1:{http_port}/api/v1/message/latest", timeout=10).json()
        assert caught["To"] == [{"Name": "", "Address": "ayse@example.com"}]
        assert "735194" in caught["Text"]
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=15)
    assert process.returncode == 0
    assert b"mail caught" in output  # it logs, but
    assert b"ayse@example.com" not in output and b"735194" not in output

"""mail catcher: mail sent with the standard library's smtplib over a real socket, read back over
HTTP in mailpit's shape."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import httpx
import pytest

from hiwallet.fakes.mail import MailCatcherSettings, create_mail_catcher_app
from tests.servers import serve, stop


@dataclass
class Catcher:
    base_url: str
    smtp_port: int

    def send(self, message: EmailMessage, **kwargs: Any) -> None:
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=10) as smtp:
            smtp.send_message(message, **kwargs)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.base_url}{path}", params=params, timeout=10)


def catcher_for(settings: MailCatcherSettings) -> Iterator[Catcher]:
    app = create_mail_catcher_app(settings)
    base, server, thread = serve(app, "mail-catcher")
    try:
        yield Catcher(base, app.state.catcher.smtp_port)
    finally:
        stop(server, thread)


@pytest.fixture
def catcher() -> Iterator[Catcher]:
    # smtp_port 0: a free port, read back from the running server
    yield from catcher_for(MailCatcherSettings(smtp_port=0))


def code_mail(to: str = "ayse@example.com", code: str = "482913") -> EmailMessage:
    message = EmailMessage()
    message["From"] = "HiWallet <no-reply@hiwallet.example>"
    message["To"] = to
    message["Subject"] = "Your HiWallet code"
    message["Message-ID"] = "<code-1@hiwallet.example>"
    message.set_content(f"Your code is {code}.\nIt expires in 10 minutes.")
    message.add_alternative(f"<p>Your code is <b>{code}</b>.</p>", subtype="html")
    return message


def test_a_sent_message_is_listed_and_read_back_in_mailpits_shape(catcher: Catcher) -> None:
    catcher.send(code_mail())

    listing = catcher.get("/api/v1/messages").json()
    assert (listing["total"], listing["count"], listing["messages_count"], listing["unread"]) == (1, 1, 1, 1)
    summary = listing["messages"][0]
    assert summary["From"] == {"Name": "HiWallet", "Address": "no-reply@hiwallet.example"}
    assert summary["To"] == [{"Name": "", "Address": "ayse@example.com"}]
    assert summary["Subject"] == "Your HiWallet code"
    assert summary["MessageID"] == "code-1@hiwallet.example"
    assert summary["Snippet"] == "Your code is 482913. It expires in 10 minutes."
    assert summary["Created"].endswith("Z")
    assert summary["Read"] is False
    assert "Text" not in summary

    message = catcher.get(f"/api/v1/message/{summary['ID']}").json()
    assert message["ID"] == summary["ID"]
    # mailpit's Message: the summary's people and subject, and these (no Read, Created, Snippet)
    assert set(message) == {
        "ID",
        "MessageID",
        "From",
        "To",
        "Cc",
        "Bcc",
        "ReplyTo",
        "ReturnPath",
        "Subject",
        "ListUnsubscribe",
        "Date",
        "Tags",
        "Username",
        "Text",
        "HTML",
        "Size",
        "Inline",
        "Attachments",
    }
    assert message["ReturnPath"] == "no-reply@hiwallet.example"
    assert message["Text"] == "Your code is 482913.\nIt expires in 10 minutes.\n"
    assert message["HTML"] == "<p>Your code is <b>482913</b>.</p>\n"
    assert catcher.get("/api/v1/messages").json()["unread"] == 0  # reading marks it read


def test_newest_first_paged_latest_and_search_by_recipient(catcher: Catcher) -> None:
    for n in range(3):
        catcher.send(code_mail(to=f"user{n}@example.com", code=f"00000{n}"))

    listing = catcher.get("/api/v1/messages").json()
    assert [m["To"][0]["Address"] for m in listing["messages"]] == [
        "user2@example.com",
        "user1@example.com",
        "user0@example.com",
    ]
    page = catcher.get("/api/v1/messages", start=1, limit=1).json()
    assert (page["total"], page["count"], page["start"]) == (3, 1, 1)
    assert page["messages"][0]["To"][0]["Address"] == "user1@example.com"

    assert "000002" in catcher.get("/api/v1/message/latest").json()["Text"]
    found = catcher.get("/api/v1/search", query="to:USER1@example.com").json()
    assert [m["To"][0]["Address"] for m in found["messages"]] == ["user1@example.com"]
    assert found["messages_count"] == 1 and found["total"] == 3
    assert catcher.get("/api/v1/search", query="to:nobody@example.com").json()["messages"] == []


def test_envelope_recipients_not_in_the_headers_are_bcc(catcher: Catcher) -> None:
    catcher.send(code_mail(), to_addrs=["ayse@example.com", "audit@hiwallet.example"])
    summary = catcher.get("/api/v1/messages").json()["messages"][0]
    assert summary["Bcc"] == [{"Name": "", "Address": "audit@hiwallet.example"}]


def test_delete_some_then_all(catcher: Catcher) -> None:
    for n in range(3):
        catcher.send(code_mail(to=f"user{n}@example.com"))
    ids = [m["ID"] for m in catcher.get("/api/v1/messages").json()["messages"]]

    response = httpx.request(
        "DELETE", f"{catcher.base_url}/api/v1/messages", json={"IDs": ids[:1]}, timeout=10
    )
    assert (response.status_code, response.text) == (200, "ok")
    assert [m["ID"] for m in catcher.get("/api/v1/messages").json()["messages"]] == ids[1:]
    assert catcher.get(f"/api/v1/message/{ids[0]}").status_code == 404

    assert httpx.delete(f"{catcher.base_url}/api/v1/messages", timeout=10).text == "ok"
    assert catcher.get("/api/v1/messages").json()["total"] == 0
    assert catcher.get("/api/v1/message/latest").status_code == 404


def test_memory_is_bounded_the_oldest_go_first() -> None:
    for catcher in catcher_for(MailCatcherSettings(smtp_port=0, max_messages=2)):
        for n in range(3):
            catcher.send(code_mail(to=f"user{n}@example.com"))
        listing = catcher.get("/api/v1/messages").json()
        assert listing["total"] == 2
        assert [m["To"][0]["Address"] for m in listing["messages"]] == [
            "user2@example.com",
            "user1@example.com",
        ]


def test_a_message_over_the_size_limit_is_refused_by_smtp() -> None:
    for catcher in catcher_for(MailCatcherSettings(smtp_port=0, max_message_bytes=2048)):
        big = EmailMessage()
        big["From"], big["To"], big["Subject"] = "a@example.com", "b@example.com", "big"
        big.set_content("x" * 10_000)
        with pytest.raises(smtplib.SMTPResponseException) as refused:
            catcher.send(big)
        assert refused.value.smtp_code == 552
        assert catcher.get("/api/v1/messages").json()["total"] == 0


def test_health(catcher: Catcher) -> None:
    assert catcher.get("/health").json() == {"status": "ok"}


def test_concurrent_senders_are_all_caught(catcher: Catcher) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: catcher.send(code_mail(to=f"user{n}@example.com")), range(24)))
    listing = catcher.get("/api/v1/messages", limit=100).json()
    assert listing["total"] == 24
    assert {m["To"][0]["Address"] for m in listing["messages"]} == {f"user{n}@example.com" for n in range(24)}
    assert len({m["ID"] for m in listing["messages"]}) == 24


def test_turkish_headers_and_text_are_decoded(catcher: Catcher) -> None:
    message = EmailMessage()
    message["From"] = "HiWallet Güvenlik <no-reply@hiwallet.example>"
    message["To"] = "Ayşe Yılmaz <ayse@example.com>"
    message["Subject"] = "Doğrulama kodunuz: 482913"
    message.set_content("Kodunuz 482913. Şifrenizi kimseyle paylaşmayın.")
    catcher.send(message)
    summary = catcher.get("/api/v1/messages").json()["messages"][0]
    assert summary["Subject"] == "Doğrulama kodunuz: 482913"
    assert summary["From"]["Name"] == "HiWallet Güvenlik"
    assert summary["To"] == [{"Name": "Ayşe Yılmaz", "Address": "ayse@example.com"}]
    assert (
        catcher.get("/api/v1/message/latest").json()["Text"]
        == "Kodunuz 482913. Şifrenizi kimseyle paylaşmayın.\n"
    )
    assert catcher.get("/api/v1/search", query="subject:doğrulama").json()["messages_count"] == 1


def test_memory_is_bounded_in_bytes_too() -> None:
    for catcher in catcher_for(MailCatcherSettings(smtp_port=0, max_total_bytes=1500)):
        sizes = []
        for n in range(4):
            catcher.send(code_mail(to=f"user{n}@example.com"))
            sizes.append(catcher.get("/api/v1/message/latest").json()["Size"])
        assert 2 * max(sizes) < 1500 < 3 * min(sizes)  # so two fit, three do not
        listing = catcher.get("/api/v1/messages").json()
        assert [m["To"][0]["Address"] for m in listing["messages"]] == [
            "user3@example.com",
            "user2@example.com",
        ]
        httpx.delete(f"{catcher.base_url}/api/v1/messages", timeout=10).raise_for_status()
        for n in range(2):
            catcher.send(code_mail(to=f"again{n}@example.com"))
        assert catcher.get("/api/v1/messages").json()["total"] == 2  # the count of bytes starts again

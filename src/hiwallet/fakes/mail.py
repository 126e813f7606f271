"""mail catcher: receives e-mail over SMTP (port 1025, aiosmtpd) and shows it over HTTP (port
8025) in mailpit's API shape, so that development and tests read the mail that services send.

Only the part of mailpit's ``/api/v1`` that reading mail needs, with mailpit's field names:

- ``GET /api/v1/messages?start=&limit=``: the newest first, ``{total, unread, count,
  messages_count, messages_unread, start, tags, messages: [{ID, MessageID, Read, From, To, Cc,
  Bcc, ReplyTo, Subject, Created, Username, Tags, Size, Attachments, Snippet}]}``;
- ``GET /api/v1/search?query=``: the same, filtered (``to:``, ``from:``, ``subject:`` terms and
  bare words, every one must match; case-insensitive);
- ``GET /api/v1/message/{ID}`` (``latest`` for the newest): the message with ``Text`` and
  ``HTML``, marked read;
- ``DELETE /api/v1/messages`` (``{"IDs": [...]}``, or no body: all of them) and
  ``DELETE /api/v1/search?query=``: answer ``ok`` as text.

The SMTP server runs on the HTTP server's event loop (one process, no thread): accepting a
message and listing it never race. Messages are kept in memory, at most ``max_messages`` and
``max_total_bytes`` in all (the oldest go first), each at most ``max_message_bytes`` (larger
ones are refused by SMTP, 552).
There is no authentication and no TLS, as in mailpit's default: a catcher for development.
"""

from __future__ import annotations

import asyncio
import email.policy
import json
import logging
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesParser
from functools import lru_cache, partial
from typing import Any

import structlog
from aiosmtpd.smtp import SMTP, Envelope, Session
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from hiwallet.fakes.serving import serve

__all__ = [
    "MailCatcher",
    "MailCatcherSettings",
    "create_mail_catcher_app",
    "get_mail_catcher_settings",
    "run_mail_catcher",
]

log = structlog.get_logger("hiwallet.fakes.mail")
# aiosmtpd logs every command at INFO, the addresses with them (and the data at DEBUG): personal
# data, kept out of the logs; its warnings and errors still show.
logging.getLogger("mail.log").setLevel(logging.WARNING)

# mailpit's snippet: the text's first characters, whitespace collapsed.
SNIPPET_CHARS = 250
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_SPACES = re.compile(r"\s+")
_TAGS = re.compile(r"<[^>]*>")


class MailCatcherSettings(BaseSettings):
    """``MAIL_CATCHER_*``."""

    model_config = SettingsConfigDict(env_prefix="MAIL_CATCHER_", extra="ignore")

    # The HTTP API's port (mailpit's 8025) and the SMTP server's (mailpit's 1025).
    port: int = 8025
    smtp_port: int = 1025
    # The SMTP server listens on the HTTP server's address unless told.
    smtp_host: str | None = None
    max_messages: int = Field(default=1000, ge=1, le=100_000)
    max_message_bytes: int = Field(default=1_048_576, ge=1024, le=50 * 1_048_576)
    # All kept messages' raw sizes together (the oldest go first beyond it): with the count, what
    # bounds the memory (1000 messages of 1 MiB would be a gigabyte).
    max_total_bytes: int = Field(default=64 * 1_048_576, ge=1024, le=4096 * 1_048_576)
    # An idle SMTP connection is closed after this long.
    smtp_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    hostname: str = "mail-catcher.localhost"


def _new_id() -> str:
    # mailpit's ids are 22 alphanumerics.
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(22))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _addresses(message: EmailMessage, header: str) -> list[dict[str, str]]:
    value = message.get(header)
    if value is None:
        return []
    found: Iterable[Address] = getattr(value, "addresses", ())
    return [{"Name": a.display_name, "Address": a.addr_spec} for a in found]


def _body(message: EmailMessage, subtype: str) -> str:
    part = message.get_body(preferencelist=(subtype,))
    if part is None or part.get_content_type() != f"text/{subtype}":
        return ""
    try:
        content = str(part.get_content())
    except (LookupError, ValueError):  # an unknown charset or a broken encoding: shown as is
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    # SMTP's line ends are the wire's; the text has the usual ones.
    return content.replace("\r\n", "\n")


def _date(message: EmailMessage) -> str | None:
    """The Date header's time (a missing or unreadable one: None; the arrival time is shown)."""
    moment = getattr(message.get("Date"), "datetime", None)
    return _iso(moment) if isinstance(moment, datetime) else None


def _attachments(message: EmailMessage) -> int:
    return sum(1 for _ in message.iter_attachments()) if message.is_multipart() else 0


class MailCatcher:
    """The messages, in arrival order (the oldest first), at most ``max_messages`` and
    ``max_total_bytes``."""

    def __init__(self, settings: MailCatcherSettings) -> None:
        self.settings = settings
        self.messages: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.total_bytes = 0
        self.smtp_port: int | None = None
        self._server: asyncio.Server | None = None

    # -- SMTP (aiosmtpd's handler hook) -----------------------------------------------------

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content or b""
        try:
            self.add(
                raw if isinstance(raw, bytes) else raw.encode(), envelope.mail_from or "", envelope.rcpt_tos
            )
        except Exception as exc:  # a message the parser cannot take: refused, the catcher carries on
            log.warning("mail unreadable", error=type(exc).__name__, size=len(raw))
            return "554 Transaction failed: unreadable message"
        return "250 Message accepted for delivery"

    def add(self, raw: bytes, mail_from: str, rcpt_tos: list[str]) -> dict[str, Any]:
        # policy.default parses into EmailMessage (get_body, iter_attachments, header objects)
        parsed = BytesParser(policy=email.policy.default).parsebytes(raw)
        text = _body(parsed, "plain")
        html = _body(parsed, "html")
        to = _addresses(parsed, "To") or [{"Name": "", "Address": rcpt} for rcpt in rcpt_tos]
        sender = _addresses(parsed, "From")
        message_id = str(parsed.get("Message-ID", "")).strip().strip("<>")
        summary_text = text or _TAGS.sub(" ", html)
        record: dict[str, Any] = {
            "ID": _new_id(),
            "MessageID": message_id,
            "Read": False,
            "From": sender[0] if sender else {"Name": "", "Address": mail_from},
            "To": to,
            "Cc": _addresses(parsed, "Cc"),
            # Envelope recipients not in To or Cc are the Bcc, as mailpit shows them.
            "Bcc": [
                {"Name": "", "Address": rcpt}
                for rcpt in rcpt_tos
                if rcpt.lower() not in {a["Address"].lower() for a in to + _addresses(parsed, "Cc")}
            ],
            "ReplyTo": _addresses(parsed, "Reply-To"),
            "ReturnPath": mail_from,
            "Subject": str(parsed.get("Subject", "")),
            "Created": _iso(datetime.now(UTC)),
            "Username": "",
            "Tags": [],
            "Size": len(raw),
            "Attachments": _attachments(parsed),
            "Snippet": _SPACES.sub(" ", summary_text).strip()[:SNIPPET_CHARS],
            "Text": text,
            "HTML": html,
            "Date": _date(parsed),
        }
        self.messages[record["ID"]] = record
        self.total_bytes += record["Size"]
        while len(self.messages) > 1 and (
            len(self.messages) > self.settings.max_messages
            or self.total_bytes > self.settings.max_total_bytes
        ):
            self.forget(next(iter(self.messages)))
        # Who and what are personal data: the log says only that a message arrived.
        log.info("mail caught", id=record["ID"], size=record["Size"])
        return record

    def forget(self, message_id: str) -> None:
        message = self.messages.pop(message_id, None)
        if message is not None:
            self.total_bytes -= message["Size"]

    def forget_all(self) -> None:
        self.messages.clear()
        self.total_bytes = 0

    async def start_smtp(self, host: str) -> None:
        loop = asyncio.get_running_loop()
        factory = partial(
            SMTP,
            self,
            hostname=self.settings.hostname,
            data_size_limit=self.settings.max_message_bytes,
            enable_SMTPUTF8=True,
            timeout=self.settings.smtp_timeout_s,
        )
        self._server = await loop.create_server(factory, host=host, port=self.settings.smtp_port)
        self.smtp_port = int(self._server.sockets[0].getsockname()[1])

    async def stop_smtp(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # -- the HTTP API's views ----------------------------------------------------------------

    def page(self, matching: list[dict[str, Any]], start: int, limit: int) -> dict[str, Any]:
        newest_first = list(reversed(matching))
        chosen = newest_first[start : start + limit]
        return {
            "total": len(self.messages),
            "unread": sum(1 for m in self.messages.values() if not m["Read"]),
            "count": len(chosen),
            "messages_count": len(matching),
            "messages_unread": sum(1 for m in matching if not m["Read"]),
            "start": start,
            "tags": [],
            "messages": [_summary(m) for m in chosen],
        }

    def search(self, query: str) -> list[dict[str, Any]]:
        terms = [t for t in query.split() if t]
        return [m for m in self.messages.values() if all(_matches(m, t) for t in terms)]


_SUMMARY_FIELDS = (
    "ID",
    "MessageID",
    "Read",
    "From",
    "To",
    "Cc",
    "Bcc",
    "ReplyTo",
    "Subject",
    "Created",
    "Username",
    "Tags",
    "Size",
    "Attachments",
    "Snippet",
)


def _summary(message: dict[str, Any]) -> dict[str, Any]:
    return {name: message[name] for name in _SUMMARY_FIELDS}


def _detail(message: dict[str, Any]) -> dict[str, Any]:
    detail = {
        name: message[name]
        for name in _SUMMARY_FIELDS
        if name not in ("Snippet", "Attachments", "Read", "Created")
    }
    detail.update(
        ReturnPath=message["ReturnPath"],
        Date=message["Date"] or message["Created"],
        Text=message["Text"],
        HTML=message["HTML"],
        Inline=[],
        Attachments=[],
        ListUnsubscribe={"Header": "", "Links": [], "Errors": "", "HeaderPost": ""},
    )
    return detail


def _people(people: list[dict[str, str]]) -> str:
    return " ".join(f"{p['Name']} <{p['Address']}>" for p in people).lower()


def _matches(message: dict[str, Any], term: str) -> bool:
    key, sep, value = term.partition(":")
    key = key.lower()
    if sep and key in ("to", "from", "subject") and value:
        value = value.strip('"').lower()
        if key == "to":
            return value in _people(message["To"] + message["Cc"] + message["Bcc"])
        if key == "from":
            return value in _people([message["From"]])
        return value in message["Subject"].lower()
    needle = term.strip('"').lower()
    return any(
        needle in text
        for text in (message["Subject"].lower(), message["Text"].lower(), _people(message["To"]))
    )


def _paging(request: Request) -> tuple[int, int]:
    try:
        start = int(request.query_params.get("start", "0"))
        limit = int(request.query_params.get("limit", "50"))
    except ValueError as exc:
        raise _BadRequest("start and limit are integers") from exc
    if start < 0 or not 1 <= limit <= 1000:
        raise _BadRequest("start at least 0, limit 1 to 1000")
    return start, limit


class _BadRequest(Exception):
    pass


def create_mail_catcher_app(
    settings: MailCatcherSettings | None = None, *, host: str = "127.0.0.1"
) -> FastAPI:
    """The HTTP API, whose lifespan runs the SMTP server on ``settings.smtp_host or host``;
    ``app.state.catcher`` is its :class:`MailCatcher` (``smtp_port`` once started)."""
    settings = settings or get_mail_catcher_settings()
    catcher = MailCatcher(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await catcher.start_smtp(settings.smtp_host or host)
        log.info("mail catcher started", smtp_port=catcher.smtp_port)
        try:
            yield
        finally:
            await catcher.stop_smtp()

    app = FastAPI(title="mail-catcher", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.catcher = catcher

    # mailpit answers its errors as plain text with a 4xx status.
    @app.exception_handler(_BadRequest)
    async def bad_request(_: Request, exc: _BadRequest) -> PlainTextResponse:
        return PlainTextResponse(str(exc), status_code=400)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/messages")
    async def list_messages(request: Request) -> dict[str, Any]:
        start, limit = _paging(request)
        return catcher.page(list(catcher.messages.values()), start, limit)

    @app.get("/api/v1/search")
    async def search(request: Request) -> dict[str, Any]:
        query = request.query_params.get("query", "").strip()
        if not query:
            raise _BadRequest("no search query")
        start, limit = _paging(request)
        return catcher.page(catcher.search(query), start, limit)

    @app.get("/api/v1/message/{message_id}", response_model=None)
    async def get_message(message_id: str) -> dict[str, Any] | PlainTextResponse:
        if message_id == "latest":
            message = next(reversed(catcher.messages.values()), None)
        else:
            message = catcher.messages.get(message_id)
        if message is None:
            return PlainTextResponse("message not found", status_code=404)
        message["Read"] = True
        return _detail(message)

    @app.delete("/api/v1/messages")
    async def delete_messages(request: Request) -> PlainTextResponse:
        body = await request.body()
        ids: list[str] = []
        if body.strip():
            try:
                fields = json.loads(body)
            except ValueError as exc:
                raise _BadRequest("the body is not JSON") from exc
            found = fields.get("IDs") if isinstance(fields, dict) else None
            if found is not None and not (isinstance(found, list) and all(isinstance(i, str) for i in found)):
                raise _BadRequest("IDs: a list of message IDs")
            ids = found or []
        if ids:
            for message_id in ids:
                catcher.forget(message_id)
        else:
            catcher.forget_all()
        return PlainTextResponse("ok")

    @app.delete("/api/v1/search")
    async def delete_search(request: Request) -> PlainTextResponse:
        query = request.query_params.get("query", "").strip()
        if not query:
            raise _BadRequest("no search query")
        for message in catcher.search(query):
            catcher.forget(message["ID"])
        return PlainTextResponse("ok")

    return app


@lru_cache(maxsize=1)
def get_mail_catcher_settings() -> MailCatcherSettings:
    return MailCatcherSettings()


def run_mail_catcher(port: int | None, host: str) -> None:
    """Serve the mail catcher: HTTP on ``port`` (or the settings'), SMTP on ``smtp_port`` (the
    process entry point; the caller has set up logging)."""
    settings = get_mail_catcher_settings()
    serve(create_mail_catcher_app(settings, host=host), host, port or settings.port)

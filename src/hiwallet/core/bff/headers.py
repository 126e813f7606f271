"""The security headers of a BFF's pages (OWASP's secure headers; the browser-apps BCP):

- a strict Content-Security-Policy: only this origin's scripts, styles and images (no inline
  script, no ``eval``), forms posted only here and to the identity provider's login, no framing;
- no sniffing, no referrer beyond this origin, no opener across origins;
- ``Cache-Control: no-store`` on every answer that did not set its own (pages show money and
  names: a shared computer's back button or a proxy must not replay them);
- HSTS when served over https (production)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SecurityHeaders", "content_security_policy"]

HSTS_MAX_AGE_S = 63_072_000  # two years, as hstspreload.org asks


def content_security_policy(form_targets: Sequence[str] = ()) -> str:
    forms = " ".join(("'self'", *form_targets))
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"font-src 'self'; connect-src 'self'; form-action {forms}; frame-ancestors 'none'; "
        "base-uri 'none'"
    )


class SecurityHeaders:
    def __init__(self, app: ASGIApp, *, csp: str, hsts: bool) -> None:
        self.app = app
        fixed = [
            (b"content-security-policy", csp.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
            (b"x-frame-options", b"DENY"),
            (b"cross-origin-opener-policy", b"same-origin"),
            (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
        ]
        if hsts:
            fixed.append(
                (b"strict-transport-security", f"max-age={HSTS_MAX_AGE_S}; includeSubDomains".encode())
            )
        self._fixed = fixed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in self._fixed if k not in present]
                if b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)

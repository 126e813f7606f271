"""An unexpected error in the backoffice panel is its error page (HTML, the reader's language,
the security headers), never the services' JSON problem (core.bff.ErrorPage). Nothing behind
the panel is needed: the route that fails is the test's own."""

from __future__ import annotations

import httpx
from pydantic import SecretStr

from hiwallet.backoffice_bff.app import create_backoffice_bff_app
from hiwallet.backoffice_bff.settings import BackofficeBffSettings
from tests.backoffice_bff.conftest import CLIENT
from tests.servers import free_port, serve, stop


async def test_an_unexpected_error_is_the_panels_error_page() -> None:
    port = free_port()
    nowhere = f"http://127.0.0.1:{free_port()}"
    settings = BackofficeBffSettings(
        port=port,
        public_url=f"http://127.0.0.1:{port}",
        staff_issuer=f"{nowhere}/realms/hiwallet-staff",
        client_secret=SecretStr("dev-backoffice-bff-secret"),
        staff_admin_url=nowhere,
        wallet_api_url=nowhere,
        withdrawals_url=nowhere,
    )
    app = create_backoffice_bff_app(settings)

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    url, server, thread = serve(app, CLIENT, port=port)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            for language, title in (("tr", "Bir şeyler ters gitti"), ("en", "Something went wrong")):
                page = await http.get("/boom", headers={"Accept-Language": language})
                assert page.status_code == 500
                assert page.headers["content-type"].startswith("text/html"), page.text
                assert title in page.text and "a bug" not in page.text
                assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
                assert page.headers["x-request-id"]
    finally:
        stop(server, thread)

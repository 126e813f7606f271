"""An unexpected error in the personal web app is its error page, in the reader's language and
with the pages' security headers: never the services' JSON problem (core.bff.ErrorPage)."""

from __future__ import annotations

import httpx

from hiwallet.personal_web_bff.app import create_personal_web_bff_app
from tests.personal_web_bff.conftest import CLIENT, bff_settings
from tests.servers import serve, stop
from tests.wallet_api.conftest import WalletApi


async def test_an_unexpected_error_is_the_error_page_in_the_readers_language(
    api: WalletApi, bff_port: int
) -> None:
    settings = bff_settings(f"http://127.0.0.1:{bff_port}", api.idp, wallet_api_url=api.base_url)
    app = create_personal_web_bff_app(settings)

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    url, server, thread = serve(app, CLIENT, port=bff_port)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            for language, title in (("tr", "Bir şeyler ters gitti"), ("en", "Something went wrong")):
                page = await http.get("/boom", headers={"Accept-Language": language})
                assert page.status_code == 500
                assert page.headers["content-type"].startswith("text/html"), page.text
                assert title in page.text and "a bug" not in page.text
                assert "default-src 'none'" in page.headers["content-security-policy"]
                assert page.headers["cache-control"] == "no-store"
                assert page.headers["x-request-id"]
            # what the page shows is the 500 only: a route that works is untouched
            assert (await http.get("/health")).json() == {"status": "ok"}
    finally:
        stop(server, thread)

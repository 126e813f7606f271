"""How wallet-api's process serves: the HTTP protocol its setting names (the lean one by
default), and the transfer coalescer's linger (on by default, never negative)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from hiwallet.wallet_api import app as wallet_api_app
from hiwallet.wallet_api.settings import WalletApiSettings, get_wallet_api_settings

pytestmark = pytest.mark.in_process


@pytest.mark.parametrize(("env", "http"), [(None, "lean"), ("uvicorn", "uvicorn"), ("lean", "lean")])
def test_served_with_the_protocol_its_setting_names(
    monkeypatch: pytest.MonkeyPatch, env: str | None, http: str
) -> None:
    if env is not None:
        monkeypatch.setenv("HIWALLET_WALLET_API_HTTP_SERVER", env)
    served: dict[str, Any] = {}
    monkeypatch.setattr(wallet_api_app, "serve", lambda app, **options: served.update(options))
    monkeypatch.setattr(wallet_api_app, "configure_logging", lambda service: None)
    get_wallet_api_settings.cache_clear()
    try:
        wallet_api_app.run_wallet_api(None, "127.0.0.1", workers=1)
    finally:
        get_wallet_api_settings.cache_clear()
    assert served["http"] == http


def test_a_protocol_it_does_not_know_refuses_to_start() -> None:
    with pytest.raises(pydantic.ValidationError):
        WalletApiSettings(http_server="h2")  # type: ignore[arg-type]


def test_the_linger_is_on_by_default_and_never_negative() -> None:
    assert WalletApiSettings().transfer_linger_ms == 2.0
    assert WalletApiSettings(transfer_linger_ms=0).transfer_linger_ms == 0
    with pytest.raises(pydantic.ValidationError):
        WalletApiSettings(transfer_linger_ms=-1)

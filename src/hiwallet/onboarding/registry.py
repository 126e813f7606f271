"""The population registry's identity check: NVİ's KPS ``TCKimlikNoDogrula`` over SOAP 1.1
(nvi-fake locally, docs/fakes.md). It answers one boolean: the person exists with this number,
first name, surname and birth year, or not. It does not say why not (unknown, mismatch and
deceased are one ``False``), and onboarding does not guess.

The answer is read with a strict pattern over the response, not an XML parser: the one
element this needs is all that is trusted from it, and no entity or DTD in an answer is ever
expanded."""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

import httpx

from hiwallet.onboarding.clients import DependencyUnavailable, UnexpectedAnswer
from hiwallet.onboarding.settings import OnboardingSettings

WS_NS = "http://tckimlik.nvi.gov.tr/WS"
SOAP_ACTION = f'"{WS_NS}/TCKimlikNoDogrula"'
_RESULT = re.compile(
    rb"<(?:\w+:)?TCKimlikNoDogrulaResult>\s*(true|false)\s*</(?:\w+:)?TCKimlikNoDogrulaResult>"
)
_SPACES = re.compile(r"\s+")


def turkish_upper(name: str) -> str:
    """As the registry keeps names: upper case in Turkish (i → İ, ı → I), spaces collapsed."""
    return _SPACES.sub(" ", name.replace("i", "İ").replace("ı", "I").upper()).strip()


def envelope(tckn: str, given_name: str, family_name: str, birth_year: int) -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>'
        f'<TCKimlikNoDogrula xmlns="{WS_NS}">'
        f"<TCKimlikNo>{escape(tckn)}</TCKimlikNo><Ad>{escape(turkish_upper(given_name))}</Ad>"
        f"<Soyad>{escape(turkish_upper(family_name))}</Soyad><DogumYili>{birth_year}</DogumYili>"
        "</TCKimlikNoDogrula></soap:Body></soap:Envelope>"
    ).encode()


class Registry:
    def __init__(self, client: httpx.AsyncClient, settings: OnboardingSettings) -> None:
        self._client = client
        self._settings = settings

    async def confirms(self, tckn: str, given_name: str, family_name: str, birth_year: int) -> bool:
        """Whether the registry confirms the person; :class:`DependencyUnavailable` when it
        cannot be asked (a fault, 5xx, a timeout): retryable, nothing was decided."""
        try:
            response = await self._client.post(
                self._settings.nvi_url,
                content=envelope(tckn, given_name, family_name, birth_year),
                headers={"Content-Type": "text/xml; charset=utf-8", "SOAPAction": SOAP_ACTION},
                timeout=self._settings.nvi_timeout_s,
            )
        except httpx.HTTPError as exc:
            raise DependencyUnavailable("registry", type(exc).__name__) from exc
        if response.status_code == 503 or response.status_code == 502 or response.status_code == 504:
            raise DependencyUnavailable("registry", f"answered {response.status_code}")
        found = _RESULT.search(response.content) if response.status_code == 200 else None
        if found is None:
            # A 500 fault is ASMX's answer to a request it cannot read: our defect, not theirs.
            raise UnexpectedAnswer(f"the registry answered {response.status_code} without a result")
        return found.group(1) == b"true"

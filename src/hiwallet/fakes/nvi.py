"""nvi-fake: the population registry's identity check (port 8097), in the shape of the real one,
NVİ's public KPS web service ``TCKimlikNoDogrula`` (``tckimlik.nvi.gov.tr/Service/KPSPublic.asmx``):
a SOAP service (ASP.NET ASMX) that takes an identity number, first name, surname and birth year
and answers one boolean — the person exists with those details, or not.

``POST /Service/KPSPublic.asmx``, SOAP 1.1 (``Content-Type: text/xml``, ``SOAPAction:
"http://tckimlik.nvi.gov.tr/WS/TCKimlikNoDogrula"``) or SOAP 1.2 (``application/soap+xml``)::

    <TCKimlikNoDogrula xmlns="http://tckimlik.nvi.gov.tr/WS">
      <TCKimlikNo>long</TCKimlikNo><Ad>string</Ad><Soyad>string</Soyad><DogumYili>int</DogumYili>
    </TCKimlikNoDogrula>

→ ``<TCKimlikNoDogrulaResponse><TCKimlikNoDogrulaResult>true|false</…></…>`` in the same SOAP
version. Names are compared as the registry keeps them: upper case in Turkish (``i`` → ``İ``,
``ı`` → ``I``), spaces collapsed.

The answers (docs/fakes.md):

- a citizen with matching details → ``true``;
- an unknown number, or one whose details do not match → ``false`` (the real service does not
  say which);
- a deceased citizen → ``false`` as well: the real service answers only true or false, so the
  fake cannot say "deceased" in its answer without departing from that shape. So that tests can
  tell which refusal they met, every answer carries the fake's own ``X-Nvi-Fake-Reason`` header
  (``match``, ``not_found``, ``mismatch``, ``deceased``, ``unavailable``); a client must never
  depend on it (the real service sends no such header);
- unavailable → HTTP 503 with a SOAP ``Server``/``Receiver`` fault and ``Retry-After``, for the
  magic number ``unavailable_tckn`` (always; concurrent tests do not bend each other) or for
  every request while ``PUT /_control/unavailable`` is in force (``DELETE`` ends it);
- a request it cannot read (not XML, no such operation, a number that is not a number) → HTTP
  500 with a SOAP ``Client``/``Sender`` fault, as ASMX answers.

``GET /Service/KPSPublic.asmx?WSDL`` describes the operation (SOAP 1.1 and 1.2 bindings), as ASMX
does, for clients generated from it.

The fixed citizens are :data:`CITIZENS`; tests and benchmarks add their own with
``POST /_control/citizens`` (at most ``max_citizens``). State is in memory. No personal data
reaches the log.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from stdnum.tr import tckimlik

from hiwallet.fakes.serving import serve

__all__ = [
    "CITIZENS",
    "Citizen",
    "NviFake",
    "NviFakeSettings",
    "create_nvi_fake_app",
    "get_nvi_fake_settings",
    "run_nvi_fake",
    "turkish_upper",
]

log = structlog.get_logger("hiwallet.fakes.nvi")

SERVICE_PATH = "/Service/KPSPublic.asmx"
WS_NS = "http://tckimlik.nvi.gov.tr/WS"
OPERATION = "TCKimlikNoDogrula"
SOAP_ACTION = f"{WS_NS}/{OPERATION}"
SOAP11_NS = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12_NS = "http://www.w3.org/2003/05/soap-envelope"
_SPACES = re.compile(r"\s+")

Reason = Literal["match", "not_found", "mismatch", "deceased", "unavailable"]


def turkish_upper(name: str) -> str:
    """``name`` in upper case as Turkish writes it (``i`` → ``İ``, ``ı`` → ``I``), spaces collapsed."""
    return _SPACES.sub(" ", name.replace("i", "İ").replace("ı", "I").upper()).strip()


class Citizen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tckn: str
    first_name: str = Field(min_length=1, max_length=100)
    last_name: str = Field(min_length=1, max_length=100)
    birth_year: int = Field(ge=1850, le=2100)
    deceased: bool = False

    @field_validator("tckn")
    @classmethod
    def _valid_tckn(cls, value: str) -> str:
        return str(tckimlik.validate(value))  # stdnum's checksum; raises ValueError subclasses


# The fixed population (valid check digits, python-stdnum). 56789012390 is the settings' default
# unavailable_tckn; 98765432150 (valid) is nobody: "not found".
CITIZENS: tuple[Citizen, ...] = (
    Citizen(tckn="10000000146", first_name="AYŞE", last_name="YILMAZ", birth_year=1990),
    Citizen(tckn="12345678950", first_name="MEHMET", last_name="ÖZTÜRK", birth_year=1985),
    Citizen(tckn="23456789060", first_name="İSMAİL", last_name="ÇELİK", birth_year=1978),
    Citizen(tckn="34567890170", first_name="ZEYNEP NUR", last_name="KAYA", birth_year=2001),
    Citizen(tckn="45678901280", first_name="HASAN", last_name="DEMİR", birth_year=1940, deceased=True),
)


class NviFakeSettings(BaseSettings):
    """``NVI_FAKE_*``."""

    model_config = SettingsConfigDict(env_prefix="NVI_FAKE_", extra="ignore")

    port: int = 8097
    # Every check of this number answers "unavailable" (503).
    unavailable_tckn: str = "56789012390"
    retry_after_s: int = Field(default=1, ge=0, le=3600)
    max_request_bytes: int = Field(default=16_384, ge=512, le=1_048_576)
    # Citizens added at run time (POST /_control/citizens), at most this many.
    max_citizens: int = Field(default=100_000, ge=1, le=10_000_000)


class _Unreadable(Exception):
    """A request ASMX could not read: a SOAP Client (1.1) / Sender (1.2) fault, HTTP 500."""


@dataclass(frozen=True)
class _Check:
    tckn: str
    first_name: str
    last_name: str
    birth_year: int


class NviFake:
    """The population (the fixed citizens and those added) and whether the service is up."""

    def __init__(self, settings: NviFakeSettings) -> None:
        self.settings = settings
        self.citizens: dict[str, Citizen] = {c.tckn: c for c in CITIZENS}
        self.unavailable = False

    def add(self, citizen: Citizen) -> None:
        if (
            citizen.tckn not in self.citizens
            and len(self.citizens) >= len(CITIZENS) + self.settings.max_citizens
        ):
            raise OverflowError("too many citizens")
        self.citizens[citizen.tckn] = citizen

    def check(self, asked: _Check) -> Reason:
        if self.unavailable or asked.tckn == self.settings.unavailable_tckn:
            return "unavailable"
        citizen = self.citizens.get(asked.tckn)
        if citizen is None:
            return "not_found"
        if (
            turkish_upper(asked.first_name) != turkish_upper(citizen.first_name)
            or turkish_upper(asked.last_name) != turkish_upper(citizen.last_name)
            or asked.birth_year != citizen.birth_year
        ):
            return "mismatch"
        return "deceased" if citizen.deceased else "match"


def _soap_version(content_type: str) -> Literal["1.1", "1.2"]:
    return "1.2" if content_type.split(";")[0].strip().lower() == "application/soap+xml" else "1.1"


def _parse(body: bytes, version: str, soap_action: str | None) -> _Check:
    # No document type: entity definitions are how XML bombs and external entities come in.
    if b"<!DOCTYPE" in body.upper():
        raise _Unreadable("DTD is prohibited")
    if version == "1.1" and soap_action is not None and soap_action.strip('"') != SOAP_ACTION:
        raise _Unreadable(f"Server did not recognize the value of HTTP Header SOAPAction: {soap_action}.")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise _Unreadable("Server was unable to read request.") from exc
    envelope_ns = SOAP12_NS if version == "1.2" else SOAP11_NS
    if root.tag != f"{{{envelope_ns}}}Envelope":
        raise _Unreadable("Possible SOAP version mismatch: Envelope Namespace was unexpected.")
    operation = root.find(f"{{{envelope_ns}}}Body/{{{WS_NS}}}{OPERATION}")
    if operation is None:
        raise _Unreadable("Server did not recognize the request element.")

    def text(name: str) -> str:
        return (operation.findtext(f"{{{WS_NS}}}{name}") or "").strip()

    try:
        # TCKimlikNo is an xsd:long, DogumYili an xsd:int: a non-number is unreadable.
        number = int(text("TCKimlikNo"))
        birth_year = int(text("DogumYili"))
    except ValueError as exc:
        raise _Unreadable(
            "Server was unable to read request. ---> Input string was not in a correct format."
        ) from exc
    return _Check(str(number), text("Ad"), text("Soyad"), birth_year)


def _envelope(version: str, body: str) -> str:
    if version == "1.2":
        return (
            '<?xml version="1.0" encoding="utf-8"?>'
            f'<soap12:Envelope xmlns:soap12="{SOAP12_NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
            ' xmlns:xsd="http://www.w3.org/2001/XMLSchema">'
            f"<soap12:Body>{body}</soap12:Body></soap12:Envelope>"
        )
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<soap:Envelope xmlns:soap="{SOAP11_NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
        ' xmlns:xsd="http://www.w3.org/2001/XMLSchema">'
        f"<soap:Body>{body}</soap:Body></soap:Envelope>"
    )


def _fault(version: str, client: bool, message: str) -> str:
    reason = _escape(message)
    if version == "1.2":
        code = "soap12:Sender" if client else "soap12:Receiver"
        return _envelope(
            version,
            f"<soap12:Fault><soap12:Code><soap12:Value>{code}</soap12:Value></soap12:Code>"
            f'<soap12:Reason><soap12:Text xml:lang="en">{reason}</soap12:Text></soap12:Reason>'
            "<soap12:Detail /></soap12:Fault>",
        )
    code = "soap:Client" if client else "soap:Server"
    return _envelope(
        version,
        f"<soap:Fault><faultcode>{code}</faultcode><faultstring>{reason}</faultstring>"
        "<detail /></soap:Fault>",
    )


def _wsdl(address: str) -> str:
    """The service description (``?WSDL``), as ASMX publishes it: the one operation, bound to
    SOAP 1.1 and 1.2, at ``address``."""
    op = OPERATION
    bindings = "".join(
        f'<wsdl:binding name="KPSPublicSoap{suffix}" type="tns:KPSPublicSoap">'
        f'<{p}:binding transport="http://schemas.xmlsoap.org/soap/http" />'
        f'<wsdl:operation name="{op}"><{p}:operation soapAction="{SOAP_ACTION}" style="document" />'
        f'<wsdl:input><{p}:body use="literal" /></wsdl:input>'
        f'<wsdl:output><{p}:body use="literal" /></wsdl:output></wsdl:operation></wsdl:binding>'
        for suffix, p in (("", "soap"), ("12", "soap12"))
    )
    ports = "".join(
        f'<wsdl:port name="KPSPublicSoap{suffix}" binding="tns:KPSPublicSoap{suffix}">'
        f'<{p}:address location="{_escape(address)}" /></wsdl:port>'
        for suffix, p in (("", "soap"), ("12", "soap12"))
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"'
        ' xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"'
        ' xmlns:soap12="http://schemas.xmlsoap.org/wsdl/soap12/"'
        f' xmlns:s="http://www.w3.org/2001/XMLSchema" xmlns:tns="{WS_NS}" targetNamespace="{WS_NS}">'
        f'<wsdl:types><s:schema elementFormDefault="qualified" targetNamespace="{WS_NS}">'
        f'<s:element name="{op}"><s:complexType><s:sequence>'
        '<s:element minOccurs="1" maxOccurs="1" name="TCKimlikNo" type="s:long" />'
        '<s:element minOccurs="0" maxOccurs="1" name="Ad" type="s:string" />'
        '<s:element minOccurs="0" maxOccurs="1" name="Soyad" type="s:string" />'
        '<s:element minOccurs="1" maxOccurs="1" name="DogumYili" type="s:int" />'
        "</s:sequence></s:complexType></s:element>"
        f'<s:element name="{op}Response"><s:complexType><s:sequence>'
        f'<s:element minOccurs="1" maxOccurs="1" name="{op}Result" type="s:boolean" />'
        "</s:sequence></s:complexType></s:element></s:schema></wsdl:types>"
        f'<wsdl:message name="{op}SoapIn"><wsdl:part name="parameters" element="tns:{op}" /></wsdl:message>'
        f'<wsdl:message name="{op}SoapOut"><wsdl:part name="parameters" element="tns:{op}Response" />'
        "</wsdl:message>"
        f'<wsdl:portType name="KPSPublicSoap"><wsdl:operation name="{op}">'
        f'<wsdl:input message="tns:{op}SoapIn" /><wsdl:output message="tns:{op}SoapOut" />'
        "</wsdl:operation></wsdl:portType>"
        f'{bindings}<wsdl:service name="KPSPublic">{ports}</wsdl:service></wsdl:definitions>'
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _media_type(version: str) -> str:
    return "application/soap+xml; charset=utf-8" if version == "1.2" else "text/xml; charset=utf-8"


class _Unavailable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    unavailable: bool = True


def create_nvi_fake_app(settings: NviFakeSettings | None = None) -> FastAPI:
    """The app; ``app.state.fake`` is its :class:`NviFake`."""
    settings = settings or get_nvi_fake_settings()
    fake = NviFake(settings)
    app = FastAPI(title="nvi-fake", docs_url=None, redoc_url=None)
    app.state.fake = fake

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(SERVICE_PATH)
    async def describe(request: Request) -> Response:
        # ASMX answers ?WSDL (any case) with the description; a bare GET with its help page.
        if not any(key.lower() == "wsdl" for key in request.query_params):
            return Response("KPSPublic: POST a SOAP request; ?WSDL describes it.", media_type="text/plain")
        address = str(request.url.replace(query=""))
        return Response(_wsdl(address), media_type="text/xml; charset=utf-8")

    @app.post(SERVICE_PATH)
    async def verify(request: Request) -> Response:
        version = _soap_version(request.headers.get("content-type", ""))
        media_type = _media_type(version)
        body = await request.body()
        if len(body) > settings.max_request_bytes:
            return Response(
                _fault(version, True, "Maximum request length exceeded."),
                status_code=413,
                media_type=media_type,
            )
        try:
            asked = _parse(body, version, request.headers.get("soapaction"))
        except _Unreadable as exc:
            return Response(_fault(version, True, str(exc)), status_code=500, media_type=media_type)
        reason = fake.check(asked)
        # The outcome only: the number, names and year are personal data.
        log.info("identity checked", outcome=reason)
        headers: dict[str, str] = {"X-Nvi-Fake-Reason": reason}
        if reason == "unavailable":
            headers["Retry-After"] = str(settings.retry_after_s)
            return Response(
                _fault(version, False, "Service Unavailable"),
                status_code=503,
                media_type=media_type,
                headers=headers,
            )
        result = "true" if reason == "match" else "false"
        answer = (
            f'<{OPERATION}Response xmlns="{WS_NS}">'
            f"<{OPERATION}Result>{result}</{OPERATION}Result></{OPERATION}Response>"
        )
        return Response(_envelope(version, answer), media_type=media_type, headers=headers)

    # -- control (tests; not part of the real service) -------------------------------------

    @app.post("/_control/citizens", status_code=201, response_model=None)
    async def add_citizens(citizens: list[Citizen]) -> dict[str, Any] | JSONResponse:
        for citizen in citizens:
            try:
                fake.add(citizen)
            except OverflowError:
                return JSONResponse(
                    {"detail": f"at most {settings.max_citizens} added citizens"}, status_code=409
                )
        return {"added": len(citizens)}

    @app.put("/_control/unavailable")
    async def set_unavailable(state: _Unavailable) -> dict[str, bool]:
        fake.unavailable = state.unavailable
        log.info("nvi-fake availability set", unavailable=fake.unavailable)
        return {"unavailable": fake.unavailable}

    @app.delete("/_control/unavailable")
    async def end_unavailable() -> dict[str, bool]:
        fake.unavailable = False
        return {"unavailable": False}

    return app


@lru_cache(maxsize=1)
def get_nvi_fake_settings() -> NviFakeSettings:
    return NviFakeSettings()


def run_nvi_fake(port: int | None, host: str) -> None:
    """Serve nvi-fake (the process entry point; the caller has set up logging)."""
    settings = get_nvi_fake_settings()
    serve(create_nvi_fake_app(settings), host, port or settings.port)

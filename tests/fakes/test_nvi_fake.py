"""nvi-fake over real HTTP: KPSPublic's TCKimlikNoDogrula as a SOAP client sends it (1.1 and 1.2),
answers read with xml.etree as a client reads them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from xml.sax.saxutils import escape

import httpx
import pytest
from stdnum.tr import tckimlik

from hiwallet.fakes.nvi import CITIZENS, SOAP11_NS, SOAP12_NS, WS_NS, NviFakeSettings, create_nvi_fake_app
from tests.servers import serve, stop

PATH = "/Service/KPSPublic.asmx"
UNAVAILABLE = "56789012390"
NOBODY = "98765432150"


@pytest.fixture
def nvi() -> Iterator[httpx.Client]:
    base, server, thread = serve(create_nvi_fake_app(NviFakeSettings()), "nvi-fake")
    try:
        with httpx.Client(base_url=base, timeout=10) as client:
            yield client
    finally:
        stop(server, thread)


def request_body(tckn: str, first: str, last: str, year: str | int, version: str = "1.1") -> bytes:
    ns, prefix = (SOAP12_NS, "soap12") if version == "1.2" else (SOAP11_NS, "soap")
    return (
        f'<?xml version="1.0" encoding="utf-8"?><{prefix}:Envelope xmlns:{prefix}="{ns}"><{prefix}:Body>'
        f'<TCKimlikNoDogrula xmlns="{WS_NS}"><TCKimlikNo>{tckn}</TCKimlikNo><Ad>{escape(first)}</Ad>'
        f"<Soyad>{escape(last)}</Soyad><DogumYili>{year}</DogumYili></TCKimlikNoDogrula>"
        f"</{prefix}:Body></{prefix}:Envelope>"
    ).encode()


def check(
    nvi: httpx.Client, tckn: str, first: str, last: str, year: str | int, version: str = "1.1"
) -> httpx.Response:
    if version == "1.2":
        headers = {"Content-Type": "application/soap+xml; charset=utf-8"}
    else:
        headers = {"Content-Type": "text/xml; charset=utf-8", "SOAPAction": f'"{WS_NS}/TCKimlikNoDogrula"'}
    return nvi.post(PATH, content=request_body(tckn, first, last, year, version), headers=headers)


def result(response: httpx.Response, version: str = "1.1") -> bool:
    assert response.status_code == 200, response.text
    ns = SOAP12_NS if version == "1.2" else SOAP11_NS
    root = ET.fromstring(response.content)
    found = root.findtext(
        f"{{{ns}}}Body/{{{WS_NS}}}TCKimlikNoDogrulaResponse/{{{WS_NS}}}TCKimlikNoDogrulaResult"
    )
    assert found in ("true", "false"), response.text
    return found == "true"


def test_the_fixed_citizens_have_valid_numbers_and_the_magic_ones_too() -> None:
    assert all(tckimlik.is_valid(c.tckn) for c in CITIZENS)
    assert tckimlik.is_valid(UNAVAILABLE) and tckimlik.is_valid(NOBODY)
    assert {UNAVAILABLE, NOBODY}.isdisjoint(c.tckn for c in CITIZENS)


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_a_citizen_with_matching_details_is_confirmed(nvi: httpx.Client, version: str) -> None:
    response = check(nvi, "10000000146", "AYŞE", "YILMAZ", 1990, version)
    assert result(response, version) is True
    expected = "application/soap+xml" if version == "1.2" else "text/xml"
    assert response.headers["content-type"].startswith(expected)
    assert response.headers["X-Nvi-Fake-Reason"] == "match"


def test_names_are_compared_in_turkish_upper_case(nvi: httpx.Client) -> None:
    assert result(check(nvi, "23456789060", "ismail", "çelik", 1978)) is True
    assert result(check(nvi, "34567890170", " Zeynep   nur ", "Kaya", 2001)) is True
    # a dotless ı is I, not İ: ISMAIL is not İSMAİL
    assert result(check(nvi, "23456789060", "ısmaıl", "çelik", 1978)) is False


@pytest.mark.parametrize(
    ("tckn", "first", "last", "year", "reason"),
    [
        (NOBODY, "AYŞE", "YILMAZ", 1990, "not_found"),
        ("10000000147", "AYŞE", "YILMAZ", 1990, "not_found"),  # a bad check digit: nobody has it
        ("10000000146", "FATMA", "YILMAZ", 1990, "mismatch"),
        ("10000000146", "AYŞE", "KAYA", 1990, "mismatch"),
        ("10000000146", "AYŞE", "YILMAZ", 1991, "mismatch"),
        ("45678901280", "HASAN", "DEMİR", 1940, "deceased"),
    ],
)
def test_refusals_answer_false_and_say_why_only_in_the_fakes_header(
    nvi: httpx.Client, tckn: str, first: str, last: str, year: int, reason: str
) -> None:
    response = check(nvi, tckn, first, last, year)
    assert result(response) is False
    assert response.headers["X-Nvi-Fake-Reason"] == reason


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_the_magic_number_is_unavailable_503_with_a_server_fault(nvi: httpx.Client, version: str) -> None:
    response = check(nvi, UNAVAILABLE, "AYŞE", "YILMAZ", 1990, version)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    if version == "1.2":
        assert "<soap12:Value>soap12:Receiver</soap12:Value>" in response.text
    else:
        assert "<faultcode>soap:Server</faultcode>" in response.text
    # the others are still answered
    assert result(check(nvi, "10000000146", "AYŞE", "YILMAZ", 1990)) is True


def test_the_control_makes_every_check_unavailable_until_ended(nvi: httpx.Client) -> None:
    assert nvi.put("/_control/unavailable", json={"unavailable": True}).status_code == 200
    assert check(nvi, "10000000146", "AYŞE", "YILMAZ", 1990).status_code == 503
    assert nvi.delete("/_control/unavailable").status_code == 200
    assert result(check(nvi, "10000000146", "AYŞE", "YILMAZ", 1990)) is True


def test_citizens_added_by_tests_are_checked(nvi: httpx.Client) -> None:
    tckn = "11111111110"
    assert tckimlik.is_valid(tckn)
    assert result(check(nvi, tckn, "ALİ", "VELİ", 2000)) is False
    added = nvi.post(
        "/_control/citizens",
        json=[{"tckn": tckn, "first_name": "ALİ", "last_name": "VELİ", "birth_year": 2000}],
    )
    assert added.status_code == 201
    assert result(check(nvi, tckn, "Ali", "Veli", 2000)) is True
    bad = nvi.post(
        "/_control/citizens",
        json=[{"tckn": "11111111111", "first_name": "A", "last_name": "B", "birth_year": 2000}],
    )
    assert bad.status_code == 422  # the checksum, as stdnum checks it


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"not xml", {"Content-Type": "text/xml"}),
        (request_body("1000000014X", "A", "B", 1990), {"Content-Type": "text/xml"}),
        (request_body("10000000146", "A", "B", "nineteen"), {"Content-Type": "text/xml"}),
        (
            request_body("10000000146", "A", "B", 1990, "1.2"),
            {"Content-Type": "text/xml"},
        ),  # envelope mismatch
        (
            request_body("10000000146", "A", "B", 1990),
            {"Content-Type": "text/xml", "SOAPAction": '"urn:other"'},
        ),
        (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>', {"Content-Type": "text/xml"}),
    ],
)
def test_an_unreadable_request_is_a_client_fault_500_as_asmx_answers(
    nvi: httpx.Client, body: bytes, headers: dict[str, str]
) -> None:
    response = nvi.post(PATH, content=body, headers=headers)
    assert response.status_code == 500
    assert "<faultcode>soap:Client</faultcode>" in response.text
    assert "X-Nvi-Fake-Reason" not in response.headers


def test_health(nvi: httpx.Client) -> None:
    assert nvi.get("/health").json() == {"status": "ok"}


def test_the_wsdl_describes_the_operation_at_this_address(nvi: httpx.Client) -> None:
    response = nvi.get(PATH, params={"WSDL": ""})
    assert response.status_code == 200
    root = ET.fromstring(response.content)
    wsdl, soap, soap12 = (
        "http://schemas.xmlsoap.org/wsdl/",
        "http://schemas.xmlsoap.org/wsdl/soap/",
        "http://schemas.xmlsoap.org/wsdl/soap12/",
    )
    assert root.get("targetNamespace") == WS_NS
    actions = {e.get("soapAction") for ns in (soap, soap12) for e in root.iter(f"{{{ns}}}operation")}
    assert actions == {f"{WS_NS}/TCKimlikNoDogrula"}
    locations = {e.get("location") for ns in (soap, soap12) for e in root.iter(f"{{{ns}}}address")}
    assert locations == {f"{nvi.base_url}{PATH}"}
    assert [p.get("name") for p in root.iter(f"{{{wsdl}}}port")] == ["KPSPublicSoap", "KPSPublicSoap12"]

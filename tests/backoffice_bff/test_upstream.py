"""What the panel reads of a service's refusal (upstream.Upstreams.call), without a browser: the
problem's type and the fields a validation error names, which the forms draw beside their fields,
and the links of a list's pages (routes.Pager), which carry the cursors of the pages before."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from starlette.requests import Request

from hiwallet.backoffice_bff.errors import ActionRefused, NotAllowed
from hiwallet.backoffice_bff.routes import Pager
from hiwallet.backoffice_bff.upstream import STAFF_ADMIN, Upstreams

PROBLEMS = "https://problems.hiwallet.dev/"


def _upstreams(status: int, body: dict[str, Any]) -> Upstreams:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return Upstreams(client, {STAFF_ADMIN: "http://staff-admin.test"}, 5.0)


async def test_a_refusal_keeps_the_services_problem_type_status_and_fields() -> None:
    last = _upstreams(409, {"type": PROBLEMS + "last-staff-manager", "title": "The change would…"})
    with pytest.raises(ActionRefused) as refused:
        await last.call(STAFF_ADMIN, "PUT", "/v1/employees/x/roles", "t", json={"role_ids": []})
    assert (refused.value.kind, refused.value.said, refused.value.fields) == ("last-staff-manager", 409, ())
    assert refused.value.status == 409  # the error page's status when no form draws it

    invalid = _upstreams(
        422,
        {
            "type": PROBLEMS + "validation-error",
            "errors": [
                {"loc": ["body", "name"], "msg": "too short"},
                {"loc": ["body", "budget_minor"], "msg": "greater than 0"},
                {"loc": ["query", "limit"], "msg": "not this one"},
                "not an error object",
            ],
        },
    )
    with pytest.raises(ActionRefused) as refused:
        await invalid.call(STAFF_ADMIN, "POST", "/v1/staff/campaigns", "t", json={})
    assert refused.value.fields == ("name", "budget_minor") and refused.value.said == 422

    own_check = _upstreams(422, {"type": PROBLEMS + "invalid-request", "field": "ends_at"})
    with pytest.raises(ActionRefused) as refused:
        await own_check.call(STAFF_ADMIN, "POST", "/v1/staff/campaigns", "t", json={})
    assert refused.value.fields == ("ends_at",)

    itself = _upstreams(403, {"type": PROBLEMS + "self-escalation"})
    with pytest.raises(NotAllowed) as forbidden:
        await itself.call(STAFF_ADMIN, "PUT", "/v1/employees/me/roles", "t", json={})
    assert forbidden.value.kind == "self-escalation"


def _request(query: str) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/audit", "query_string": query.encode(), "headers": []}
    )


def _query(href: str | None) -> dict[str, list[str]]:
    assert href is not None
    return parse_qs(urlsplit(href).query)


def test_the_pagers_links_go_forward_and_back_keeping_the_filters() -> None:
    first = Pager.of(_request("action=x"))
    links = first.links("/audit", "11", {"action": "x", "actor": ""})
    assert links["prev"] is None
    assert _query(links["next"]) == {"action": ["x"], "cursor": ["11"], "trail": ["~"]}

    second = Pager.of(_request(urlsplit(links["next"]).query))
    assert second.params() == {"cursor": "11"}
    links = second.links("/audit", "22", {"action": "x"})
    assert links["prev"] == "/audit?action=x"  # back to the first page: no cursor
    third = Pager.of(_request(urlsplit(links["next"]).query))
    assert _query(links["next"])["trail"] == ["~.11"]
    end = third.links("/audit", None, {"action": "x"})
    assert end["next"] is None
    assert _query(end["prev"]) == {"action": ["x"], "cursor": ["11"], "trail": ["~"]}

    # a trail longer than kept is cut to its newest; a trail without a cursor is ignored
    long = Pager.of(_request("cursor=99&trail=" + ".".join(str(n) for n in range(100))))
    assert len(long.trail) == 20 and long.trail[-1] == "99"
    assert Pager.of(_request("trail=1.2")).trail == ()

"""The merchants' webhook endpoints and deliveries, forwarded to wallet-api: the place where
``/v1/webhook-endpoints…`` and ``/v1/webhook-deliveries…`` will be routed (they are built in
wallet-api and its dispatcher by another change). Each route will be one line, as in
routes.py::

    @router.post("/v1/webhook-endpoints", ..., openapi_extra=operation(body="WebhookEndpointIn"))
    async def create_endpoint(request: Request) -> Response:
        return await door(request).forward(request, WALLET, "/v1/webhook-endpoints")

The router is included by the app already (empty until then)."""

from __future__ import annotations

from fastapi import APIRouter

from hiwallet.core.http import LeanRoute

__all__ = ["router"]

router = APIRouter(route_class=LeanRoute)

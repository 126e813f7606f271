"""merchant-webhooks: delivers the merchants' webhook events (docs/webhooks.md) from
``wallet.webhook_events`` to the endpoints their businesses registered with wallet-api, signed
in the Standard Webhooks scheme, retried for three days, in order per resource."""

__all__: list[str] = []

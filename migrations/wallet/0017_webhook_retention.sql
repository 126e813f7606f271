-- The merchants' webhooks are kept for a retention (docs/webhooks.md, "Retention"): an event,
-- its deliveries and their attempts go together once the event is older than it and nothing of
-- it is pending. merchant-webhooks deletes them in bounded batches (grants.sql).

-- The oldest dispatched events first.
CREATE INDEX webhook_events_dispatched_created ON wallet.webhook_events (created_at)
    WHERE dispatched_at IS NOT NULL;
-- An event's deliveries (the key webhook_deliveries_once leads with the endpoint): what the
-- purge deletes with the event, and what the event's foreign key checks on its deletion.
CREATE INDEX webhook_deliveries_event ON wallet.webhook_deliveries (bucket, event_id);

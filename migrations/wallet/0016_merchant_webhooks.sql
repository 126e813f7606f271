-- Merchants' webhooks (issue 22, docs/webhooks.md): the endpoints a business registers, the
-- events written in the transaction of the movement they announce (an outbox: a movement
-- without its event, or the reverse, cannot commit), one delivery per event and endpoint, and
-- every attempt of a delivery.
--
-- Writers: wallet-api registers endpoints (its routes) and writes payment.received (in the
-- statement of wallet.transfer_batch), payment.refunded and promo.granted (in the posting's
-- transaction); wallet-consumer writes withdrawal.completed and withdrawal.failed (in the saga
-- command's transaction); merchant-webhooks fans events out to deliveries, sends them and
-- records the attempts, and disables an endpoint that fails for three days (grants.sql).
--
-- Every table carries the business account's bucket at the head of its keys (the shard rule,
-- docs/ledger-citus.md): an endpoint, its deliveries and their attempts live in its bucket.

CREATE TABLE wallet.webhook_endpoints (
    bucket                smallint    NOT NULL,
    id                    text        NOT NULL,
    account_id            text        NOT NULL,
    url                   text        NOT NULL,
    event_types           text[]      NOT NULL,
    description           text,
    enabled               boolean     NOT NULL DEFAULT true,
    -- 'member' (a member turned it off) or 'failing' (merchant-webhooks: failing for the
    -- configured time); null while enabled.
    disabled_reason       text,
    disabled_at           timestamptz,
    -- The signing secret, sealed (AES-GCM under the key ring of the settings, bound to the
    -- endpoint's id); during a rotation's overlap the previous one too, until its time.
    secret_sealed         bytea       NOT NULL,
    previous_secret_sealed bytea,
    previous_secret_until timestamptz,
    -- Since when every attempt to it has failed (null: the last attempt succeeded).
    failing_since         timestamptz,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT webhook_endpoints_account_fkey FOREIGN KEY (bucket, account_id)
        REFERENCES wallet.accounts (bucket, id),
    CONSTRAINT webhook_endpoints_url_length CHECK (length(url) BETWEEN 1 AND 2048),
    CONSTRAINT webhook_endpoints_event_types_count CHECK (cardinality(event_types) BETWEEN 1 AND 16),
    CONSTRAINT webhook_endpoints_disabled_reason CHECK (
        (enabled AND disabled_reason IS NULL)
        OR (NOT enabled AND disabled_reason IN ('member', 'failing'))),
    CONSTRAINT webhook_endpoints_previous_secret CHECK (
        (previous_secret_sealed IS NULL) = (previous_secret_until IS NULL))
);
CREATE INDEX webhook_endpoints_account ON wallet.webhook_endpoints (bucket, account_id);

-- The events: the outbox. ``seq`` orders them (a later event of a resource is always written
-- after the earlier one committed: a refund needs its payment); ``dispatched_at`` is set once
-- merchant-webhooks made its deliveries. The id is derived from the type and the resource
-- (hiwallet.contracts.merchant_events.event_id), so the same event twice is a key violation.
CREATE TABLE wallet.webhook_events (
    bucket        smallint    NOT NULL,
    id            text        NOT NULL,
    seq           bigint      GENERATED ALWAYS AS IDENTITY,
    account_id    text        NOT NULL,
    type          text        NOT NULL,
    resource_id   text        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL,
    dispatched_at timestamptz,
    CONSTRAINT webhook_events_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT webhook_events_type CHECK (type IN (
        'payment.received', 'payment.refunded', 'withdrawal.completed', 'withdrawal.failed',
        'promo.granted', 'endpoint.disabled')),
    CONSTRAINT webhook_events_payload_object CHECK (jsonb_typeof(payload) = 'object')
);
CREATE INDEX webhook_events_undispatched ON wallet.webhook_events (seq) WHERE dispatched_at IS NULL;

-- One delivery per event and endpoint (subscribed and enabled when the event was dispatched).
-- Pending until delivered or given up ('failed'); ``next_attempt_at`` is when it is due, and
-- while an attempt is in flight the end of its lease (a dispatcher that dies mid-flight leaves
-- it to be claimed again then: at least once). ``attempts`` counts since it was made or
-- replayed (the schedule's position).
CREATE TABLE wallet.webhook_deliveries (
    bucket           smallint    NOT NULL,
    id               text        NOT NULL,
    endpoint_id      text        NOT NULL,
    event_id         text        NOT NULL,
    event_seq        bigint      NOT NULL,
    event_type       text        NOT NULL,
    resource_id      text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    last_status_code integer,
    last_error       text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    delivered_at     timestamptz,
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (bucket, id),
    CONSTRAINT webhook_deliveries_once UNIQUE (bucket, endpoint_id, event_id),
    CONSTRAINT webhook_deliveries_endpoint_fkey FOREIGN KEY (bucket, endpoint_id)
        REFERENCES wallet.webhook_endpoints (bucket, id) ON DELETE CASCADE,
    CONSTRAINT webhook_deliveries_event_fkey FOREIGN KEY (bucket, event_id)
        REFERENCES wallet.webhook_events (bucket, id),
    CONSTRAINT webhook_deliveries_status CHECK (status IN ('pending', 'delivered', 'failed'))
);
CREATE INDEX webhook_deliveries_due ON wallet.webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
-- A delivery waits for the earlier pending ones of its endpoint and resource (order per resource).
CREATE INDEX webhook_deliveries_pending_order ON wallet.webhook_deliveries
    (bucket, endpoint_id, resource_id, event_seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON wallet.webhook_deliveries (bucket, endpoint_id, created_at, id);

-- Every attempt: when, how long, the status code or the error's class.
CREATE TABLE wallet.webhook_attempts (
    bucket       smallint    NOT NULL,
    delivery_id  text        NOT NULL,
    n            bigint      GENERATED ALWAYS AS IDENTITY,
    attempted_at timestamptz NOT NULL,
    status_code  integer,
    error        text,
    duration_ms  integer     NOT NULL,
    CONSTRAINT webhook_attempts_pkey PRIMARY KEY (bucket, delivery_id, n),
    CONSTRAINT webhook_attempts_delivery_fkey FOREIGN KEY (bucket, delivery_id)
        REFERENCES wallet.webhook_deliveries (bucket, id) ON DELETE CASCADE
);

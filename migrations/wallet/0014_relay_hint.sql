-- wallet.outbox without its NOTIFY trigger: wallet-consumer, its one writer, wakes the relay
-- after its commits (core.outbox.RelayHint: its own relay directly, another instance's by one
-- coalesced pg_notify in a transaction of its own). A NOTIFY in a writing transaction takes
-- the server's one notify-queue lock at its commit and holds it through the commit's WAL flush,
-- so every notifying commit on the server waits for the one before; the withdrawal saga now
-- writes here for every withdrawal, at 150 and more a second (0011 expected a few). The relay's
-- poll still finds a row whose hint was lost.
DROP TRIGGER outbox_notify ON wallet.outbox;
DROP FUNCTION wallet.outbox_notify();

-- bank.outbox without its NOTIFY trigger: the writers wake the relay after their commits
-- (core.outbox.RelayHint: bank-adapter's own relay directly, bank-webhook's by one coalesced
-- pg_notify in a transaction of its own). A NOTIFY in a writing transaction takes the
-- server's one notify-queue lock at its commit and holds it through the commit's WAL flush:
-- every notifying commit on the server, in every database, waits for the one before. At the
-- withdrawal saga's rates (a callback a withdrawal, 150 and more a second) bank-webhook's
-- callbacks queued on it (docs/spine.md). The relay's poll still finds a row whose hint was lost.
DROP TRIGGER outbox_notify ON bank.outbox;
DROP FUNCTION bank.outbox_notify();

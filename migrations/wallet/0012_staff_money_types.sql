-- Issue 13, staff money: the goodwill credit's account role and transaction type (000_…: a
-- credit of type goodwill, granted by staff, from a platform expense account).
-- A migration of its own: a value added to an enum cannot be used in the transaction that adds
-- it, and every migration runs in its own transaction (0013 uses them).
ALTER TYPE ledger.account_role ADD VALUE IF NOT EXISTS 'goodwill_expense';
ALTER TYPE ledger.tx_type ADD VALUE IF NOT EXISTS 'goodwill';

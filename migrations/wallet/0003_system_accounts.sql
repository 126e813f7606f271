-- The system accounts of the default currency, in every bucket, so that no posting ever finds
-- one missing. Other currencies get theirs when their first wallet opens (open_wallet).
-- Providers: the card provider (stripe) and the bank.
SELECT ledger.ensure_system_accounts(b::smallint, 'TRY', ARRAY['stripe', 'bank'])
  FROM generate_series(0, 1023) AS b;

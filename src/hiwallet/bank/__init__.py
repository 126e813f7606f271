"""bank-adapter and bank-webhook (the withdrawal saga's bank side).

bank-adapter consumes ``hiwallet.withdrawals.bank`` (StartBankTransfer): it asks the bank for
the transfer (``POST /v1/transfers``, the command id as Idempotency-Key) and records it pending
in bank.transfers; it runs the relay of bank.outbox and the bank reconciliation. bank-webhook
receives the bank's signed callbacks (Standard Webhooks, core.webhooks) and records each
transfer's outcome once, announcing it (BankTransferSucceeded / BankTransferFailed) through
bank.outbox in the same transaction. docs/bank.md.
"""

__all__: list[str] = []

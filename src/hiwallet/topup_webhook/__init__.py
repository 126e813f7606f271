"""topup-webhook: the providers' signed notifications of top-ups, verified over their
raw bytes, kept in topup.inbox, one record per payment at a provider in topup.payments, and
announced once per payment (TopupRecorded, through the outbox and its relay to hiwallet.topups).
"""

__all__: list[str] = []

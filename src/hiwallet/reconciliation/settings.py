"""Reconciliation's settings: ``HIWALLET_RECONCILIATION_*`` environment variables with local
defaults. wallet-consumer runs the jobs with them; wallet-api's on-demand round and the
operator commands read the same ones."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DAY_S = 24 * 3600.0


class ReconciliationSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HIWALLET_RECONCILIATION_", extra="ignore")

    # The reconciliation round (the architecture's "Background jobs": every 6 hours). A round
    # may take at most its timeout (core.jobs; the ledger's reads are bounded on their own).
    interval_s: float = 6 * 3600.0
    timeout_s: float = 1800.0
    # How long each provider may take to pay a top-up out before it is a finding, by the
    # provider's name in the ledger (its clearing account: <bucket>:sys:clearing:<provider>:<cur>).
    # JSON in the environment: {"stripe": 345600, "bank": 172800}. Stripe pays out on a rolling
    # schedule of two business days (four days covers a weekend); a wire is on our account the
    # next business day. Any other provider: default_settlement_window_s.
    settlement_windows_s: dict[str, float] = Field(
        default_factory=lambda: {"stripe": 4 * DAY_S, "bank": 2 * DAY_S}
    )
    default_settlement_window_s: float = 7 * DAY_S
    # A provider paid out in the gross model (no fee deducted) bills its fees by invoice, one
    # a month, in arrears: a month of such payouts with no invoice entered for it (its period)
    # this many days after the month's end is a finding (invoice_late). JSON in the environment:
    # {"stripe": 15}. Any other provider: default_invoice_due_days.
    invoice_due_days: dict[str, int] = Field(default_factory=lambda: {"stripe": 15, "bank": 15})
    default_invoice_due_days: int = Field(default=30, ge=0, le=366)
    # The nostro against the bank's statement: the days of statements a round reads (the last
    # nostro_lookback_days), and how long either side may wait for the other before it is a
    # finding (a day's wires are posted when its statement is read, the next day; a card
    # provider's payout is posted when the provider reports it, which may be before or after
    # the bank shows it).
    nostro_lookback_days: int = Field(default=35, ge=1, le=400)
    nostro_wait_days: int = Field(default=3, ge=0, le=60)
    # The most statement lines, and nostro lines, a round reads (each wire is a line: about
    # 35 days of a busy account). Beyond it the round cannot tell what is missing on either
    # side: it matches nothing that round (logged at error level) rather than report half.
    nostro_max_lines: int = Field(default=500_000, ge=10, le=5_000_000)
    # The most findings of one kind a round records (the rest waits for the next round, after
    # someone has looked at the first ones): a broken ledger must not flood the table.
    max_findings_per_check: int = 1000

    # verify (the whole ledger from its lines) as a job: a gauge of what it found. Continuous
    # in the sense of "always scheduled"; a full pass reads every line, so not back to back.
    verify_interval_s: float = 900.0
    verify_timeout_s: float = 3600.0

    # The daily operations summary: every hour, the current UTC day and the days_back before
    # it computed again (a posting committed just before midnight is in yesterday's row).
    summary_interval_s: float = 3600.0
    summary_timeout_s: float = 600.0
    summary_days_back: int = Field(default=1, ge=0, le=31)

    # The open-findings gauge, read from the table by every instance (so each answers the same).
    metrics_refresh_s: float = 60.0


@lru_cache(maxsize=1)
def get_reconciliation_settings() -> ReconciliationSettings:
    return ReconciliationSettings()

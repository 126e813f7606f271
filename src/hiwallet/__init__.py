"""HiWallet: an open digital wallet platform on a double-entry ledger."""

__version__ = "0.1.0"

"""The ledger core (the architecture document's WalletService.Core)."""

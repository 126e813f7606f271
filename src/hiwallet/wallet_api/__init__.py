"""wallet-api: accounts, members, wallets, transfers, payments and promos over HTTP."""

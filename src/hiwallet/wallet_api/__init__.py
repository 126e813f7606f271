"""wallet-api: accounts, members, wallets, transfers, payments and promos over HTTP."""

# Nothing here: a deployable. Only the composition roots (cli, up) import its modules.
__all__: list[str] = []

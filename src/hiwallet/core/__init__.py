"""The shared kernel: settings, database, ids, money. It depends on no service package."""

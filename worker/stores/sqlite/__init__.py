"""The SQLite store (embedded, one file): the store (sqlite_store.py), its publish ledger,
dead letters, pruning and write transactions."""

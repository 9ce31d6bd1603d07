"""The publishing side: send messages with a ledger note, find those never recorded, and
replay dead letters through the ledger."""

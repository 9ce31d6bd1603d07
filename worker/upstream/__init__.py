"""The publishing side: send messages with a ledger note, and find those never recorded."""

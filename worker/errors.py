"""Every error the worker raises on purpose, under one root.

EvidenceError
├── ConfigurationError     permanent: fix the settings or files, then restart
├── InputError             permanent: the message or input file is unusable
│   └── OversizeMessage
└── TransientError         retryable: the store or broker is unreachable for now
    ├── StoreBusy          retryable: the store answers but cannot take writes yet
    └── SentUnconfirmed    the broker took the messages; the ledger could not confirm them

contracts.PolicyError (a ValueError, no I/O) is turned into ConfigurationError at start-up.
"""

from __future__ import annotations


class EvidenceError(Exception):
    """Root of the worker's own errors."""


class ConfigurationError(EvidenceError):
    """Raised when settings, a policy or a store URL cannot be used; says what to fix."""


class InputError(EvidenceError):
    """Raised when an input (message, file, line) cannot be parsed or validated."""


class OversizeMessage(InputError):
    """Raised when a message body is larger than EVIDENCE_MAX_MESSAGE_BYTES, before parsing."""


class TransientError(EvidenceError):
    """Raised when the store is unreachable for now; tasks retry these with backoff."""


class StoreBusy(TransientError):
    """Raised when the store answers but cannot take a write yet: its replicas have not
    confirmed it (or are in their first sync), it is loading its data, it cannot persist
    (MISCONF), it is full, or it is a replica. The URL is right: waiting is the fix."""


class SentUnconfirmed(TransientError):
    """Raised when the broker took a publisher's messages but the store could not confirm
    their ledger notes: they were sent, and reconcile will not find them if the broker loses
    them (worker/stores/contract.py). `sent`: how many messages."""

    def __init__(self, message: str, *, sent: int) -> None:
        super().__init__(message)
        self.sent = sent

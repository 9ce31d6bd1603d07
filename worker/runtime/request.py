"""Celery's Request for the scoring tasks: task events, Flower, `celery inspect` and Celery's
own log lines name a message by its case ID, never by its answer or context text, whoever
published it.

Celery's events show a task's arguments as its `argsrepr` header, and remote control (`inspect
active`, `reserved`, `query_task`) the arguments themselves unless asked not to: here it shows
the argsrepr too. `publish` and the client write one of case IDs and input hashes
(worker/upstream/publishing.py); any other publisher's is Celery's repr of the arguments (the whole
message), or missing, and then a failure's log line falls back to that repr. For those the
worker writes its own, from the case IDs alone: an input hash would mean validating the message
here, in the consumer, before the pool does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery.worker.request import Request

from worker.constants import SCORE_BATCH
from worker.pipeline.intake import case_id_of
from worker.upstream.publishing import batch_repr, written_here

# Celery's own bound on an argsrepr header (celery.app.amqp's argsrepr_maxsize).
MAX_REPR_CHARS = 1024
MAX_CASE_ID_CHARS = 100


class NamedByCase(Request):  # type: ignore[misc]  # celery has no type hints
    """A Request whose argsrepr and kwargsrepr carry no message text."""

    _argsrepr: str | None
    _kwargsrepr: str | None
    _request_dict: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if written_here(self._argsrepr, self._kwargsrepr):
            return
        argsrepr, kwargsrepr = described(self._type, self._args, self._kwargs)
        # The request dict is what the pool's trace logs a failure with.
        self._argsrepr = self._request_dict["argsrepr"] = argsrepr
        self._kwargsrepr = self._request_dict["kwargsrepr"] = kwargsrepr

    def info(self, safe: bool = False) -> dict[str, Any]:
        """What `celery inspect active`, `reserved` and `query_task` (and Flower's worker page)
        report: Celery gives the arguments themselves unless asked for safe=True, which
        neither asks; here it is always the argsrepr."""
        described: dict[str, Any] = super().info(safe=True)
        return described


def described(task: str, args: Any, kwargs: Any) -> tuple[str, str]:
    """(argsrepr, kwargsrepr) for a scoring task's arguments, naming case IDs only."""
    describe = _batch if task == SCORE_BATCH else _message
    positional = args if isinstance(args, Sequence) and not isinstance(args, str) else [args]
    argsrepr = ", ".join(describe(arg) for arg in positional)
    named = kwargs if isinstance(kwargs, Mapping) else {}
    kwargsrepr = "{" + ", ".join(f"{str(k)[:50]!r}: {describe(v)}" for k, v in named.items()) + "}"
    return argsrepr[:MAX_REPR_CHARS], kwargsrepr[:MAX_REPR_CHARS]


def _message(body: Any) -> str:
    case_id = case_id_of(body)
    return "a message without a case_id" if case_id is None else _case(case_id)


def _batch(bodies: Any) -> str:
    if not isinstance(bodies, list):
        return "not a list of messages"
    return batch_repr([_message(body) for body in bodies])


def _case(case_id: str) -> str:
    cut = case_id[:MAX_CASE_ID_CHARS]
    return f"case_id={cut}" + ("…" if len(cut) < len(case_id) else "")

"""Raw bodies in, records out: the shared path of the Celery tasks and the one-process runs.

Each body is parsed on its own, so a bad one is dead-lettered and recorded as rejected
without spoiling the others; the valid ones are recorded in one store call, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_core import PydanticSerializationError

from contracts import AttributionResult, Policy
from worker.errors import InputError
from worker.pipeline import Clock, Delivery, Processed, parse_message, process_many, rejected
from worker.stores import DeadLetter, ResultStore

Body = object  # str | bytes | a decoded JSON value; anything else is rejected, not raised


def storable(text: str) -> str:
    """Lone surrogates (legal JSON escapes, not Unicode) as \\udXXX text: stores keep UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def body_text(body: Body) -> str:
    """The body as kept in the dead-letter store: whole, decoded leniently."""
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace").rstrip("\n")
    if isinstance(body, str):
        return storable(body.rstrip("\n"))
    import json

    try:
        return storable(json.dumps(body, ensure_ascii=False, default=repr))
    except (TypeError, ValueError, RecursionError):
        return storable(repr(body))


def check_encodable(message: AttributionResult) -> None:
    """Raise InputError for a lone surrogate (a legal JSON escape, not Unicode) where it breaks.

    IDs are stored as UTF-8, and the grader is hashed through pydantic's JSON mode, which
    cannot encode one in a nested params key. Checked before scoring, so such a message ends
    as a rejected record instead of a traceback. Answer and context text may hold them.
    """
    for name in ("case_id", "required_claim_ids", "supported_claim_ids"):
        value = getattr(message, name)
        try:
            (value if isinstance(value, str) else "\n".join(value)).encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                f"{name} contains a lone surrogate: IDs must be valid Unicode"
            ) from None
    try:
        message.grader.model_dump(mode="json")
    except (UnicodeEncodeError, PydanticSerializationError):
        raise InputError("grader contains a lone surrogate that cannot be hashed") from None


def handle(
    bodies: Sequence[tuple[Body, Delivery]],
    *,
    store: ResultStore,
    policy: Policy | None,
    max_message_bytes: int,
    clock: Clock,
) -> list[Processed]:
    """One Processed per body, in input order; rejected bodies are dead-lettered first."""
    valid: list[tuple[AttributionResult, Delivery]] = []
    letters: list[DeadLetter] = []
    slots: list[Processed | None] = []
    for body, delivery in bodies:
        try:
            parsed = parse_message(body, max_bytes=max_message_bytes)  # type: ignore[arg-type]
            check_encodable(parsed)
        except InputError as error:
            # A field name in the error (an unknown key) may itself hold a lone surrogate.
            reason = storable(str(error))
            letters.append(
                DeadLetter(
                    received_at=clock(),
                    error=reason,
                    body=body_text(body),
                    task_id=delivery.task_id,
                )
            )
            record = rejected(reason, body=body, policy=policy, delivery=delivery)
            slots.append(Processed(record=record))
            continue
        valid.append((parsed, delivery))
        slots.append(None)
    store.dead_letter(*letters)
    scored = iter(process_many(valid, store=store, policy=policy, clock=clock))
    return [slot if slot is not None else next(scored) for slot in slots]

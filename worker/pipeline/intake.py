"""Body in, AttributionResult out, or an InputError whose text is the rejection's reason.

Every way a message reaches the worker (a task argument, a CLI line, a raw transport body)
enters here, so a bad one is described the same way wherever it came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NamedTuple

import orjson
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from contracts import AttributionResult
from worker.errors import InputError, OversizeMessage

MAX_REPORTED_ERRORS = 3

Body = object  # str | bytes | a decoded JSON value; anything else is rejected, not raised


class CutBody(NamedTuple):
    """A body cut before it reached the store, as its dead letter keeps it (the store's
    DeadLetter.bounded): its first bytes as text, and the whole body's SHA-256 and size."""

    kept: str
    sha256: str  # hex SHA-256 of the whole body's text in UTF-8
    size: int  # the whole body's text in UTF-8 bytes


def admit(body: Body, *, max_bytes: int) -> AttributionResult:
    """The validated message, or InputError with a reason that can be stored as UTF-8."""
    try:
        message = parse_message(body, max_bytes=max_bytes)
        check_encodable(message)
    except InputError as error:
        # A field name in the error (an unknown key) may itself hold a lone surrogate.
        raise InputError(storable(str(error))) from None
    return message


def parse_message(body: Body, *, max_bytes: int) -> AttributionResult:
    """Validate one message; raise InputError with a specific reason. Size is checked first."""
    if isinstance(body, str | bytes):
        size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            raise OversizeMessage(f"message is {size} bytes, over the {max_bytes}-byte limit")
        try:
            return AttributionResult.model_validate_json(body)
        except ValidationError as error:
            raise InputError(
                not_utf8(body) or lone_surrogate(body, error) or describe_validation_error(error)
            ) from None
    if not isinstance(body, Mapping):
        raise InputError(f"message must be a JSON object, got {type(body).__name__}")
    try:
        return AttributionResult.model_validate(body)
    except ValidationError as error:
        raise InputError(describe_validation_error(error)) from None


def describe_validation_error(error: ValidationError) -> str:
    """A short, specific sentence: which fields, what was wrong; never the raw input."""
    parts = []
    for details in error.errors()[:MAX_REPORTED_ERRORS]:
        where = ".".join(str(part) for part in details["loc"]) or "message"
        if details["type"] == "json_invalid":
            return f"invalid JSON: {details['msg'].removeprefix('Invalid JSON: ')}"
        parts.append(f"{where}: {details['msg']}")
    more = error.error_count() - len(parts)
    suffix = f" (and {more} more)" if more > 0 else ""
    return "schema: " + "; ".join(parts) + suffix


def not_utf8(body: str | bytes) -> str | None:
    """Say so when bytes are not UTF-8: clearer than the JSON parser's code-point complaint."""
    if not isinstance(body, bytes):
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"message is not valid UTF-8 ({error.reason} at byte {error.start})"
    return None


# What pydantic's JSON parser says of a \\uXXXX escape of a lone surrogate, which JSON allows.
_SURROGATE_COMPLAINTS = ("unexpected end of hex escape", "lone leading surrogate")
# A high surrogate's escape with the low one that pairs it, or either alone.
_SURROGATE_ESCAPE = re.compile(
    rb"(\\u[dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def lone_surrogate(body: str | bytes, error: ValidationError) -> str | None:
    """Name a lone surrogate as such: the parser calls it "unexpected end of hex escape",
    which reads as broken JSON, while the line is valid JSON (json.loads takes it) holding a
    \\uD800-\\uDFFF escape that is not half of a pair, so no Unicode text."""
    details = error.errors()[0]
    if details["type"] != "json_invalid" or not any(
        complaint in details["msg"] for complaint in _SURROGATE_COMPLAINTS
    ):
        return None
    try:
        json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # broken JSON too: the parser's own words
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    lone = (m.group() for m in _SURROGATE_ESCAPE.finditer(raw) if not (m[1] and m[2]))
    found = next(lone, None)
    escape = "" if found is None else f" {found.decode('ascii')}"
    return (
        f"lone surrogate{escape} in a JSON string: valid JSON, but not Unicode text; "
        "a surrogate escape must be half of a pair (\\ud83d\\ude00)"
    )


def check_encodable(message: AttributionResult) -> None:
    """Raise InputError for a lone surrogate (a legal JSON escape, not Unicode) where it breaks.

    IDs are stored as UTF-8, and the grader is hashed through pydantic's JSON mode, which
    cannot encode one in a nested params key. Checked before scoring, so such a message ends
    as a rejected record instead of a traceback. Answer and context text may hold them.

    orjson refuses a lone surrogate anywhere in what it is given, keys included: when it
    spells the IDs and the grader, every check below would pass, and it costs a tenth of
    dumping the grader through pydantic, on every message. What it refuses for another
    reason (an integer beyond 64 bits in the grader's params) takes the checks.
    """
    grader = message.grader
    try:
        orjson.dumps(
            (
                message.case_id,
                message.required_claim_ids,
                message.supported_claim_ids,
                message.expected_evidence,
                grader.name,
                grader.version,
                grader.model,
                grader.prompt,
                grader.params,
            )
        )
    except orjson.JSONEncodeError:
        pass
    else:
        return
    for name in ("case_id", "required_claim_ids", "supported_claim_ids"):
        value = getattr(message, name)
        try:
            (value if isinstance(value, str) else "\n".join(value)).encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                f"{name} contains a lone surrogate: IDs must be valid Unicode"
            ) from None
    if evidence := message.expected_evidence:
        try:
            "\n".join(
                [*evidence, *(document for ids in evidence.values() for document in ids)]
            ).encode()
        except UnicodeEncodeError:
            raise InputError(
                "expected_evidence contains a lone surrogate: IDs must be valid Unicode"
            ) from None
    try:
        message.grader.model_dump(mode="json")
    except (UnicodeEncodeError, PydanticSerializationError):
        raise InputError("grader contains a lone surrogate that cannot be hashed") from None


def case_id_of(body: object) -> str | None:
    """Best-effort case_id of a rejected message, so its record can still be routed."""
    if isinstance(body, str | bytes):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    case_id = body.get("case_id") if isinstance(body, Mapping) else None
    return case_id if isinstance(case_id, str) and case_id else None


def storable(text: str) -> str:
    """Lone surrogates (legal JSON escapes, not Unicode) as \\udXXX text: stores keep UTF-8."""
    try:
        text.encode("utf-8")  # almost every text: nothing to replace, no decoding back
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def body_text(body: Body) -> str:
    """The body as kept in the dead-letter store: whole, decoded leniently (a CutBody as cut)."""
    if isinstance(body, CutBody):
        return body.kept
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace").rstrip("\n")
    if isinstance(body, str):
        return storable(body.rstrip("\n"))
    try:
        return storable(json.dumps(body, ensure_ascii=False, default=repr))
    except (TypeError, ValueError, RecursionError):
        return storable(repr(body))

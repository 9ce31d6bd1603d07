"""Celery's consumer, plus: every body that cannot reach a task still ends in a record.

Oversize, undecodable and malformed bodies, unknown tasks and non-task messages are recorded as
rejected and dead-lettered whole, then acknowledged; Celery alone would log the raw body
(answer and context text included) and drop it. Items on a Redis queue list that are not
kombu messages at all (pushed there by something other than kombu) take the same path, as
their dead letters will keep them (see cut_item).
"""

from __future__ import annotations

import base64
import inspect
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, ClassVar

import redis
from celery.worker.consumer import Consumer
from celery.worker.consumer.heart import Heart as HeartStep
from celery.worker.heartbeat import Heart
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json

from worker.constants import SCORE_BATCH
from worker.errors import TransientError
from worker.observability.logging import get_logger
from worker.pipeline.intake import CutBody, body_text
from worker.pipeline.scoring import Delivery
from worker.runtime.kombu_json import NOT_THE_SAME, orjson_reading
from worker.runtime.kombu_qos import UnackedJsonQoS
from worker.settings import Settings
from worker.stores import DeadLetter
from worker.stores.durable import impatient

# Room for Celery's envelope around one message: [[message], {}, {callbacks...}].
ENVELOPE_BYTES = 4_096
# Real messages nest about six levels deep (envelope, list, message, contexts, params). Celery
# pickles decoded arguments for the pool, and pickle runs out of stack a few hundred down.
MAX_NESTING = 64


# Header of the kombu message that stands in for a queue item that was not one; its value
# says what the item was. See wrap_foreign_item.
NOT_AN_ENVELOPE = "x-evidence-not-an-envelope"
# Headers of one that carries only what the item's dead letter keeps of it (see cut_item):
# the whole item's SHA-256 and size, as the letter records them.
WHOLE_SHA256 = "x-evidence-whole-sha256"
WHOLE_BYTES = "x-evidence-whole-bytes"


def wrap_foreign_item(
    item: bytes | str, problem: str, queue: str, cut: CutBody | None = None
) -> str:
    """A kombu message (as kombu's Redis transport stores one) carrying `item` whole, or its
    `cut` (the whole item's digest and size in headers) when its dead letter would cut it.

    BRPOP has already taken the item off the list, and kombu would raise on it in the event
    loop (`Unrecoverable error`: the worker exits and the item is gone). As a message it is
    put in the unacked hash like any other, so it is rejected, dead-lettered and acked, or,
    with the store down or the worker killed first, redelivered after the visibility timeout.
    """
    headers: dict[str, Any] = {NOT_AN_ENVELOPE: problem}
    if cut is not None:
        raw = cut.kept.encode("utf-8", "surrogatepass")
        headers |= {WHOLE_SHA256: cut.sha256, WHOLE_BYTES: cut.size}
    else:
        raw = item if isinstance(item, bytes) else _utf8(item)
    return json.dumps(
        {
            "body": base64.b64encode(raw).decode("ascii"),
            "content-type": "application/octet-stream",
            "content-encoding": "binary",
            "headers": headers,
            "properties": {
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
                # The default exchange routes by queue name, so a restore puts it back here.
                "delivery_info": {"exchange": "", "routing_key": queue},
                "delivery_mode": 2,
                "priority": 0,
            },
        }
    )


# Any time: cut_item builds a letter only for the store's cut, and keeps none of it but that.
_CUT_AT = datetime(1970, 1, 1, tzinfo=UTC)


def cut_item(item: bytes | str, keep_bytes: int) -> CutBody | None:
    """A foreign item as its dead letter will keep it (the store's own cut, DeadLetter.bounded,
    of the text the letter holds), or None when the letter keeps it whole.

    The guard files this cut, not the item, as the message kombu copies into its unacked hash:
    an item of 100 MB, dead-lettered as 64 KiB, was held whole there (4/3 of it, in base64)
    until its letter was written. The copy must still be there whatever happens before the
    letter is written (the worker killed, the store down): the alternative, no copy at all
    for an item acknowledged as it is dead-lettered, would lose it in that window. The cut
    loses nothing the letter would keep: a letter written from it after a restore is the
    letter the whole item would have had (kept text, whole digest and size, truncated).
    """
    raw = item if isinstance(item, bytes) else _utf8(item)  # the body a wrapped item delivers
    letter = DeadLetter(received_at=_CUT_AT, error="", body=body_text(raw)).bounded(keep_bytes)
    if not letter.truncated or letter.body_sha256 is None or letter.body_bytes is None:
        return None
    return CutBody(letter.body, letter.body_sha256, letter.body_bytes)


def whole_item_cut(message: Any) -> CutBody | None:
    """The cut a wrapped foreign item carries (see wrap_foreign_item), None when it is whole."""
    headers = message.headers or {}
    digest, size, body = headers.get(WHOLE_SHA256), headers.get(WHOLE_BYTES), message.body
    if not (
        isinstance(digest, str)
        and isinstance(size, int)
        and not isinstance(size, bool)
        and isinstance(body, bytes)
    ):
        return None
    return CutBody(body.decode("utf-8", "replace"), digest, size)


def _utf8(text: str) -> bytes:
    """Text as bytes, even with lone surrogates (as bytes they decoded from, when escaped)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def item_limit(max_message_bytes: int, max_batch_bytes: int) -> int:
    """The largest queue item the guard decodes: twice the largest body a task takes, as
    kombu's Redis transport stores a body in base64 (4/3 of its size) beside small headers.
    A larger item is no message the worker would take; it is dead-lettered undecoded."""
    return 2 * max(max_message_bytes + ENVELOPE_BYTES, max_batch_bytes)


def foreign_item_problem(
    item: bytes | str, channel: Any, max_bytes: int | None = None
) -> str | None:
    """Why kombu or Celery could not take this queue item as a message (None when they can).

    It runs in the worker's event loop, where anything raised stops the worker with the item
    already popped and gone, so it never raises: an error of its own names the item's problem
    too. An item over `max_bytes` is not decoded at all, and nesting is bounded before
    anything walks the decoded item.
    """
    try:
        return _item_problem(item, channel, max_bytes)
    except Exception as error:
        return (
            "not a message envelope: the queue item could not be checked "
            f"({type(error).__name__}: {error})"
        )


def _item_problem(item: bytes | str, channel: Any, max_bytes: int | None) -> str | None:
    """The steps kombu takes (text, JSON, then its Message built from the dict), then the
    types of the fields kombu and Celery read in the event loop before any check of theirs."""
    problem, payload = _decoded(item, max_bytes)
    if problem is not None:
        return problem
    try:
        channel.Message(payload, channel=channel)
    except Exception as error:  # anything kombu's Message raises would stop the worker
        return (
            "not a message envelope: the queue item is JSON but kombu cannot read it as a "
            f"message ({type(error).__name__}: {error})"
        )
    wrong = _wrong_field(payload)
    return None if wrong is None else f"not a message envelope: the queue item is JSON but {wrong}"


def _decoded(item: bytes | str, max_bytes: int | None) -> tuple[str | None, Any]:
    """The item's problem as text or JSON (None), and its decoded JSON when it has none."""
    if not isinstance(item, bytes | str):
        return f"not a message envelope: the queue item is a {type(item).__name__}, not text", None
    size = len(item) if isinstance(item, bytes) else len(_utf8(item))
    if max_bytes is not None and size > max_bytes:
        return (
            f"not a message envelope: the queue item is {size} bytes, over the "
            f"{max_bytes}-byte limit",
            None,
        )
    too_deep = f"not a message envelope: the queue item nests deeper than {MAX_NESTING} levels"
    # orjson reads the envelope (its body one long string) in about half kombu's time, on every
    # queue item in the worker's event loop. A float is taken as orjson reads it: an integer
    # beyond 64 bits read as a float fails the field checks below, and the item is
    # dead-lettered, where no publisher writes one.
    payload = orjson_reading(item, floats=True)
    if payload is NOT_THE_SAME:
        # kombu decodes with errors='replace' first, so bad UTF-8 fails as JSON, if at all.
        text = item.decode(errors="replace") if isinstance(item, bytes) else item
        try:
            payload = kombu_json.loads(text)  # type: ignore[no-untyped-call]
        except RecursionError:  # the interpreter's own bound on nesting, met while decoding
            return too_deep, None
        except ValueError as error:
            return f"not a message envelope: the queue item is not JSON ({error})", None
    # A real envelope nests three levels (its body is text): the walk is a few dozen steps.
    # Celery pickles the headers for the pool, and pickle runs out of stack a few hundred
    # levels down.
    if nests_deeper(payload):
        return too_deep, None
    return None, payload


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _text_or_null(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _object(value: Any) -> bool:
    return isinstance(value, dict)


def _object_or_null(value: Any) -> bool:
    return value is None or isinstance(value, dict)


def _count_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _time_limits(value: Any) -> bool:
    return value is None or (
        isinstance(value, list)
        and len(value) == 2
        and all(
            limit is None or (isinstance(limit, int | float) and not isinstance(limit, bool))
            for limit in value
        )
    )


# Headers Celery's task protocol 2 writes as text (or null), read in the event loop: a list
# where it reads the task name raises TypeError ("unhashable") there, and the worker exits.
TEXT_HEADERS = (
    "task", "id", "eta", "expires", "root_id", "parent_id", "group", "argsrepr", "kwargsrepr",
    "origin", "shadow", "lang",
)  # fmt: skip

# The envelope's fields that kombu (filing the message in the unacked hash) and Celery
# (reading its headers) use unchecked, each with the test it must pass and what it must be.
ENVELOPE_FIELDS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (("properties", "delivery_tag"), _text, "text"),
    (("properties", "delivery_info"), _object, "an object"),
    (("properties", "delivery_info", "exchange"), _text, "text"),
    (("properties", "delivery_info", "routing_key"), _text, "text"),
    (("content-type",), _text_or_null, "text"),
    (("content-encoding",), _text_or_null, "text"),
    (("headers",), _object_or_null, "an object"),
    *((("headers", key), _text_or_null, "text") for key in TEXT_HEADERS),
    (("headers", "retries"), _count_or_null, "a whole number"),
    (("headers", "timelimit"), _time_limits, "[soft, hard] seconds"),
)


def _wrong_field(payload: dict[str, Any]) -> str | None:
    """Which field of a decoded envelope has a type kombu or Celery would raise on."""
    for path, fits, wanted in ENVELOPE_FIELDS:
        value: Any = payload
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if not fits(value):
            return _named(".".join(path), value, wanted)
    return None


def _named(field: str, value: Any, wanted: str) -> str:
    found = "null" if value is None else f"a {type(value).__name__}"
    return f"its {field} is {found}, not {wanted}"


def guard_brpop_reply(
    channel: Any, previous: Callable[..., Any] | None, response: Any, **options: Any
) -> Any:
    """redis-py's BRPOP reply callback, replacing a foreign item by a message that wraps it."""
    reply = previous(response, **options) if previous is not None else response
    if not reply:
        return reply
    list_name, item = reply
    max_bytes = getattr(channel, "max_item_bytes", None)
    problem = foreign_item_problem(item, channel, max_bytes)
    if problem is None:
        return reply
    name = list_name.decode(errors="replace") if isinstance(list_name, bytes) else str(list_name)
    queue = name.rsplit(channel.sep, 1)[0]  # the list of a priority level is queue+sep+n
    return (list_name, wrap_foreign_item(item, problem, queue, _cut_of(item, channel, max_bytes)))


def _cut_of(item: Any, channel: Any, max_bytes: int | None) -> CutBody | None:
    """cut_item for the guard, which must not raise (see foreign_item_problem): an item it
    cannot cut is wrapped whole, as before."""
    keep = getattr(channel, "keep_item_bytes", None)
    if keep is None or not isinstance(item, bytes | str):
        return None
    if max_bytes is not None:
        # At most half the item limit, so a copy put back on the queue (base64: 4/3 of the
        # kept bytes, plus headers) is itself within the limit and is decoded, not wrapped
        # again. Only limits under twice EVIDENCE_DEAD_LETTER_MAX_BYTES are that small.
        keep = min(keep, max_bytes // 2)
    try:
        return cut_item(item, keep)
    except Exception:
        return None


class GuardedRedisChannel(kombu_redis.Channel):
    """kombu's Redis channel whose BRPOP replies never carry an item kombu cannot load.

    The check sits in redis-py's reply callback for BRPOP, the one step between the server's
    reply and kombu's `loads`, so no kombu code is copied here. Its QoS spells the unacked
    copies with orjson (UnackedJsonQoS, worker/runtime/kombu_qos.py).
    """

    QoS = UnackedJsonQoS

    # With the default EVIDENCE_MAX_MESSAGE_BYTES and EVIDENCE_MAX_BATCH_BYTES; the worker's
    # transport gets a subclass with its own settings' (guard_redis_transport).
    max_item_bytes: ClassVar[int] = item_limit(
        int(Settings.model_fields["max_message_bytes"].default),
        int(Settings.model_fields["max_batch_bytes"].default),
    )
    # What the dead letter of a foreign item keeps of it, EVIDENCE_DEAD_LETTER_MAX_BYTES: its
    # message (and so its unacked copy) carries no more (cut_item).
    keep_item_bytes: ClassVar[int] = int(Settings.model_fields["dead_letter_max_bytes"].default)

    # The body the guard last had kombu decode (its text, encoding and decoded value): kombu
    # decodes the same body again as it delivers the item, and a batch's base64 body took
    # 2 ms to decode, twice, in the worker's event loop.
    _checked_body: tuple[Any, Any, Any] | None = None

    def decode_body(self, body: Any, encoding: Any = None) -> Any:
        checked = self._checked_body
        if checked is not None and checked[1] == encoding and checked[0] == body:
            self._checked_body = None
            return checked[2]
        decoded = super().decode_body(body, encoding)  # type: ignore[no-untyped-call]
        self._checked_body = (body, encoding, decoded)
        return decoded

    def _create_client(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            # The channel, or the transport under it, is closed: as the consumer restarts after
            # a lost broker, kombu closes the connection's transport and then its channel, whose
            # QoS asks for a client to requeue the unacknowledged messages, and an ack the event
            # loop had scheduled runs after the channel is gone. Building a client then raised
            # AttributeError out of the event loop, and the worker exited ("Unrecoverable
            # error"). A connection error is what kombu and Celery handle there ("Couldn't
            # ack"); the messages stay in the unacked hash and its sweep requeues them.
            raise redis.ConnectionError("the broker connection is closed")
        client = super()._create_client(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        previous = client.response_callbacks.get("BRPOP")
        client.set_response_callback("BRPOP", partial(guard_brpop_reply, self, previous))
        return client


def guard_redis_transport(
    transport: Any, item_bytes: int | None = None, keep_bytes: int | None = None
) -> None:
    """Give a kombu Redis transport (Sentinel too) channels with the BRPOP guard, which
    decodes items of at most `item_bytes` and files a foreign item as its dead letter keeps
    it, `keep_bytes` (GuardedRedisChannel's defaults when None)."""
    base = getattr(transport, "Channel", None)
    if not (isinstance(base, type) and issubclass(base, kombu_redis.Channel)):
        return  # AMQP and others: the broker itself never hands over a non-message
    if issubclass(base, GuardedRedisChannel):
        return
    guarded: type[GuardedRedisChannel] = (
        GuardedRedisChannel
        if base is kombu_redis.Channel
        else type(f"Guarded{base.__name__}", (GuardedRedisChannel, base), {})
    )
    own = {
        name: value
        for name, value in (("max_item_bytes", item_bytes), ("keep_item_bytes", keep_bytes))
        if value is not None and value != getattr(guarded, name)
    }
    if own:
        guarded = type(guarded.__name__, (guarded,), own)
    # The instance attribute wins over the class's for this connection alone: publishers
    # and other connections keep kombu's channel.
    transport.Channel = guarded


class BoundedHeart(Heart):  # type: ignore[misc]
    """Worker heartbeat events that are sent once, never retried.

    Celery sends each heartbeat (every 2 s, in the event loop) with retry=True and no retry
    policy: kombu then reconnects and resends for as long as the broker does not answer, and
    the event loop, consuming and the shutdown signal included, waits with it, without a
    line. Sent once, a heartbeat the broker does not take fails within the socket timeout
    and is buffered by Celery's event dispatcher; the consumer's own connection checks then
    notice the broker, log it and reconnect.
    """

    def _send(self, event: str, retry: bool = False) -> Any:
        return super()._send(event, retry=False)


class BoundedHeartStep(HeartStep):  # type: ignore[misc]
    """Celery's heartbeat bootstep, sending through BoundedHeart."""

    def start(self, c: Any) -> None:
        c.heart = BoundedHeart(c.timer, c.event_dispatcher, self.heartbeat_interval)
        c.heart.start()


def nests_deeper(value: Any, limit: int = MAX_NESTING) -> bool:
    """True when lists and dicts in `value` nest more than `limit` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
    return False


class EvidenceConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, plus: oversize and undecodable bodies are rejected with a record and
    dead-lettered whole, never dropped silently (Celery alone would log and ack them)."""

    class Blueprint(Consumer.Blueprint):  # type: ignore[misc]
        # Celery's steps, with the heartbeat event's replaced (see BoundedHeart), and the
        # heartbeat file for the container's probes (worker/runtime/heartbeat.py).
        default_steps: ClassVar[list[str]] = [
            *(
                "worker.runtime.consumer:BoundedHeartStep"
                if step.endswith(".heart:Heart")
                else step
                for step in Consumer.Blueprint.default_steps
            ),
            "worker.runtime.heartbeat:HeartbeatFileStep",
        ]

    def connection_for_read(self, heartbeat: float | None = None) -> Any:
        """The consuming connection, its Redis channels guarded before the first one exists
        (kombu opens one while connecting, and keeps it for consuming)."""
        connection = self.app.connection_for_read(heartbeat=heartbeat)
        settings = self.app.settings
        guard_redis_transport(
            connection.transport,
            item_limit(int(settings.max_message_bytes), int(settings.max_batch_bytes)),
            int(settings.dead_letter_max_bytes),
        )
        return self.ensure_connected(connection)

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        on_task_received = super().create_task_handler(*args, **kwargs)

        def guarded(message: Any) -> Any:
            foreign = (message.headers or {}).get(NOT_AN_ENVELOPE)
            if foreign is not None:
                self.reject_undeliverable(message, str(foreign), whole_item_cut(message))
                return None
            task_name = (message.headers or {}).get("task")
            size = len(message.body or b"")
            limit = self._body_limit(task_name)
            if size > limit:
                self.reject_undeliverable(
                    message, f"message is {size} bytes, over the {limit}-byte limit"
                )
                return None
            problem = self._envelope_problem(task_name, message)
            if problem is not None:
                self.reject_undeliverable(message, problem)
                return None
            return on_task_received(message)

        return guarded

    def _body_limit(self, task_name: str | None) -> int:
        """Bytes a transport body may have before it is parsed at all."""
        settings = self.app.settings
        if task_name == SCORE_BATCH:
            return int(settings.max_batch_bytes)
        return int(settings.max_message_bytes) + ENVELOPE_BYTES

    def reject_undeliverable(self, message: Any, error: str, cut: CutBody | None = None) -> None:
        """A body no task can take: dead-letter it whole (or its `cut`, a foreign item as the
        guard filed it), record it as rejected, then ack it.

        With the store unavailable it is neither recorded nor acknowledged: the broker keeps
        it and delivers it again after the visibility timeout. This runs in the worker's
        event loop, which must not wait for the store.
        """
        headers = message.headers or {}
        try:
            with impatient():
                self.app.service().reject(
                    [message.body if cut is None else cut],
                    error,
                    Delivery(task_id=headers.get("id")),
                    identify=False,
                    task_name=headers.get("task"),
                )
        except TransientError as problem:
            get_logger().warning(
                "evidence_coverage.store_unavailable",
                task_id=headers.get("id"),
                problem=str(problem),
                why="a rejected message stays unacknowledged until the store takes its record",
            )
            return
        except Exception:
            # An error raised here escapes into Celery's event loop, which exits the worker
            # ("Unrecoverable error") with the message lost from its view. Unacknowledged,
            # the broker delivers it again after the visibility timeout.
            get_logger().exception(
                "evidence_coverage.reject_failed",
                task_id=headers.get("id"),
                why="the message stays unacknowledged and is delivered again",
            )
            return
        message.ack()

    def _envelope_problem(self, task_name: str | None, message: Any) -> str | None:
        """Why Celery could not hand this task message to a task (None when it can).

        Celery unpacks the decoded body as [args, kwargs, embed] in this process and pickles
        the arguments to a pool child: a malformed envelope raises outside any task (no
        record), and deep nesting makes pickle overflow the stack and crash the consumer,
        again on every redelivery. Bad arguments would only fail the task with a TypeError.
        """
        task = self.app.tasks.get(task_name) if isinstance(task_name, str) else None
        if task is None:
            return None  # unknown task or no task header: on_unknown_* handle it
        try:
            payload = message.payload  # decoded once; Celery reuses kombu's cached result
        except Exception:  # on_decode_error / on_invalid_task report it
            return None
        if not (
            isinstance(payload, list)
            and len(payload) == 3  # Celery task protocol 2
            and isinstance(payload[0], list)
            and isinstance(payload[1], dict)
            and isinstance(payload[2], dict)
        ):
            return "invalid task envelope: the body must be [args, kwargs, embed]"
        body = message.body or b""  # bytes on Redis, str on RabbitMQ
        # Depth <= number of opening brackets, so most bodies skip the walk.
        openings = (
            body.count("[") + body.count("{")
            if isinstance(body, str)
            else body.count(b"[") + body.count(b"{")
        )
        if openings > MAX_NESTING and nests_deeper(payload):
            return f"message nests deeper than {MAX_NESTING} levels"
        args, kwargs, _ = payload
        try:
            inspect.signature(task.run).bind(*args, **kwargs)
        except TypeError as error:
            return f"invalid arguments for {task_name}: {error}"
        return None

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        self.reject_undeliverable(message, f"invalid message body: {exc}")

    # Celery's own handlers for the cases below log the raw body (answer and context text
    # included) and drop the message without a record; ours record it and dead-letter it.

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A disallowed content type (pickle) or a malformed task envelope."""
        self.reject_undeliverable(message, f"invalid task message: {exc}")

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        name = (message.headers or {}).get("task")
        self.reject_undeliverable(message, f"unknown task {name!r}")

    def on_unknown_message(self, body: Any, message: Any) -> None:
        self.reject_undeliverable(message, "not a task message: it has no task header")

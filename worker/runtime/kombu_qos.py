"""A fast path for kombu's Redis QoS (kombu.transport.redis.QoS): its `append`, which keeps a
copy of each delivered message in the unacked hash, with the copy spelled by orjson.

kombu spells the copy ([raw message, exchange, routing key]) with its json.dumps: for a
batch's 250 KB raw message that was 9% of Celery's main process in `bench`. Here the copy is
spelled by worker/runtime/kombu_json.py's `dumps`, which kombu's own `loads` reads back as it
reads kombu's spelling; everything else is kombu's `append`, step for step. kombu reads the
copy back with its own code (restore_by_tag: a requeue, the visibility sweep, a channel's
close).

The contract test (tests/unit/seams/test_kombu_qos.py) delivers a table of messages through
kombu's Redis transport with kombu's QoS and with this one, and fails when what either leaves
in Redis reads back differently, or when a requeue puts back different bytes: run it on
upgrading kombu, Celery or redis-py (docs/development.md).
"""

from __future__ import annotations

from time import time
from typing import Any, Final

from kombu.transport import redis as kombu_redis

from worker.runtime import kombu_json

# The versions the contract test last passed with; it fails, naming the installed ones, until
# they are the locked ones (docs/development.md, "Upgrading kombu, Celery or structlog").
CHECKED_AGAINST: Final = {
    "kombu": "5.7.0",
    "celery": "5.7.0",
    "redis": "8.1.0",
    "orjson": "3.13.0",
}


class UnackedJsonQoS(kombu_redis.QoS):
    """kombu's Redis QoS, whose copy of each delivered message in the unacked hash is spelled
    by kombu_json.dumps."""

    def append(self, message: Any, delivery_tag: str) -> None:
        # kombu's QoS.append (redis-py 3 and later), with kombu_json.dumps for its dumps().
        delivery = message.delivery_info
        copy = [message._raw, delivery["exchange"], delivery["routing_key"]]
        with self.pipe_or_acquire() as pipe:
            pipe.zadd(self.unacked_index_key, {delivery_tag: time()}).hset(
                self.unacked_key, delivery_tag, kombu_json.dumps(copy)
            ).execute()
            super(kombu_redis.QoS, self).append(message, delivery_tag)  # type: ignore[no-untyped-call]

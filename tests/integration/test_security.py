"""Security on a real worker: credentials and raw text never logged, JSON only, never pickle.

One worker authenticates as its own Redis ACL user (broker and store URLs carry the password)
and receives every kind of message carrying distinctive answer and context text; the tests
then grep everything it wrote to stdout and stderr.
"""

from __future__ import annotations

import copy
import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from contracts.record_models import REJECTED, SCORED
from tests.conftest import BASE_MESSAGE
from tests.integration.conftest import check_redis
from tests.integration.worker_harness import BROKER_URL as PLAIN_BROKER_URL
from tests.integration.worker_harness import (
    REDIS_PORT,
    STORE_URL,
    Launcher,
    Line,
    flush_queue,
    hash_of,
    publish_raw,
)
from worker.constants import SCORE, SCORE_BATCH
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

USER = f"evidence-test-{uuid.uuid4().hex[:6]}"
PASSWORD = f"s3cret-pass-{uuid.uuid4().hex[:8]}"
BROKER_URL = f"redis://{USER}:{PASSWORD}@127.0.0.1:{REDIS_PORT}/12"
SECURED_STORE_URL = f"redis://{USER}:{PASSWORD}@127.0.0.1:{REDIS_PORT}/14"
ANSWER = "Zebra-7731 confirms refunds are issued within 30 days of the return."
CONTEXT = "Okapi-4419 handbook: refunds go back to the original payment method."
SECRETS = (PASSWORD, ANSWER, CONTEXT, "Zebra-7731", "Okapi-4419")
MAX_MESSAGE_BYTES = 10_000
PICKLE_REASON = (
    "invalid task message: Refusing to deserialize untrusted content of type pickle "
    "(application/x-python-serialize)"
)
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def secret_message(**fields: Any) -> dict[str, Any]:
    contexts = [{"document_id": "handbook#refunds", "text": CONTEXT}]
    return {**copy.deepcopy(BASE_MESSAGE), "answer": ANSWER, "contexts": contexts, **fields}


class OpensFileWhenUnpickled:
    """Unpickling this creates a file: proof that the worker ran code from the message."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


@dataclass
class Secured:
    """What the worker wrote, and the task ids of what it was sent."""

    output: str
    records: list[Line]
    task_ids: dict[str, str]
    store: RedisStore
    marker: Path

    def record(self, kind: str) -> Line:
        (record,) = [line for line in self.records if line["task_id"] == self.task_ids[kind]]
        return record


@pytest.fixture(scope="module")
def acl_user() -> Iterator[str]:
    """A Redis ACL user with a password, deleted afterwards."""
    check_redis()
    admin = redis.Redis.from_url(STORE_URL)
    admin.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}", "~*", "&*", "+@all")
    yield USER
    admin.execute_command("ACL", "DELUSER", USER)
    admin.close()


@pytest.fixture(scope="module")
def secured(acl_user: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """Run the worker over every kind of message, stop it, and keep its whole output."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    queue = f"test-queue-{uuid.uuid4().hex[:10]}"
    directory = tmp_path_factory.mktemp("secured")
    marker = directory / "unpickled-code-ran"
    launcher = Launcher(directory, prefix)
    app = create_app(Settings(broker_url=BROKER_URL))
    store = RedisStore.from_url(SECURED_STORE_URL, prefix=prefix)
    try:
        worker = launcher.start(
            queue,
            broker_url=BROKER_URL,
            store_url=SECURED_STORE_URL,
            env={"EVIDENCE_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES)},
        )
        bad_schema = secret_message(case_id="secure-bad-schema")
        del bad_schema["grader"]

        def send(name: str, argument: Any) -> str:
            return str(app.send_task(name, args=[argument], queue=queue).id)

        task_ids = {
            "valid": send(SCORE, secret_message(case_id="secure-valid")),
            "conflict": send(
                SCORE,
                secret_message(case_id="secure-conflict", supported_claim_ids=["refund-window"]),
            ),
            "bad-schema": send(SCORE, bad_schema),
            "oversize": send(SCORE, secret_message(case_id="secure-big", answer=ANSWER * 300)),
            "not-a-list": send(SCORE_BATCH, secret_message(case_id="secure-batch")),
            "unknown-task": send("evidence_coverage.unknown", secret_message()),
            "invalid-json": publish_raw(
                app, queue, f'[[{{"answer": "{ANSWER}", "contexts": [{CONTEXT}'.encode()
            ),
        }
        envelope = app.amqp.create_task_message("pickled", SCORE, [], {})
        body = pickle.dumps([[OpensFileWhenUnpickled(marker), secret_message()], {}, EMBED])
        with app.connection_for_write() as connection:
            connection.Producer().publish(
                body,
                exchange="",
                routing_key=queue,
                serializer=None,
                content_type="application/x-python-serialize",
                content_encoding="binary",
                headers=envelope.headers,
                **envelope.properties,
            )
        task_ids["pickle"] = "pickled"
        worker.wait_for(len(task_ids), timeout=120)
        worker.stop()
        yield Secured(worker.output(), worker.records(), task_ids, store, marker)
    finally:
        launcher.stop_all()
        app.close()
        flush_queue(PLAIN_BROKER_URL, queue)
        keys = list(store.client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            store.client.delete(*keys)
        store.close()


def test_a_worker_authenticates_with_credentials_in_its_broker_and_store_urls(
    secured: Secured,
) -> None:
    """Both URLs carry user and password: messages are consumed and outcomes stored."""
    pair = [secured.record("valid"), secured.record("conflict")]

    # Two pool children may take the pair at once: either one can be first.
    assert sorted((line["event"], line["cache"]) for line in pair) == [
        (SCORED, "conflict"),
        (SCORED, "miss"),
    ]
    history = secured.store.history(hash_of(secret_message()))
    assert history is not None
    assert history.total_attempts == 2
    assert len(secured.store.alerts()) == 1


def test_the_password_never_appears_in_the_worker_output(secured: Secured) -> None:
    """The broker URL is logged with its password masked, and nowhere in full."""
    assert PASSWORD not in secured.output
    assert f"Connected to redis://{USER}:**@127.0.0.1:{REDIS_PORT}/12" in secured.output


@pytest.mark.parametrize(
    "secret", SECRETS[1:], ids=["answer", "context", "answer-token", "context-token"]
)
def test_answer_and_context_text_never_appear_in_the_worker_output(
    secured: Secured, secret: str
) -> None:
    """Scored, conflicting, rejected, oversize, undecodable, unknown and pickled: no raw text."""
    assert secret not in secured.output


def test_rejected_messages_carrying_the_text_are_kept_whole_in_dead_letters(
    secured: Secured,
) -> None:
    """The text is not lost, only kept out of logs: each rejected message's dead letter has it."""
    letters = {letter.task_id: letter for letter in secured.store.dead_letters(limit=100)}
    rejected = ["bad-schema", "oversize", "not-a-list", "unknown-task", "invalid-json", "pickle"]

    assert [secured.record(kind)["event"] for kind in rejected] == [REJECTED] * len(rejected)
    assert sorted(letters, key=str) == sorted(secured.task_ids[kind] for kind in rejected)
    for kind in ("bad-schema", "oversize", "not-a-list", "unknown-task", "invalid-json"):
        assert ANSWER in letters[secured.task_ids[kind]].body


def test_a_pickle_message_is_rejected_and_never_unpickled(secured: Secured) -> None:
    """serializer=pickle: one `rejected` record with Celery's reason; its code never ran."""
    record = secured.record("pickle")

    assert (record["event"], record["reason"]) == (REJECTED, PICKLE_REASON)
    assert not secured.marker.exists()
    assert [
        line for line in secured.records if line["event"] == SCORED and line["task_id"] == "pickled"
    ] == []


def test_the_worker_app_accepts_and_sends_json_only() -> None:
    """The app refuses every other content type and serializes tasks and results as JSON."""
    config = create_app(Settings()).conf

    assert (
        config.accept_content,
        config.result_accept_content,
        config.task_serializer,
        config.result_serializer,
    ) == (["json"], ["json"], "json", "json")

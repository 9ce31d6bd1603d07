"""The contract test of worker/runtime/kombu_qos.py (tests/unit/seams/test_kombu_qos.py) on a
real Redis: the same queue items through kombu's Redis transport, with kombu's QoS and with
UnackedJsonQoS, each on an emptied database of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from tests.integration.worker_harness import REDIS_PORT
from tests.unit.seams import test_kombu_qos as contract
from tests.unit.seams import versions_line
from tests.unit.seams.test_kombu_qos import Delivered, FreshRedis, deliver, frozen

pytestmark = pytest.mark.integration

__all__ = ["deliver", "frozen"]  # the contract's fixtures, used here on a real Redis

# Two databases no other test uses: kombu's delivery in one, the fast one in the other.
DATABASES = (6, 7)


@pytest.fixture
def fresh_redis() -> FreshRedis:
    """The next of the two databases, emptied."""
    taken: list[int] = []

    def fresh() -> tuple[str, dict[str, Any]]:
        database = DATABASES[len(taken) % len(DATABASES)]
        taken.append(database)
        url = f"redis://127.0.0.1:{REDIS_PORT}/{database}"
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url, {}

    return fresh


@contextmanager
def versions_on_failure() -> Iterator[None]:
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n{versions_line(contract.CHECKED_AGAINST)}") from error


@pytest.mark.parametrize("name", list(contract.ITEMS))
def test_the_unacked_copy_reads_back_as_kombu_s_own(
    name: str, deliver: Callable[[type[Any], str], Delivered]
) -> None:
    """The unacked hash and index read back as kombu's own, on a real Redis."""
    with versions_on_failure():
        contract.test_the_unacked_copy_reads_back_as_kombu_s_own(name, deliver)


@pytest.mark.parametrize("ending", list(contract.ENDINGS))
@pytest.mark.parametrize("name", list(contract.ITEMS))
def test_a_restored_message_is_the_same_bytes(
    name: str,
    ending: str,
    deliver: Callable[[type[Any], str], Delivered],
    frozen: Callable[[float], None],
) -> None:
    """A requeue, the visibility sweep and a close restore the same bytes, on a real Redis."""
    with versions_on_failure():
        contract.test_a_restored_message_is_the_same_bytes(name, ending, deliver, frozen)

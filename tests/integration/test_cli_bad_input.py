"""The bad-input cases only a real Redis server can answer: a database it does not have (it
has 16), a login it refuses. Same table and checks as tests/unit/cli/test_cli_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_input import CONFIG, HASH, LEDGER_DB, REDIS_HINT, RESULTS, Case, check
from tests.integration.worker_harness import REDIS_PORT

pytestmark = pytest.mark.integration

NO_DB_99 = (
    f"{CONFIG}store redis://127.0.0.1:{REDIS_PORT}/99: the Redis server has no such database: "
    f"{REDIS_HINT}"
)

CASES: dict[str, Case] = {
    "score Redis DB out of range": Case(
        ["score", RESULTS, "--store", f"redis://127.0.0.1:{REDIS_PORT}/99"], NO_DB_99
    ),
    "score Redis DB out of range, password masked": Case(
        ["score", RESULTS, "--store", f"redis://:secret@127.0.0.1:{REDIS_PORT}/99"],
        f"{CONFIG}store redis://:**@127.0.0.1:{REDIS_PORT}/99: the Redis server has no such "
        f"database: {REDIS_HINT}",
    ),
    "score EVIDENCE_STORE_URL Redis DB out of range": Case(
        ["score", RESULTS],
        NO_DB_99,
        env={"EVIDENCE_STORE_URL": f"redis://127.0.0.1:{REDIS_PORT}/99"},
    ),
    "show Redis DB out of range": Case(
        ["show", HASH, "--store", f"redis://127.0.0.1:{REDIS_PORT}/99"], NO_DB_99
    ),
    "alerts Redis DB out of range": Case(
        ["alerts", "--store", f"redis://127.0.0.1:{REDIS_PORT}/99"], NO_DB_99
    ),
    "canary Redis DB out of range": Case(
        ["canary", "--store", f"redis://127.0.0.1:{REDIS_PORT}/99"], NO_DB_99
    ),
    "alerts Redis refuses the login": Case(
        ["alerts", "--store", f"redis://nobody:wrong@127.0.0.1:{REDIS_PORT}/13"],
        f"{CONFIG}store redis://nobody:**@127.0.0.1:{REDIS_PORT}/13: Redis refused the login: "
        "invalid username-password pair or user is disabled.",
    ),
    "publish broker Redis DB out of range": Case(
        ["publish", RESULTS],
        f"{CONFIG}EVIDENCE_BROKER_URL: redis://127.0.0.1:{REDIS_PORT}/99: the Redis server has no "
        f"such database: {REDIS_HINT}",
        env={
            "EVIDENCE_BROKER_URL": f"redis://127.0.0.1:{REDIS_PORT}/99",
            "EVIDENCE_STORE_URL": LEDGER_DB,
        },
    ),
    # The ledger is noted before the first send: its store answers first.
    "publish ledger store Redis DB out of range": Case(
        ["publish", RESULTS],
        f"{CONFIG}store redis://127.0.0.1:{REDIS_PORT}/99: the Redis server has no such database: "
        f"{REDIS_HINT}",
        env={"EVIDENCE_BROKER_URL": f"redis://127.0.0.1:{REDIS_PORT}/99"},
    ),
    "reconcile Redis DB out of range": Case(
        ["reconcile", "--store", f"redis://127.0.0.1:{REDIS_PORT}/99"],
        f"{CONFIG}store redis://127.0.0.1:{REDIS_PORT}/99: the Redis server has no such database: "
        f"{REDIS_HINT}",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_redis_refusal_is_one_line_and_exit_2(case: Case, redis_url: str, tmp_path: Path) -> None:
    """Exit 2 and one exact stderr line naming the store or broker URL, password masked."""
    check(case, tmp_path)

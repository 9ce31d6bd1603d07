"""Where a command reads and writes: the `(store …, broker …)` its summary line ends with,
passwords masked, and --broker checked as EVIDENCE_BROKER_URL is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, Run
from worker.cli.output import located, where

ACCEPTED = "accepted: redis://, rediss://, amqp://, amqps://"
HINT = "use redis://host:port/db or amqp://user:password@host:port/vhost"


@pytest.mark.parametrize(
    ("store", "broker", "said"),
    [
        ("sqlite:///s.db", None, "store sqlite:///s.db"),
        ("redis://:secret@h:6379/0", None, "store redis://:**@h:6379/0"),
        (None, "amqp://u:pw@rabbit/vhost", "broker amqp://u:**@rabbit/vhost"),
        (
            "redis://h:6379/1",
            "redis://u:a@h1:6379/0;redis://u:b@h2:6379/0",
            "store redis://h:6379/1, broker redis://u:**@h1:6379/0;redis://u:**@h2:6379/0",
        ),
    ],
)
def test_where_names_store_and_broker_with_passwords_masked(
    store: str | None, broker: str | None, said: str
) -> None:
    """Each URL of a failover list is masked on its own."""
    assert where(store=store, broker=broker) == said
    assert located("x: 1 row", store=store, broker=broker) == f"x: 1 row ({said})"


@pytest.mark.parametrize(
    "argv",
    [
        ["publish", str(EXAMPLES / "attribution-results.jsonl"), "--broker", "kafka://x"],
        ["reconcile", "--republish", "--broker", "kafka://x"],
        ["dead-letters", "replay", "--all", "--broker", "kafka://x"],
    ],
    ids=lambda argv: argv[0],
)
def test_broker_option_refuses_other_schemes_at_once(
    argv: list[str], cli: Callable[..., Run], store_url: str, tmp_path: Path
) -> None:
    """--broker kafka://x: one line with the accepted schemes, exit 2, before anything is read."""
    run = cli(*argv, "--store", store_url)

    assert (run.code, run.out) == (2, "")
    assert run.err == (
        "evidence-worker: configuration error: --broker: kafka://x: unsupported broker scheme "
        f"'kafka' ({ACCEPTED}): {HINT}\n"
    )


def test_gate_with_a_store_names_it(
    score: Callable[..., Run], one_message_file: Path, cli: Callable[..., Run], store_url: str
) -> None:
    """gate --store reads the store's first required sets: its summary names that store."""
    score(one_message_file)

    run = cli("gate", EXAMPLES / "release-rows.jsonl", "--min-coverage", "0.85",
              "--store", store_url)  # fmt: skip

    assert run.err.endswith(f"; exit 2 (store {store_url})\n")


def test_show_names_the_store_it_read(
    score: Callable[..., Run], one_message_file: Path, cli: Callable[..., Run], store_url: str
) -> None:
    """show HASH: the history on stdout, one line on stderr naming the hash and the store."""
    input_hash = score(one_message_file).lines[0]["input_hash"]

    run = cli("show", input_hash, "--store", store_url)

    assert run.code == 0
    assert run.err == f"show: input hash {input_hash} (store {store_url})\n"

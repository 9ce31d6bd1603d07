"""What the reading commands print for a store: `show` of every hash and every case, `explain`
of every case, `alerts` and `canary --all`, each as (exit code, stdout). A store written by an
earlier version must print the same as it did then (tests/fixtures/store-47f93cb), and a store
written by this version the same as one written by the earlier for the same history.

`python -m tests.integration.store_outputs URL FILE` writes them as JSON (only ever run
with the version that wrote the fixture)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import redis

from worker.cli import main

POLICY = Path(__file__).resolve().parents[2] / "contracts" / "examples" / "policy.toml"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def outputs(url: str, hashes: list[str], cases: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "alerts": run("alerts", "--store", url),
        "canary": run("canary", "--all", "--store", url),
    }
    for input_hash in hashes:
        found[f"show {input_hash}"] = run("show", input_hash, "--store", url)
    for case in cases:
        found[f"show --case {case}"] = run("show", "--case", case, "--store", url)
        found[f"explain --case {case}"] = run(
            "explain", "--case", case, "--store", url, "--policy", str(POLICY)
        )
    return found


def restore_redis_keys(client: redis.Redis, prefix: str, keys: dict[str, Any]) -> None:
    """Write a fixture's Redis keys (redis-keys.json: name -> type and value), each named
    under `prefix` in place of the `evidence` it was written with."""
    for key, stored in keys.items():
        name, value = prefix + key.removeprefix("evidence"), stored["value"]
        if stored["type"] == "hash":
            client.hset(name, mapping=value)
        elif stored["type"] == "list":
            client.rpush(name, *value)
        elif stored["type"] == "zset":
            client.zadd(name, dict(value))
        else:
            assert stored["type"] == "stream", stored["type"]
            for fields in value:
                client.xadd(name, fields)


def cases_of(run_file: Path) -> list[str]:
    return sorted({json.loads(line).get("case_id") or "" for line in run_file.open()} - {""})


if __name__ == "__main__":
    url, hashes_file, cases_file, target = sys.argv[1:5]
    hashes = json.loads(Path(hashes_file).read_text())
    cases = json.loads(Path(cases_file).read_text())
    Path(target).write_text(json.dumps(outputs(url, hashes, cases), indent=1) + "\n")

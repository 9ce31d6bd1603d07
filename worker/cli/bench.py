"""`evidence-worker bench`: what scoring costs per message, against Celery's own floor."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worker.cli.arguments import describe, nonempty, positive_int
from worker.cli.exit_codes import OK
from worker.errors import ConfigurationError, InputError
from worker.settings import Settings, check_broker_url

ALL_PHASES = "noop,score,batch"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "bench",
        **describe(
            "measure drain throughput against Celery's own floor",
            example="bench --repeat 3 --json",
            details="Start a worker, pre-fill a queue, and time its drain for (a) a no-op "
            "task, (b) evidence_coverage.score, (c) score_batch; report msgs/s, µs/msg, "
            "p50/p99 publish-to-record latency, peak RSS and the ratios b/a and c/b. Uses its "
            "own queues and key prefix on the bench broker and deletes them afterwards.",
        ),
    )
    parser.add_argument(
        "--messages", type=positive_int, default=20_000, help="per phase (default 20000)"
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=100,
        help="messages per score_batch (default 100)",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="runs per phase; medians reported with min/max (default 1)",
    )
    parser.add_argument(
        "--pool", choices=["prefork", "solo"], default="prefork", help="(default prefork)"
    )
    parser.add_argument(
        "--concurrency", type=positive_int, default=2, help="pool processes (default 2)"
    )
    parser.add_argument(
        "--broker",
        metavar="URL",
        type=nonempty(str, "use redis://host:port/db"),
        help="broker, and store unless --store, for the run (default: $EVIDENCE_BENCH_BROKER_URL, "
        "else redis://localhost:6379/15)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        type=nonempty(str, "use redis://host:port/db or sqlite:///path"),
        help="the workers' store: a Redis Cluster node's URL, say; its bytes and CPU per "
        "message are reported for a Redis store (default: the broker's Redis)",
    )
    parser.add_argument(
        "--phases",
        default=ALL_PHASES,
        help=f"comma-separated subset of {ALL_PHASES} (default all)",
    )
    parser.add_argument(
        "--worker-checkout",
        metavar="DIR",
        type=Path,
        help="run the worker under test from this checkout of the project (its own code on "
        "PYTHONPATH, this interpreter and packages), fed this checkout's messages: two "
        "versions compared on the same messages (default: this checkout)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="workers export Prometheus metrics as deploy/ runs them (EVIDENCE_METRICS_PORT and "
        "a PROMETHEUS_MULTIPROC_DIR of the run's own): compare with a run without to see the "
        "counters' cost (default: no metrics, as the figures in docs/performance.md)",
    )
    parser.add_argument(
        "--micro", action="store_true", help="only the scoring microbenchmark (no services needed)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.micro:
        from worker.bench.micro import micro

        result = micro()
        print(json.dumps(result) if args.json else _table(result))
        return OK
    from worker.bench.drain import PHASES, Bench, BenchConfig, summarize

    phases = tuple(phase.strip() for phase in args.phases.split(",") if phase.strip())
    unknown = sorted(set(phases) - set(PHASES))
    if not phases:
        raise InputError(f"--phases: no phase named; use {ALL_PHASES} or a part of it")
    if unknown:
        raise InputError(f"--phases: unknown phase(s) {','.join(unknown)}; use {ALL_PHASES}")
    if args.broker is not None:
        try:
            check_broker_url(args.broker)
        except ValueError as error:
            raise ConfigurationError(f"--broker: {error}") from None
    config = BenchConfig(
        messages=args.messages,
        batch_size=args.batch_size,
        repeat=args.repeat,
        pool=args.pool,
        concurrency=args.concurrency,
        phases=phases,
        broker_url=args.broker or settings.bench_broker_url,
        store_url=args.store,
        worker_checkout=_checkout(args.worker_checkout),
        metrics=args.metrics,
    )
    summary = summarize(Bench(config, progress=lambda line: print(line, file=sys.stderr)).run())
    print(json.dumps(summary) if args.json else _table(summary))
    return OK


def _checkout(path: Path | None) -> Path | None:
    """A checkout's absolute path, once it is seen to hold the worker's Celery app."""
    if path is None:
        return None
    if not (path / "worker" / "app.py").is_file():
        raise InputError(f"--worker-checkout: {path} holds no worker/app.py: give a checkout")
    return path.resolve()


def _table(values: dict[str, Any]) -> str:
    width = max(len(key) for key in values)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in values.items() if key != "runs")

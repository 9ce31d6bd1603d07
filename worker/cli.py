"""`evidence-worker`: score, gate, publish, show, alerts, schema. Exit codes per SPEC §7."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from kombu.exceptions import OperationalError

from contracts import Policy, PolicyError, json_schemas, parse_policy, policy_from_threshold
from worker.errors import ConfigurationError, InputError, TransientError
from worker.inputs import read_jsonl
from worker.logging import configure_logging
from worker.progress import Progress
from worker.runs import INVALID, NONDETERMINISM, OK, dumps_line, gate_lines, score_lines
from worker.settings import Settings, load_settings
from worker.stores import ResultStore, open_store

PROG = "evidence-worker"


class HelpfulParser(argparse.ArgumentParser):
    """A usage error prints the full help to stderr and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.print_help(sys.stderr)
        self.exit(INVALID, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        metavar="FILE",
        type=Path,
        help="policy TOML file (default: $EVIDENCE_POLICY_FILE)",
    )
    parser.add_argument(
        "--min-coverage",
        metavar="X",
        help="one-group policy with this threshold, versioned cli:X "
        "(default: $MIN_EVIDENCE_COVERAGE, versioned env:X)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = HelpfulParser(
        prog=PROG,
        description="Explainable evidence-coverage scores: score, gate, inspect.",
        epilog="Exit codes: 0 ok, 1 policy failures, 2 invalid input or rows (also "
        "configuration and usage errors), 3 nondeterminism detected; the highest applies.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=HelpfulParser)
    commands.required = True

    score = commands.add_parser(
        "score",
        help="score a JSON-lines file of AttributionResults in one process",
        description="Score AttributionResult JSON lines with an embedded store: one JSON "
        "record per line on stdout, a summary on stderr. Re-running a file gives cache hits; "
        "a different outcome for the same inputs raises a nondeterminism alert (exit 3).",
    )
    score.add_argument("path", metavar="PATH", help="JSON-lines file, or - for stdin")
    score.add_argument(
        "--store",
        metavar="URL",
        help="sqlite:///file or redis://host:port/db "
        "(default: $EVIDENCE_STORE_URL, else sqlite:///evidence-coverage.sqlite3)",
    )
    _add_policy_options(score)

    gate = commands.add_parser(
        "gate",
        help="check reviewed ReleaseRows against a policy (CI release gate)",
        description="One JSON line per row on stdout. Exit 0 when every blocking row passes, "
        "1 when a valid blocking row is below policy, 2 when any blocking row is invalid. "
        "Non-blocking rows are reported and never change the exit code. Needs a policy.",
    )
    gate.add_argument("path", metavar="PATH", help="JSON-lines file, or - for stdin")
    _add_policy_options(gate)

    show = commands.add_parser("show", help="print the first outcome and every attempt for a hash")
    show.add_argument("input_hash", metavar="HASH")
    show.add_argument("--store", metavar="URL", help="as for score")

    alerts = commands.add_parser(
        "alerts", help="list nondeterminism alerts (exit 3 when there are any)"
    )
    alerts.add_argument("--store", metavar="URL", help="as for score")
    alerts.add_argument(
        "--limit", type=positive_int, default=100, help="newest N alerts (default 100)"
    )

    publish = commands.add_parser(
        "publish",
        help="validate AttributionResults and send them to the broker",
        description="Validate each JSON line, then send it to the queue as an "
        "evidence_coverage.score task (or score_batch with --batch N). Invalid lines are "
        "reported on stderr and not sent (exit 2). Broker: $EVIDENCE_BROKER_URL.",
    )
    publish.add_argument("path", metavar="PATH", help="JSON-lines file, or - for stdin")
    publish.add_argument(
        "--batch",
        type=positive_int,
        default=1,
        metavar="N",
        help="send lists of N messages to evidence_coverage.score_batch (default 1: one task each)",
    )

    bench = commands.add_parser(
        "bench",
        help="measure drain throughput against Celery's own floor",
        description="Start a worker, pre-fill a queue, and time its drain for (a) a no-op "
        "task, (b) evidence_coverage.score, (c) score_batch; report msgs/s, µs/msg, p50/p99 "
        "publish-to-record latency, peak RSS and the ratios b/a and c/b. Uses its own queues "
        "and key prefix on the bench broker and deletes them afterwards.",
    )
    bench.add_argument(
        "--messages", type=positive_int, default=20_000, help="per phase (default 20000)"
    )
    bench.add_argument(
        "--batch-size",
        type=positive_int,
        default=100,
        help="messages per score_batch (default 100)",
    )
    bench.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="runs per phase; medians reported with min/max (default 1)",
    )
    bench.add_argument(
        "--pool", choices=["prefork", "solo"], default="prefork", help="(default prefork)"
    )
    bench.add_argument(
        "--concurrency", type=positive_int, default=2, help="pool processes (default 2)"
    )
    bench.add_argument(
        "--broker",
        metavar="URL",
        help="broker and store for the run (default: $EVIDENCE_BENCH_BROKER_URL, "
        "else redis://localhost:6379/15)",
    )
    bench.add_argument(
        "--phases", default="noop,score,batch", help="comma-separated subset of noop,score,batch"
    )
    bench.add_argument(
        "--micro", action="store_true", help="only the scoring microbenchmark (no services needed)"
    )
    bench.add_argument("--json", action="store_true", help="print one JSON object")

    report = commands.add_parser(
        "report",
        help="aggregate record files per contract version and policy group",
        description="Read JSON-lines records as score and the worker emit them (- for stdin) "
        "and aggregate them per contract version and policy group: counts by status and cache "
        "outcome, mean/min/max over valid rows only, invalid rows counted apart with their top "
        "reasons, owners, policy versions seen. Other log lines are skipped and counted; "
        "unparsable lines are counted as unreadable. Versions are never mixed. Exit 0 when a "
        "report was produced, 2 when PATH is unreadable or holds no records.",
    )
    report.add_argument("path", metavar="PATH", help="JSON-lines record file, or - for stdin")
    report.add_argument("--json", action="store_true", help="print one JSON object")
    report.add_argument(
        "--html",
        metavar="OUT",
        type=Path,
        help="also write a self-contained HTML page (histograms, tables, invalid reasons)",
    )

    canary = commands.add_parser(
        "canary",
        help="re-score stored first outcomes with the installed code (exit 3 on any change)",
        description="The determinism check to run after upgrading Ragas or the metric: "
        "re-score stored first outcomes (a seeded sample, or all) through the worker's path "
        "and Ragas's own .score(); print one JSON line per row that no longer matches "
        "(hash, case_id, stored vs now, versions). Exit 3 on any difference.",
    )
    canary.add_argument("--store", metavar="URL", help="as for score")
    canary.add_argument(
        "--sample",
        type=positive_int,
        default=1000,
        metavar="N",
        help="re-score a uniform sample of N stored outcomes (default 1000)",
    )
    canary.add_argument("--all", action="store_true", help="re-score every stored outcome")
    canary.add_argument("--seed", type=int, default=0, help="sample seed (default 0)")

    schema = commands.add_parser("schema", help="print the published JSON Schemas")
    schema.add_argument("--write", metavar="DIR", type=Path, help="write one file per schema")
    return parser


def resolve_policy(
    args: argparse.Namespace, settings: Settings, *, required: bool
) -> Policy | None:
    """--policy, then --min-coverage, then the environment; gate requires one."""
    if args.policy is not None:
        try:
            text = args.policy.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigurationError(
                f"cannot read policy file {args.policy}: {error.strerror}"
            ) from None
        return parse_policy(text, source=f"policy file {args.policy}")
    if args.min_coverage is not None:
        return policy_from_threshold(args.min_coverage, name="--min-coverage", origin="cli")
    return settings.load_policy(required=required)


def _source_name(path: str) -> str:
    """How messages name an input: '-' reads as stdin."""
    return "stdin" if path == "-" else path


def cmd_score(args: argparse.Namespace, settings: Settings) -> int:
    policy = resolve_policy(args, settings, required=False)
    store = open_store(args.store or settings.embedded_store_url(), settings)
    try:
        progress = Progress("score")
        tally = score_lines(
            read_jsonl(args.path),
            store=store,
            policy=policy,
            max_message_bytes=settings.max_message_bytes,
            progress=progress,
        )
    finally:
        store.close()
    if tally.total == 0:
        raise InputError(f"{_source_name(args.path)} contains no messages")
    print(tally.summary("score", policy) + f" ({progress.elapsed:.1f}s)", file=sys.stderr)
    return tally.exit_code


def cmd_gate(args: argparse.Namespace, settings: Settings) -> int:
    policy = resolve_policy(args, settings, required=True)
    assert policy is not None  # required=True raises instead
    tally = gate_lines(
        read_jsonl(args.path),
        policy=policy,
        write=lambda row: print(dumps_line(row)),
        progress=Progress("gate"),
    )
    if tally.total == 0:
        raise InputError(f"{_source_name(args.path)} contains no rows")
    print(tally.summary("gate", policy), file=sys.stderr)
    return tally.exit_code


def _open_shared_store(args: argparse.Namespace, settings: Settings) -> ResultStore:
    return open_store(args.store or settings.store_url or settings.embedded_store_url(), settings)


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    store = _open_shared_store(args, settings)
    try:
        history = store.history(args.input_hash)
    finally:
        store.close()
    if history is None:
        raise InputError(f"no outcome recorded for input hash {args.input_hash}")
    print(history.model_dump_json(indent=2))
    return OK


def cmd_alerts(args: argparse.Namespace, settings: Settings) -> int:
    store = _open_shared_store(args, settings)
    try:
        alerts = store.alerts(limit=args.limit)
    finally:
        store.close()
    for alert in alerts:
        print(alert.model_dump_json())
    print(f"alerts: {len(alerts)} nondeterminism alert(s)", file=sys.stderr)
    return NONDETERMINISM if alerts else OK


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    from worker.app import create_app
    from worker.publishing import publish_lines

    progress = Progress("publish")
    app = create_app(settings)
    try:
        result = publish_lines(
            read_jsonl(args.path),
            app=app,
            queue=settings.queue,
            batch_size=args.batch,
            max_message_bytes=settings.max_message_bytes,
            on_progress=lambda sent: progress.tick(sent - progress.count),
        )
    finally:
        app.close()  # its broker connection pool
    for number, reason in result.rejected:
        print(f"{PROG} publish: line {number} not sent: {reason}", file=sys.stderr)
    if result.messages == 0 and not result.rejected:
        raise InputError(f"{_source_name(args.path)} contains no messages")
    print(
        f"publish: sent {result.messages} messages in {result.tasks} tasks to queue "
        f"{settings.queue}; {len(result.rejected)} lines rejected",
        file=sys.stderr,
    )
    return INVALID if result.rejected else OK


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    if args.micro:
        from worker.bench_micro import micro

        result = micro()
        print(json.dumps(result) if args.json else _table(result))
        return OK
    from worker.bench import PHASES, Bench, BenchConfig, summarize

    phases = tuple(phase.strip() for phase in args.phases.split(",") if phase.strip())
    unknown = sorted(set(phases) - set(PHASES))
    if unknown or not phases:
        raise InputError(f"--phases: unknown phase(s) {','.join(unknown)}; use noop,score,batch")
    config = BenchConfig(
        messages=args.messages,
        batch_size=args.batch_size,
        repeat=args.repeat,
        pool=args.pool,
        concurrency=args.concurrency,
        phases=phases,
        broker_url=args.broker or settings.bench_broker_url,
    )
    summary = summarize(Bench(config, progress=lambda line: print(line, file=sys.stderr)).run())
    print(json.dumps(summary) if args.json else _table(summary))
    return OK


def _table(values: dict[str, Any]) -> str:
    width = max(len(key) for key in values)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in values.items() if key != "runs")


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from worker.report import build_report, render_text

    source = _source_name(args.path)
    report = build_report(read_jsonl(args.path), source=source)
    if report.records == 0:
        raise InputError(
            f"{source} contains no evidence_coverage records "
            f"({sum(report.skipped.values())} other lines, {report.unreadable} unreadable)"
        )
    if args.html is not None:
        from worker.report_html import render_html

        try:
            args.html.write_text(render_html(report), encoding="utf-8")
        except OSError as error:
            raise InputError(f"cannot write {args.html}: {error.strerror}") from None
        print(f"report: wrote {args.html}", file=sys.stderr)
    print(report.model_dump_json() if args.json else render_text(report))
    return OK


def cmd_canary(args: argparse.Namespace, settings: Settings) -> int:
    from worker.canary import run_canary

    store = _open_shared_store(args, settings)
    try:
        result = run_canary(
            store.first_outcomes(), size=None if args.all else args.sample, seed=args.seed
        )
    finally:
        store.close()
    for difference in result.differences:
        print(dumps_line(difference.as_json()))
    print(
        f"canary: re-scored {result.checked} of {result.seen} stored first outcomes; "
        f"{len(result.differences)} differ",
        file=sys.stderr,
    )
    return NONDETERMINISM if result.differences else OK


def cmd_schema(args: argparse.Namespace, settings: Settings) -> int:
    schemas = json_schemas()
    if args.write is None:
        print(json.dumps(schemas, indent=2, sort_keys=True))
        return OK
    args.write.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (args.write / name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    print(f"schema: wrote {len(schemas)} files to {args.write}", file=sys.stderr)
    return OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], int]] = {
    "score": cmd_score,
    "gate": cmd_gate,
    "show": cmd_show,
    "alerts": cmd_alerts,
    "publish": cmd_publish,
    "bench": cmd_bench,
    "canary": cmd_canary,
    "schema": cmd_schema,
    "report": cmd_report,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors print one line and exit 2, never a traceback."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        configure_logging(settings.log_format, schema=settings.log_schema)
        return COMMANDS[args.command](args, settings)
    except (ConfigurationError, PolicyError) as error:
        return _fail(f"configuration error: {error}")
    except InputError as error:
        return _fail(str(error))
    except TransientError as error:
        return _fail(f"store unavailable: {error}")
    except OperationalError as error:
        return _fail(f"broker unreachable ({error}); check EVIDENCE_BROKER_URL")
    except KeyboardInterrupt:
        return _fail("interrupted")


def _fail(message: str, code: int = INVALID) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def run() -> Any:  # pragma: no cover - console-script shim
    sys.exit(main())

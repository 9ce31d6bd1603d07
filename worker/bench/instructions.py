"""Instructions per message of `score`, this checkout against another, counted by callgrind.

`python -m worker.bench.instructions --base-checkout PATH` writes two files of bench messages
(`drain.sample_messages`, N1 and N2 of them), runs `score` on each under `valgrind
--tool=callgrind`, once per checkout, each on a fresh store, and reports (Ir(N2) - Ir(N1)) /
(N2 - N1): what one more message costs, start-up and imports cancelled. Instruction counts
barely move from run to run, so one run each is a measurement, where throughput needs pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from worker.bench.drain import forget_keys, sample_messages

DEFAULT_SIZES = (200, 1200)
DEFAULT_STORE = "sqlite"
# Stamped on every message, as bench stamps its own at publishing: a fixed time, so that the
# files are the same from run to run.
PRODUCED_AT = "2026-12-01T00:00:00+00:00"
THIS_CHECKOUT = Path(__file__).resolve().parents[2]
# callgrind ends its output with "totals: N" (and heads it with "summary: N", older versions).
_TOTAL = re.compile(r"^(?:totals|summary):\s+(\d+)", re.MULTILINE)


class CallgrindError(Exception):
    """Raised when callgrind's output holds no total or the run under it failed."""


def callgrind_total(text: str) -> int:
    """The instructions a callgrind output file counts in all (its first event, Ir)."""
    match = _TOTAL.search(text)
    if match is None:
        raise CallgrindError("no 'totals:' or 'summary:' line in the callgrind output")
    return int(match.group(1))


def per_message(small: tuple[int, int], large: tuple[int, int]) -> float:
    """Instructions per message from two runs given as (messages, instructions): the
    difference over the difference, so what every run pays once (start-up) cancels."""
    (n1, ir1), (n2, ir2) = small, large
    if n2 == n1:
        raise ValueError("the two runs need different message counts")
    return (ir2 - ir1) / (n2 - n1)


@dataclass(frozen=True)
class Measurement:
    """One checkout's counts: total instructions per file, and per message."""

    checkout: str
    instructions: dict[int, int]
    per_message: float


def write_messages(path: Path, count: int) -> None:
    """`count` bench messages as JSON lines: the first `count` of the same generator, so the
    smaller file is the larger one's beginning."""
    with path.open("w", encoding="utf-8") as out:
        for message in sample_messages(count):
            out.write(json.dumps({**message, "produced_at": PRODUCED_AT}) + "\n")


def score_command(messages: Path, store_url: str, callgrind_out: Path) -> list[str]:
    """`score` on one file under callgrind, as the checkout's own module (`worker.cli`)."""
    return [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={callgrind_out}",
        sys.executable,
        "-m",
        "worker.cli",
        "score",
        str(messages),
        "--store",
        store_url,
    ]


def run_environment(checkout: Path, base: Mapping[str, str], key_prefix: str) -> dict[str, str]:
    """The environment of one run: the checkout first on the path, no EVIDENCE_* setting of
    the caller's but the key prefix, and a fixed hash seed (set orders, so counts, repeat)."""
    environment = {name: value for name, value in base.items() if not name.startswith("EVIDENCE_")}
    environment.update(PYTHONPATH=str(checkout), PYTHONHASHSEED="0", EVIDENCE_KEY_PREFIX=key_prefix)
    return environment


class Counter:
    """Runs `score` under callgrind on fresh stores in one scratch folder."""

    def __init__(self, folder: Path, *, store: str, progress: Callable[[str], None]) -> None:
        self.folder = folder
        self.store = store
        self.progress = progress

    def measure(self, checkout: Path, files: Mapping[int, Path]) -> Measurement:
        counts = {count: self._instructions(checkout, path) for count, path in files.items()}
        small, large = sorted(counts.items())[:2]
        return Measurement(str(checkout), counts, per_message(small, large))

    def _instructions(self, checkout: Path, messages: Path) -> int:
        run = uuid.uuid4().hex[:8]
        prefix = f"instructions-{run}"
        store_url = (
            f"sqlite:///{self.folder / f'{run}.sqlite3'}" if self.store == "sqlite" else self.store
        )
        output = self.folder / f"callgrind-{checkout.name}-{messages.stem}-{run}.out"
        self.progress(f"instructions: {checkout.name}: score {messages.name} under callgrind")
        try:
            with (self.folder / f"{run}.stderr").open("w+", encoding="utf-8") as errors:
                completed = subprocess.run(
                    score_command(messages, store_url, output),
                    cwd=checkout,
                    env=run_environment(checkout, os.environ, prefix),
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    check=False,
                )
                # score exits 1 to 3 on what it scored (policy, invalid rows, nondeterminism).
                if completed.returncode not in (0, 1, 2, 3):
                    errors.seek(0)
                    tail = "".join(errors.readlines()[-5:])
                    raise CallgrindError(
                        f"score in {checkout} exited {completed.returncode}:\n{tail}"
                    )
        finally:
            if self.store != "sqlite":
                forget_keys(self.store, prefix)
        total = callgrind_total(output.read_text(encoding="utf-8"))
        self.progress(f"instructions: {messages.name}: {total:,} Ir ({output.name})")
        return total


def compare(
    checkouts: Iterable[Path],
    *,
    sizes: tuple[int, int] = DEFAULT_SIZES,
    store: str = DEFAULT_STORE,
    progress: Callable[[str], None] = lambda line: None,
    keep: Path | None = None,
) -> list[Measurement]:
    """Each checkout's instructions per message of `score` on the same two files; `keep`: a
    folder for the files, stores and callgrind outputs (for callgrind_annotate), else a
    temporary one."""
    with contextlib.ExitStack() as stack:
        if keep is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="instructions-")))
        else:
            folder = keep
            folder.mkdir(parents=True, exist_ok=True)
        files = {count: folder / f"messages-{count}.jsonl" for count in sizes}
        for count, path in files.items():
            write_messages(path, count)
        counter = Counter(folder, store=store, progress=progress)
        return [counter.measure(checkout.resolve(), files) for checkout in checkouts]


def report(measurements: list[Measurement]) -> dict[str, Any]:
    """The figures as one object: each checkout's, and the ratio of this one's to the base's."""
    summary: dict[str, Any] = {"checkouts": [asdict(m) for m in measurements]}
    if len(measurements) == 2:
        current, base = measurements
        summary["ratio"] = round(current.per_message / base.per_message, 3)
    return summary


def _table(summary: dict[str, Any]) -> str:
    lines = [
        f"{m['checkout']}: {m['per_message']:,.0f} instructions per message"
        f" ({', '.join(f'{n} messages {ir:,}' for n, ir in m['instructions'].items())})"
        for m in summary["checkouts"]
    ]
    if "ratio" in summary:
        lines.append(f"ratio (this checkout / base): {summary['ratio']}")
    return "\n".join(lines)


def _sizes(text: str) -> tuple[int, int]:
    try:
        small, large = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("give two message counts, as 200,1200") from None
    if not 0 < small < large:
        raise argparse.ArgumentTypeError("give two counts, the first smaller, both above 0")
    return small, large


def _store(text: str) -> str:
    if text == "sqlite" or text.startswith(("redis://", "rediss://")):
        return text
    raise argparse.ArgumentTypeError("use sqlite or redis://host:port/db")


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog="python -m worker.bench.instructions",
        description="Count the instructions per message of `evidence-worker score` under "
        "callgrind: two files of bench messages, each scored on a fresh store, the difference "
        "of the totals over the difference of the counts (start-up cancels). With "
        "--base-checkout, the same for another checkout of the project and the ratio.",
        epilog="example: python -m worker.bench.instructions --base-checkout ../base-3d30027 "
        "(git worktree add --detach ../base-3d30027 3d30027); needs valgrind; progress on "
        "stderr",
    )
    command.add_argument(
        "--base-checkout",
        metavar="PATH",
        type=Path,
        help="another checkout of the project (run with this interpreter, its folder first "
        "on PYTHONPATH); default: this checkout alone",
    )
    command.add_argument(
        "--messages",
        metavar="N1,N2",
        type=_sizes,
        default=DEFAULT_SIZES,
        help="messages in the two files (default 200,1200)",
    )
    command.add_argument(
        "--store",
        metavar="STORE",
        type=_store,
        default=DEFAULT_STORE,
        help="sqlite (a fresh file per run, the default) or redis://host:port/db (keys under "
        "a fresh prefix per run, deleted after)",
    )
    command.add_argument(
        "--keep",
        metavar="DIR",
        type=Path,
        help="keep the message files, stores and callgrind outputs in DIR (default: a "
        "temporary folder, deleted after)",
    )
    command.add_argument("--json", action="store_true", help="print one JSON object")
    return command


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    checkouts = [THIS_CHECKOUT]
    if args.base_checkout is not None:
        if not (args.base_checkout / "worker" / "cli").is_dir():
            parser().error(f"--base-checkout: {args.base_checkout} holds no worker/cli/")
        checkouts.append(args.base_checkout)
    try:
        measurements = compare(
            checkouts,
            sizes=args.messages,
            store=args.store,
            keep=args.keep,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except (CallgrindError, OSError) as error:
        print(f"instructions: {error}", file=sys.stderr)
        return 1
    summary = report(measurements)
    print(json.dumps(summary) if args.json else _table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

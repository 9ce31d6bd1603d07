"""Prometheus metrics, correct under Celery's prefork pool.

Pool children write to per-process files in PROMETHEUS_MULTIPROC_DIR; the main process serves
their sum on EVIDENCE_METRICS_PORT. prometheus_client picks its storage when it is first
imported, and a Celery CLI plugin (Flower's) imports it as `celery` starts, so deployments set
the variable in the environment (deploy/); without it, prepare() sets one at worker_init, before
the pool forks, which serves only where no plugin imported prometheus_client first. Other
processes (CLI, health checks) never import it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# Coverage is a share of claims: ten even bins, finer around the thresholds teams pick (0.85).
COVERAGE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)
# From a publish to its record: well under a second on an idle worker, up to hours when a
# backlog or a store outage holds messages in the broker.
PUBLISH_TO_RECORD_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
CACHES = ("miss", "hit", "conflict")
NO_LABEL = "none"  # the label value for a record field that is null (no owner, no group)


def known_message_labels() -> list[tuple[str, str, str]]:
    """Every (status, cache, owner) a worker's record can carry (SPEC §9's owners: a valid row
    that does not fail has none, unless contract drift gave it to evaluation data; a failed
    row is release-rule's when an observation window's previous rule passed it; a review row,
    within its group's review_band (SPEC §12), is release-rule's unless its contract drifted;
    a rejected message has no cache). Each is exported at 0 from a pool process's start, so
    that increase() and rate() see the first message of each kind instead of a series that
    appears already at 1."""
    labels = [
        (status, cache, owner)
        for status in ("pass", "scored")
        for cache in CACHES
        for owner in ("none", "evaluation-data")
    ]
    labels += [
        ("fail", cache, owner)
        for cache in CACHES
        for owner in ("attribution", "retrieval", "product", "evaluation-data", "release-rule")
    ]
    labels += [
        ("review", cache, owner)
        for cache in CACHES
        for owner in ("release-rule", "evaluation-data")
    ]
    labels += [("invalid", cache, "evaluation-data") for cache in (*CACHES, "none")]
    return labels


# The directory prepare() made for this process, the only one cleanup() may remove.
_created: list[str] = []


def prepare(port: int | None) -> None:
    """Give this worker (and, by inheritance, its pool children) an empty multiprocess dir.

    A directory set in the environment is created when missing (an emptyDir or a tmpfs on /tmp
    hides what the image made there) and emptied of the value files an earlier run left: a
    restarted container keeps its /tmp, and the collector would add a dead run's counters to
    this one's and serve its live gauges (store_unavailable) for ever. Raises OSError when the
    directory cannot be made or emptied. Without the variable, a temporary one is made.
    """
    if port is None:
        return
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory:
        os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="evidence-metrics-")
        _created.append(os.environ[MULTIPROC_ENV])
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    # The collector sums every *.db file in the directory, so each one is this worker's to
    # clear; nothing else is touched.
    for stale in path.glob("*.db"):
        if stale.is_file():
            stale.unlink()


def single_process_storage() -> bool:
    """True when prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set (a
    Celery plugin such as Flower imports it as the CLI starts): every process then counts in
    its own memory and the summed /metrics would be empty."""
    values = sys.modules.get("prometheus_client.values")
    return values is not None and getattr(values, "ValueClass", None) is values.MutexValue


SINGLE_PROCESS_PROBLEM = (
    "EVIDENCE_METRICS_PORT is set, but prometheus_client was imported before the worker could "
    f"set {MULTIPROC_ENV} (a Celery plugin such as Flower imports it), so /metrics would stay "
    f"empty: set {MULTIPROC_ENV} in its environment to a directory of this worker's own (it is "
    "created if missing and emptied at start), as deploy/Dockerfile does"
)


def _child(children: dict[tuple[str, ...], Any], metric: Any, values: tuple[str, ...]) -> Any:
    """`metric.labels(*values)`, kept in `children` after the first call (label values are
    text here already, as labels() would make them)."""
    child = children.get(values)
    if child is None:
        child = children[values] = metric.labels(*values)
    return child


class Metrics:
    """The worker's counters and histogram; every method is a no-op when disabled."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        if not enabled:
            return
        from prometheus_client import Counter, Gauge, Histogram

        self.messages = Counter(
            "evidence_coverage_messages",
            "Messages recorded, by status, cache outcome and owner (SPEC §9; none: no owner)",
            ["status", "cache", "owner"],
        )
        for status, cache, owner in known_message_labels():
            self.messages.labels(status=status, cache=cache, owner=owner)
        self.rejected = Counter(
            "evidence_coverage_rejected", "Messages rejected before scoring (dead-lettered)"
        )
        self.alerts = Counter(
            "evidence_coverage_nondeterminism_alerts", "Same input hash, different outcome"
        )
        self.redeliveries = Counter(
            "evidence_coverage_redeliveries",
            "Deliveries of a message already recorded (a duplicate or a redelivery after the "
            "write landed): replays, recorded once and counted here alone",
        )
        self.drift_alerts = Counter(
            "evidence_coverage_contract_drift_alerts",
            "Same contract version and case ID, another required claim set",
        )
        # Per grader (SPEC §10): a re-grade is a record whose cache is hit or conflict, a flip
        # one whose cache is conflict. A grader's two series start at 0 with its first record
        # in this process, so that increase() sees its first re-grade and flip.
        grader_labels = ["grader_name", "grader_version", "grader_model"]
        self.regrades = Counter(
            "evidence_coverage_regrades",
            "Records of inputs judged before (cache hit or conflict), by grader",
            grader_labels,
        )
        self.flips = Counter(
            "evidence_coverage_flips",
            "Re-grades whose outcome differed from the first (cache conflict), by grader",
            grader_labels,
        )
        self._graders: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        # An observation window (SPEC §12): each record decided under the previous rule too,
        # by its status then and now; a series appears with a window's first record.
        self.previous_rule = Counter(
            "evidence_coverage_previous_rule_decisions",
            "Records decided under an observation window's previous policy too, by the status "
            "it gave (previous_status) and the status now",
            ["previous_status", "status"],
        )
        self._previous_children: dict[tuple[str, ...], Any] = {}
        # Each labelled series' child, by its label values in the metric's label order: what
        # labels() returns, without its lock and its keyword handling on every record.
        self._message_children: dict[tuple[str, ...], Any] = {}
        self._coverage_children: dict[tuple[str, ...], Any] = {}
        self._threshold_children: dict[tuple[str, ...], Any] = {}
        # Per contract version (versions are never mixed, SPEC §7) and policy group; a label
        # value per contract version a deployment ever sees, a handful in practice.
        self.coverage = Histogram(
            "evidence_coverage_value",
            "Coverage of valid rows as recorded (invalid rows have none), by contract version "
            "and policy group",
            ["contract_version", "policy_group"],
            buckets=COVERAGE_BUCKETS,
        )
        self.threshold = Gauge(
            "evidence_coverage_threshold",
            "The policy threshold the latest record of a policy group was decided with",
            ["policy_group"],
            multiprocess_mode="mostrecent",
        )
        self.publish_to_record = Histogram(
            "evidence_coverage_publish_to_record_seconds",
            "From `publish` (or the client) handing a message to the broker to its record, "
            "for messages that carry the publish time",
            buckets=PUBLISH_TO_RECORD_BUCKETS,
        )
        self.latency = Histogram(
            "evidence_coverage_scoring_seconds",
            "Time to score and record one message",
            buckets=LATENCY_BUCKETS,
        )
        # 1 while any live pool process is waiting for the store to take its write.
        self.store_unavailable = Gauge(
            "evidence_coverage_store_unavailable",
            "1 while a task waits out a store outage, else 0",
            multiprocess_mode="livemax",
        )
        self.store_unavailable.set(0)
        # Set by the beat's reconcile task, in whichever pool process runs it.
        self.unrecorded = Gauge(
            "evidence_coverage_ledger_unrecorded",
            "Published messages neither recorded nor dead-lettered that the beat's self-heal "
            "left: older than EVIDENCE_RECONCILE_OLDER_THAN_SECONDS and, while it republishes, "
            "EVIDENCE_RECONCILE_AFTER_SECONDS",
            multiprocess_mode="mostrecent",
        )
        self.republished = Counter(
            "evidence_coverage_republished",
            "Unrecorded messages the beat's reconcile task sent again",
        )
        self.republish_limit = Counter(
            "evidence_coverage_republish_limit",
            "Unrecorded messages the beat's reconcile task dead-lettered, sent again "
            "EVIDENCE_MAX_REPUBLISHES times without a record",
        )

    def observe(
        self,
        records: Iterable[Any],
        *,
        alerts: int,
        seconds_per_message: float,
        drift_alerts: int = 0,
        published_at: Sequence[datetime | None] = (),
        replayed: Sequence[bool] = (),
    ) -> None:
        """Count one task's records (ScoreRecord-like: status, cache, owner, event, value,
        contract_version, policy_group, threshold, recorded_at, grader_*); `published_at`,
        per record, when its message was published (None or missing: not known); `replayed`,
        per record, True for a replay of a recorded write, counted as a redelivery alone
        (missing: not)."""
        if not self.enabled:
            return
        for position, record in enumerate(records):
            if position < len(replayed) and replayed[position]:
                self.redeliveries.inc()
                continue
            if record.event == "evidence_coverage.rejected":
                self.rejected.inc()
            _child(
                self._message_children,
                self.messages,
                (record.status, record.cache or NO_LABEL, record.owner or NO_LABEL),
            ).inc()
            self.latency.observe(seconds_per_message)
            group = record.policy_group or NO_LABEL
            if record.value is not None and record.contract_version is not None:
                _child(
                    self._coverage_children, self.coverage, (record.contract_version, group)
                ).observe(record.value)
            if record.threshold is not None:
                _child(self._threshold_children, self.threshold, (group,)).set(record.threshold)
            if record.grader_name is not None:
                self._count_regrade(record)
            previous = getattr(record, "previous_status", None)
            if previous is not None:
                _child(self._previous_children, self.previous_rule, (previous, record.status)).inc()
            published = published_at[position] if position < len(published_at) else None
            if published is not None and record.recorded_at is not None:
                # Clocks of two hosts: a publisher ahead of the worker would give a negative
                # age, which a histogram cannot hold; it is counted as immediate.
                age = (record.recorded_at - published).total_seconds()
                self.publish_to_record.observe(max(age, 0.0))
        if alerts:
            self.alerts.inc(alerts)
        if drift_alerts:
            self.drift_alerts.inc(drift_alerts)

    def _count_regrade(self, record: Any) -> None:
        """A grader's re-grade and flip counters, made (at 0) on its first record here."""
        grader = (record.grader_name, record.grader_version, record.grader_model)
        counters = self._graders.get(grader)
        if counters is None:
            counters = (self.regrades.labels(*grader), self.flips.labels(*grader))
            self._graders[grader] = counters
        if record.cache == "hit":
            counters[0].inc()
        elif record.cache == "conflict":
            counters[0].inc()
            counters[1].inc()

    def ledger_unrecorded(self, count: int) -> None:
        if self.enabled:
            self.unrecorded.set(count)

    def healed(self, *, republished: int, dead_lettered: int) -> None:
        if self.enabled:
            self.republished.inc(republished)
            self.republish_limit.inc(dead_lettered)

    def store_waiting(self, waiting: bool) -> None:
        if self.enabled:
            self.store_unavailable.set(1 if waiting else 0)


def serve(port: int, host: str = "0.0.0.0") -> None:
    """Serve the sum over all pool processes on `host`:`port` (called in the main process)."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    start_http_server(port, addr=host, registry=registry)


def forget_process(pid: int) -> None:
    """Drop a dead pool child's live gauges (counters keep their totals)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def cleanup() -> None:
    """Remove the multiprocess dir prepare() created, never one the operator set."""
    while _created:
        shutil.rmtree(_created.pop(), ignore_errors=True)

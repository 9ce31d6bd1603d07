"""One settings object, read from the environment once at start-up and passed down."""

from __future__ import annotations

import os
import re
import ssl
from datetime import date
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, FilePath, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts import Policy, PolicyError, parse_policy, policy_from_threshold
from worker.constants import EMPTY_FILE_PROBLEM
from worker.errors import ConfigurationError

DEFAULT_BROKER_URL = "redis://localhost:6379/0"
DEFAULT_SQLITE_PATH = "evidence-coverage.sqlite3"
REDIS_SCHEMES = ("redis", "rediss")
REDIS_URL_HINT = "use redis://host:port/db, db a database number the server has (0-15 by default)"
SEEDS_HINT = "name a Redis Cluster's seed nodes as redis://host1:port1,host2:port2/0"
BROKER_URL_HINT = "use redis://host:port/db or amqp://user:password@host:port/vhost"
# The brokers the worker is built and tested for. kombu knows more (kafka://, sqs://, and
# memory://, a queue that dies with the process): each is refused at once, not on first send.
BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps")
_DB_PATH = re.compile(r"/?|/[0-9]+")
# The webhook's bounds, here so WebhookSender's defaults and the settings' are one number.
WEBHOOK_DEADLINE_SECONDS = 5.0
WEBHOOK_DRAIN_SECONDS = 5.0
DEAD_LETTER_MAX_BYTES = 65_536
BROKER_SOCKET_TIMEOUT_SECONDS = 10.0
BROKER_HEALTH_CHECK_SECONDS = 10
LEDGER_TTL_SECONDS = 86_400
RECONCILE_OLDER_THAN_SECONDS = 600
RECONCILE_EVERY_SECONDS = 300
RECONCILE_AFTER_SECONDS = 900
MAX_REPUBLISHES = 3
HEARTBEAT_SECONDS = 5.0
STORE_ANNOUNCEMENT_TTL_SECONDS = 60
REPLICA_TIMEOUT_MS = 1_000
# WAIT blocks the store's connection: well under its 10 s socket timeout (stores/redis.py).
MAX_REPLICA_TIMEOUT_MS = 5_000


class Settings(BaseSettings):
    """Every EVIDENCE_* variable (and MIN_EVIDENCE_COVERAGE) in one place. Each field's
    description is its row on docs/settings.md (`make docs` writes the page)."""

    model_config = SettingsConfigDict(
        env_prefix="EVIDENCE_", extra="ignore", frozen=True, populate_by_name=True
    )

    broker_url: str = Field(
        default=DEFAULT_BROKER_URL,
        description="Celery broker; `amqp://` (RabbitMQ), `rediss://` and `amqps://` work too",
    )
    store_url: str | None = Field(
        default=None,
        description="result store: `redis://…`, `rediss://…` or `sqlite:///path`; a Redis "
        "Cluster's URL may name several seed nodes, `redis://host1:7000,host2:7001/0`, tried in "
        "turn as the store opens. Unset: the "
        "worker, `publish`, `reconcile` and the client use the broker's Redis (the default "
        "broker's for an AMQP broker); `score`, `show`, `explain`, `alerts` and `canary` use "
        f"`sqlite:///{DEFAULT_SQLITE_PATH}`",
    )
    policy_file: Path | None = Field(
        default=None,
        description="policy TOML (see `contracts/examples/policy.toml`); wins over "
        "`MIN_EVIDENCE_COVERAGE`. With no policy at all, `score` and the worker run "
        "report-only (valid rows get status `scored`); `gate` always needs one",
    )
    min_coverage: str | None = Field(
        default=None,
        validation_alias="MIN_EVIDENCE_COVERAGE",
        description="a one-group policy `default` with this threshold, version `env:<value>`",
    )
    alert_webhook_url: str | None = Field(
        default=None,
        description="POST each alert (both kinds) here: best effort, never blocks a record",
    )
    alert_webhook_timeout_seconds: float = Field(
        default=2.0, gt=0, description="per-request timeout of the webhook (3 tries)"
    )
    alert_webhook_deadline_seconds: float = Field(
        default=WEBHOOK_DEADLINE_SECONDS,
        gt=0,
        description="total time one webhook POST may take (connect, send, answer), however "
        "slowly the receiver trickles bytes",
    )
    alert_webhook_drain_seconds: float = Field(
        default=WEBHOOK_DRAIN_SECONDS,
        ge=0,
        description="at shutdown, how long queued alerts may still be POSTed. Each alert not "
        "delivered (queue full, failed, shutdown) is a WARNING "
        "`evidence_coverage.webhook_undelivered` line with its `input_hash` and `raised_at`, "
        "and stays in the alert stream (`alerts --since`)",
    )
    dead_letter_max_bytes: int = Field(
        default=DEAD_LETTER_MAX_BYTES,
        gt=0,
        description="bytes of a rejected body its dead letter keeps (cut at a character "
        "boundary), beside the whole body's SHA-256 and size",
    )
    log_format: str = Field(default="json", description="`json` (one object per line) or `console`")
    log_schema: Literal["otel", "ecs"] = Field(
        default="otel",
        description="the shape of each JSON line: `otel` (our names plus OpenTelemetry's) or "
        "`ecs` (an ECS document); see [Logs](observability.md#logs)",
    )
    log_raw_text: bool = Field(
        default=False,
        description="for debugging: each record line also carries `answer_redacted` and "
        "`contexts_redacted` (document ID and text), redacted as excerpts are and cut to "
        "`EVIDENCE_EXCERPT_MAX_CHARS`. Off, no line carries answer or context text; fields "
        "named `answer`, `contexts`, `text`, `prompt` or `body` are blanked whoever logs them",
    )
    keep_excerpts: bool = Field(
        default=False,
        description="each stored attempt keeps, per citation, the cited answer span "
        "(`excerpt`), redacted: e-mail addresses, payment card numbers (Luhn-checked) and "
        "phone numbers are replaced (`worker/pipeline/redaction.py`); never in log lines, "
        "alert lines or webhook payloads",
    )
    excerpt_max_chars: int = Field(
        default=280,
        gt=0,
        description="the longest excerpt kept, and the longest text a line carries with "
        "`EVIDENCE_LOG_RAW_TEXT` (cut after redaction)",
    )
    result_ttl_seconds: int | None = Field(
        default=None,
        gt=0,
        description="how long a first outcome and its attempts are kept, from its first "
        "attempt; past it the same inputs start a new history, with no alert. Unset: forever. "
        "See [operations.md](operations.md#retention)",
    )
    attempts_ttl_seconds: int | None = Field(
        default=None,
        gt=0,
        description="how long a hash's later attempts are kept (the first outcome stays, so "
        "nondeterminism is still found): on Redis, until none has come for this long; on "
        "SQLite, what `evidence-worker prune` drops. At most `EVIDENCE_RESULT_TTL_SECONDS`. "
        "Unset: as long as the first outcome",
    )
    store_cluster: bool = Field(
        default=False,
        description="`true`: the store URL names a node of a Redis Cluster, and a worker or "
        "command refuses to start (one line, exit 2) when that node does not answer or is a "
        "single Redis. `false`: the kind is asked as the store opens, and a server that does "
        "not answer is taken for a single Redis and waited for, as in any outage",
    )
    store_min_replicas: int | None = Field(
        default=None,
        ge=0,
        description="Redis store (a single server, or each master of a Redis Cluster): "
        "replicas each write must reach (Redis `WAIT`) before its "
        "message is acknowledged; a write not confirmed in time is retried like an outage, "
        "its message unacknowledged. Unset: 1 while the server (on a cluster: that master) "
        "has a replica in sync, else 0, asked again every 10 s and at the next write after a "
        "wait fell short or the server failed, so a promoted master with no replica takes "
        "writes at once (`0`: no wait; a set count is waited for whatever the server has). See "
        "[operations.md](operations.md#no-acknowledged-outcome-lost-on-failover)",
    )
    store_replica_timeout_ms: int = Field(
        default=REPLICA_TIMEOUT_MS,
        gt=0,
        le=MAX_REPLICA_TIMEOUT_MS,
        description="how long a write waits for those replicas, in milliseconds",
    )
    visibility_timeout_seconds: int = Field(
        default=300,
        gt=0,
        description="redelivery delay for a dead worker's unacknowledged messages",
    )
    broker_socket_timeout_seconds: float = Field(
        default=BROKER_SOCKET_TIMEOUT_SECONDS,
        gt=0,
        description="longest wait for a Redis broker's reply or connect; past it the worker "
        "reconnects instead of hanging",
    )
    broker_health_check_seconds: int = Field(
        default=BROKER_HEALTH_CHECK_SECONDS,
        ge=1,
        description="how often Redis broker connections are checked: a consumer whose broker "
        "stopped answering reconnects within about twice this",
    )
    store_retry_window_seconds: float | None = Field(
        default=None,
        ge=0,
        description="how long a task waits out a store outage before it hands its message "
        "back to the broker; must be below the visibility timeout. Unset: 80% of it",
    )
    ledger_ttl_seconds: int = Field(
        default=LEDGER_TTL_SECONDS,
        ge=0,
        description="how long the publish ledger keeps a published message that no record "
        "has closed (`0`: publishers keep no ledger); see `reconcile`",
    )
    reconcile_older_than_seconds: int = Field(
        default=RECONCILE_OLDER_THAN_SECONDS,
        gt=0,
        description="the beat's reconcile task counts messages published longer ago than "
        "this and never recorded (make it longer than the queue's longest wait)",
    )
    reconcile_every_seconds: int = Field(
        default=RECONCILE_EVERY_SECONDS,
        gt=0,
        description="how often Celery beat runs the reconcile task",
    )
    reconcile_after_seconds: int = Field(
        default=RECONCILE_AFTER_SECONDS,
        ge=0,
        description="the beat's reconcile task sends again each message published longer ago "
        "than this and never recorded (`0`: it only counts them); make it longer than the "
        "queue's longest wait",
    )
    max_republishes: int = Field(
        default=MAX_REPUBLISHES,
        ge=1,
        description="a message the beat's reconcile task sent again this many times without "
        "a record is dead-lettered instead of sent once more",
    )
    max_attempts_per_hash: int = Field(
        default=100,
        ge=2,
        description="attempts kept per input hash (the newest; the first is always kept)",
    )
    max_message_bytes: int = Field(
        default=1_048_576,
        gt=0,
        description="a larger message is rejected before it is parsed",
    )
    max_batch_bytes: int = Field(
        default=33_554_432,
        gt=0,
        description="the same bound for a whole `score_batch` body",
    )
    max_deliveries: int = Field(
        default=5,
        ge=1,
        description="a message redelivered more often without completing (its worker keeps "
        "dying; a redelivery that records drops the count) is "
        "dead-lettered; a task that keeps failing on a bug records its failing messages as "
        "rejected on that redelivery",
    )
    key_prefix: str = Field(
        default="evidence", description="prefix of every Redis key of the store"
    )
    bench_broker_url: str = Field(
        default="redis://localhost:6379/15",
        description="broker and store `bench` uses; it cleans up its own queues and keys",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="serve Prometheus metrics on this port; see "
        "[Metrics](observability.md#metrics). Unset: no metrics",
    )
    metrics_host: str = Field(
        default="0.0.0.0",
        min_length=1,
        description="the address the metrics endpoint binds: `127.0.0.1` keeps it on this "
        "machine (behind a sidecar or a local scraper)",
    )
    heartbeat_file: Path | None = Field(
        default=None,
        description="the file the worker's consumer touches, from its own event loop, while "
        "it consumes; `evidence-worker health` checks its age (`worker/runtime/health.py` reads "
        "this variable itself). Unset: no heartbeat; the image sets "
        "`/tmp/evidence-coverage-worker.heartbeat`",
    )
    heartbeat_seconds: float = Field(
        default=HEARTBEAT_SECONDS,
        gt=0,
        description="how often the heartbeat file is touched; give `health --max-age` a few "
        "times this",
    )
    queue: str = Field(
        default="attribution-results",
        description="the queue the worker consumes and `publish` sends to",
    )
    store_announcement_ttl_seconds: int = Field(
        default=STORE_ANNOUNCEMENT_TTL_SECONDS,
        gt=0,
        description="a worker announces its store on the broker, per queue it consumes, and "
        "renews the announcement every third of this; a worker whose store is not the one "
        "announced refuses to start (one line, exit 2). An announcement outlives the last "
        "worker that made it by at most this: then a worker with another store may start. See "
        "[operations.md](operations.md#one-queue-one-store)",
    )
    tls_ca_file: FilePath | None = Field(
        default=None,
        description="PEM CA bundle that every `rediss://` and `amqps://` server's certificate "
        "is checked against. Unset: the system CAs",
    )
    tls_cert_file: FilePath | None = Field(
        default=None,
        description="client certificate (PEM) for mutual TLS, on the same connections",
    )
    tls_key_file: FilePath | None = Field(
        default=None,
        description="its private key, when it is not in `EVIDENCE_TLS_CERT_FILE`",
    )

    @field_validator("broker_url", "bench_broker_url")
    @classmethod
    def _usable_broker_url(cls, value: str) -> str:
        check_broker_url(value)
        return value

    @field_validator("policy_file", mode="before")
    @classmethod
    def _policy_file_named(cls, value: Any) -> Any:
        if value == "":  # Path("") would be the working directory
            raise ValueError("empty: name a policy TOML file, or unset it")
        return value

    @field_validator("heartbeat_file", mode="before")
    @classmethod
    def _heartbeat_file_named(cls, value: Any) -> Any:
        if value == "":  # as worker/runtime/health.py's own reading of the variable
            raise ValueError(EMPTY_FILE_PROBLEM)
        return value

    @field_validator("store_url")
    @classmethod
    def _usable_store_url(cls, value: str | None) -> str | None:
        # The scheme is open_store's to check (it says which ones there are); a Redis URL's
        # database is checked here so a typo fails at start-up, not as DB 0.
        if value and urlsplit(value).scheme in REDIS_SCHEMES:
            redis_db(value)
        return value

    @field_validator("broker_url")
    @classmethod
    def _no_ssl_parameters_on_amqp(cls, value: str) -> str:
        # kombu hands ssl_* query parameters to py-amqp under names it does not accept, so
        # the worker would fail on every connection attempt with a TypeError.
        parts = urlsplit(value)
        if parts.scheme in {"amqp", "amqps"} and any(
            name.startswith("ssl_") for name, _ in parse_qsl(parts.query)
        ):
            raise ValueError(
                "an AMQP URL cannot carry ssl_* query parameters: use amqps:// with "
                "EVIDENCE_TLS_CA_FILE (and EVIDENCE_TLS_CERT_FILE / EVIDENCE_TLS_KEY_FILE)"
            )
        return value

    @model_validator(mode="after")
    def _window_inside_visibility_timeout(self) -> Settings:
        # A task still waiting when the timeout passes would see its message delivered again.
        if self.store_retry_window >= self.visibility_timeout_seconds:
            raise ValueError(
                "EVIDENCE_STORE_RETRY_WINDOW_SECONDS must be below "
                "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS"
            )
        return self

    @model_validator(mode="after")
    def _attempts_inside_result_ttl(self) -> Settings:
        # Attempts kept longer than their first outcome would be dropped with it anyway.
        ttl, attempts = self.result_ttl_seconds, self.attempts_ttl_seconds
        if ttl is not None and attempts is not None and attempts > ttl:
            raise ValueError(
                "EVIDENCE_ATTEMPTS_TTL_SECONDS must be at most EVIDENCE_RESULT_TTL_SECONDS"
            )
        return self

    @model_validator(mode="after")
    def _key_needs_certificate(self) -> Settings:
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise ValueError("EVIDENCE_TLS_KEY_FILE needs EVIDENCE_TLS_CERT_FILE")
        return self

    @field_validator("log_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in {"json", "console"}:
            raise ValueError("must be 'json' or 'console'")
        return value

    @property
    def excerpt_chars(self) -> int | None:
        """How much of each cited span a stored attempt keeps: None when excerpts are off."""
        return self.excerpt_max_chars if self.keep_excerpts else None

    @property
    def store_retry_window(self) -> float:
        """EVIDENCE_STORE_RETRY_WINDOW_SECONDS, else most of the visibility timeout."""
        if self.store_retry_window_seconds is not None:
            return self.store_retry_window_seconds
        return self.visibility_timeout_seconds * 0.8

    @property
    def result_store_url(self) -> str:
        """The worker's store: EVIDENCE_STORE_URL, else the broker's Redis."""
        if self.store_url:
            return self.store_url
        if self.broker_url.startswith(("redis://", "rediss://")):
            return self.broker_url
        return DEFAULT_BROKER_URL

    def redis_tls_options(self) -> dict[str, Any]:
        """redis-py's TLS arguments for a rediss:// broker or store: the certificate is always
        checked (kombu alone would not check it), against EVIDENCE_TLS_CA_FILE if set."""
        return {
            "ssl_cert_reqs": ssl.CERT_REQUIRED,
            **self._tls_files(ca="ssl_ca_certs", cert="ssl_certfile", key="ssl_keyfile"),
        }

    def amqp_tls_options(self) -> dict[str, Any]:
        """py-amqp's TLS arguments for an amqps:// broker: the certificate is checked, and
        server_hostname None makes kombu check it names the URL's host."""
        return {
            "cert_reqs": ssl.CERT_REQUIRED,
            "server_hostname": None,
            **self._tls_files(ca="ca_certs", cert="certfile", key="keyfile"),
        }

    def _tls_files(self, *, ca: str, cert: str, key: str) -> dict[str, str]:
        """The TLS files that are set, under one client library's argument names."""
        files = {ca: self.tls_ca_file, cert: self.tls_cert_file, key: self.tls_key_file}
        return {name: str(path) for name, path in files.items() if path is not None}

    def embedded_store_url(self) -> str:
        """The one-process commands' store: EVIDENCE_STORE_URL, else a local SQLite file."""
        return self.store_url or f"sqlite:///{DEFAULT_SQLITE_PATH}"

    def load_policy(self, *, required: bool = False) -> Policy | None:
        """The configured policy: the file wins over MIN_EVIDENCE_COVERAGE; None is report-only."""
        if self.policy_file is not None:
            return read_policy_file(self.policy_file)
        if self.min_coverage is not None:
            return policy_from_threshold(self.min_coverage)
        if required:
            raise ConfigurationError(
                "no policy configured: set MIN_EVIDENCE_COVERAGE (e.g. 0.85) or "
                "EVIDENCE_POLICY_FILE, or pass --policy / --min-coverage"
            )
        return None


def load_settings() -> Settings:
    """Read the environment; a bad value is a ConfigurationError naming the variable."""
    from pydantic import ValidationError

    try:
        return Settings()
    except ValidationError as error:
        details = error.errors()[0]
        # pydantic puts "Value error, " before the text of a ValueError raised in a validator.
        message = details["msg"].removeprefix("Value error, ")
        if details["loc"]:
            message = f"EVIDENCE_{str(details['loc'][0]).upper()}: {message}"
        raise ConfigurationError(message) from None


def read_policy_file(path: Path) -> Policy:
    """The policy in a TOML file (--policy or EVIDENCE_POLICY_FILE), or a ConfigurationError
    naming the file and what is wrong with it."""
    shown = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigurationError(f"cannot read policy file {shown}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigurationError(
            f"policy file {shown} is not UTF-8 text ({error.reason} at byte {error.start}): "
            "save it as UTF-8"
        ) from None
    return parse_policy(
        text,
        source=f"policy file {shown}",
        read_previous=lambda previous: _read_previous(path, previous),
    )


def window_warning(policy: Policy | None, path: Path | None, today: date) -> str | None:
    """The WARNING of an observation window that ended before `today` (a UTC date), naming the
    previous policy file to remove as found from the policy file `path` (SPEC §12); None
    while it runs, and for a policy without one. Commands print it, the worker logs it."""
    from contracts.policy import window_ended

    if policy is None or policy.observe is None or path is None:
        return None
    previous = display_path(previous_policy_path(path, policy.observe.previous))
    return window_ended(policy, today, previous_path=previous)


def previous_policy_path(path: Path, previous: str) -> Path:
    """The file an `[observe] previous` names: relative to the policy file that names it."""
    return path.parent / previous


def _read_previous(path: Path, previous: str) -> Policy:
    """The previous policy of an observation window, as a PolicyError when it cannot be read
    (parse_policy() says which key named it); its own [observe] is not followed."""
    found = previous_policy_path(path, previous)
    shown = display_path(found)
    try:
        text = found.read_text(encoding="utf-8")
    except OSError as error:
        raise PolicyError(f"cannot read {shown}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise PolicyError(
            f"{shown} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    return parse_policy(text, source=f"policy file {shown}", previous=True)


def display_path(path: str | Path) -> str:
    """A path as a message may print it: bytes that are not UTF-8 shown as \\xff, not as
    the lone surrogates Python decoded them to (which stderr would print as \\udcff)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def masked_url(url: str) -> str:
    """A URL as it may be printed: its password, if any, replaced by **."""
    scheme, separator, rest = url.partition("://")
    credentials, at, location = rest.rpartition("@")
    if not (separator and at and ":" in credentials):
        return display_path(url)
    user = credentials.split(":", 1)[0]
    return display_path(f"{scheme}://{user}:**@{location}")


def redis_seeds(url: str) -> list[str]:
    """One URL per node a Redis store URL names. `redis://[user:password@]host1:port1,host2:port2/0`
    names several seed nodes of one Redis Cluster (redis-py's `startup_nodes`), each reached
    with the URL's user, password, database and query; a URL of one host is itself."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in REDIS_SCHEMES:
        return [url]
    cut = min((rest.find(mark) for mark in "/?#" if mark in rest), default=len(rest))
    location, tail = rest[:cut], rest[cut:]
    credentials, at, hosts = location.rpartition("@")
    if "," not in hosts:
        return [url]
    return [f"{scheme}://{credentials}{at}{host}{tail}" for host in hosts.split(",")]


def redis_db(url: str) -> int:
    """The database number of a redis:// or rediss:// URL (0 when it names none).

    ValueError, saying what to write, for a port or database that is not a number: redis-py
    and kombu would otherwise use DB 0 for /abc or /0/x without a word, or fail deep inside.
    A URL of several seed nodes (redis_seeds()) is checked node by node.
    """
    seeds = redis_seeds(url)
    if len(seeds) > 1:
        for seed in seeds:
            if not urlsplit(seed).hostname:
                raise ValueError(f"{masked_url(url)}: a seed node has no host: {SEEDS_HINT}")
        databases = [redis_db(seed) for seed in seeds]  # each node's checked
        return databases[0]
    parts = urlsplit(url)
    try:
        _ = parts.port  # parsing it is the check
    except ValueError:
        raise ValueError(
            f"{masked_url(url)}: the port is not a number from 1 to 65535: {REDIS_URL_HINT}"
        ) from None
    query_db = dict(parse_qsl(parts.query)).get("db")
    if query_db is not None and not (query_db.isascii() and query_db.isdigit()):
        raise ValueError(f"{masked_url(url)}: db={query_db!r} is not a number: {REDIS_URL_HINT}")
    if not _DB_PATH.fullmatch(parts.path):
        raise ValueError(
            f"{masked_url(url)}: database {parts.path[1:]!r} is not a number: {REDIS_URL_HINT}"
        )
    return int(query_db or parts.path[1:] or 0)


def check_broker_url(url: str) -> None:
    """ValueError unless each ;-separated URL names one of BROKER_SCHEMES (and, for Redis, a
    numbered database): kombu would fail on the first publish instead, or not at all (memory://
    "sends" into this process)."""
    if not url:
        raise ValueError(f"empty: {BROKER_URL_HINT}, or unset it for the default")
    for alternate in url.split(";"):
        scheme, separator, _ = alternate.partition("://")
        if not separator or scheme not in BROKER_SCHEMES:
            accepted = ", ".join(f"{name}://" for name in BROKER_SCHEMES)
            problem = (
                f"unsupported broker scheme {scheme!r} (accepted: {accepted})"
                if separator
                else "not a URL"
            )
            raise ValueError(f"{masked_url(alternate)}: {problem}: {BROKER_URL_HINT}")
        if scheme in REDIS_SCHEMES:
            redis_db(alternate)

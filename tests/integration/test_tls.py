"""TLS with credentials: rediss:// and amqps:// brokers, a rediss:// store, a private CA.

A throwaway CA signs a certificate for 127.0.0.1 and localhost. A private redis-server speaks
only TLS and wants a password; socat puts TLS in front of the local RabbitMQ. Real workers
score through them, a wrong or missing CA is refused with the certificate problem named, and
the password appears in nothing a worker or the command line writes. Fails, never skips, when
redis-server, openssl, socat or RabbitMQ is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection, pools

from contracts.record_models import SCORED
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    AMQP_URL,
    POLL_SECONDS,
    STOP_TIMEOUT_SECONDS,
    Launcher,
    Worker,
    check_first_outcomes,
    check_rabbitmq,
    free_port,
    send_scores,
)
from worker.cli import main
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores import open_store
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration
# The machine's RabbitMQ, one module at a time across processes (worker_harness.rabbitmq_turn).
rabbitmq_turn = harness.rabbitmq_turn

PASSWORD = f"tls-s3cret-{uuid.uuid4().hex[:10]}"
CERTIFICATE_FAILED = "CERTIFICATE_VERIFY_FAILED"
START_TIMEOUT_SECONDS = 15.0
# The score is ready in well under a second; the rest is the worker importing Ragas.
RECORDS_TIMEOUT_SECONDS = 60.0

CA_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {name}
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
"""
SERVER_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
"""
CLIENT_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class Certificates:
    ca: Path  # signed the server's and the client's certificates
    other_ca: Path  # a CA that did not: the "wrong CA"
    server_cert: Path
    server_key: Path
    client_cert: Path  # for mutual TLS
    client_key: Path


@dataclass(frozen=True)
class Servers:
    """The TLS endpoints of one module's run; the mutual ones want a client certificate."""

    certificates: Certificates
    redis_port: int
    amqps_port: int
    mutual_redis_port: int
    mutual_amqps_port: int

    def redis_url(self, db: int, query: str = "", *, mutual: bool = False) -> str:
        port = self.mutual_redis_port if mutual else self.redis_port
        return f"rediss://:{PASSWORD}@127.0.0.1:{port}/{db}{query}"

    def amqps_url(self, *, mutual: bool = False) -> str:
        port = self.mutual_amqps_port if mutual else self.amqps_port
        return f"amqps://guest:guest@127.0.0.1:{port}//"


def require(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        pytest.fail(f"these tests need {program} on PATH", pytrace=False)
    return path


def openssl(directory: Path, *args: str) -> None:
    subprocess.run(
        [require("openssl"), *args], cwd=directory, check=True, capture_output=True, timeout=30
    )


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    config = directory / f"{name}.cnf"
    config.write_text(CA_CONFIG.format(name=name))
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    openssl(
        directory,
        *("req", "-x509", *EC_KEY, "-days", "1", "-config", str(config), "-extensions", "ca"),
        *("-keyout", str(key), "-out", str(cert)),
    )
    return cert, key


def make_leaf(directory: Path, name: str, extensions: str, ca: Path, ca_key: Path) -> Path:
    """name.pem, signed by `ca`, and its key name.key."""
    request, ext = directory / f"{name}.csr", directory / f"{name}.ext"
    ext.write_text(extensions)
    openssl(
        directory,
        *("req", "-new", *EC_KEY, "-subj", f"/CN={name}"),
        *("-keyout", f"{name}.key", "-out", str(request)),
    )
    openssl(
        directory,
        *("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key)),
        *("-CAcreateserial", "-days", "1", "-extfile", str(ext), "-out", f"{name}.pem"),
    )
    return directory / f"{name}.pem"


def make_certificates(directory: Path) -> Certificates:
    """A CA, the server certificate it signs for 127.0.0.1 and localhost, a client
    certificate, and an unrelated CA."""
    ca, ca_key = make_ca(directory, "test-ca")
    other_ca, _ = make_ca(directory, "other-ca")
    server = make_leaf(directory, "server", SERVER_EXTENSIONS, ca, ca_key)
    client = make_leaf(directory, "client", CLIENT_EXTENSIONS, ca, ca_key)
    return Certificates(
        ca=ca,
        other_ca=other_ca,
        server_cert=server,
        server_key=server.with_suffix(".key"),
        client_cert=client,
        client_key=client.with_suffix(".key"),
    )


def start_process(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM its process group (socat forks one child per connection), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT_SECONDS)
            return


def wait_until_up(
    process: subprocess.Popen[bytes], log: Path, what: str, check: Callable[[], Any]
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        try:
            check()
            return
        except (OSError, redis.ConnectionError):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what} did not start:\n{log.read_text('utf-8', 'replace')[-2000:]}")
            time.sleep(POLL_SECONDS)


def start_tls_redis(
    directory: Path, certificates: Certificates, *, mutual: bool
) -> tuple[int, subprocess.Popen[bytes]]:
    """redis-server with TLS only (no plain port) and a password; no persistence."""
    port = free_port()
    log = directory / f"redis-tls-{port}.log"
    process = start_process(
        [
            require("redis-server"),
            *("--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"),
            *("--tls-cert-file", str(certificates.server_cert)),
            *("--tls-key-file", str(certificates.server_key)),
            *("--tls-ca-cert-file", str(certificates.ca)),
            *("--tls-auth-clients", "yes" if mutual else "no"),
            *("--requirepass", PASSWORD, "--save", "", "--appendonly", "no"),
            *("--daemonize", "no", "--dir", str(directory)),
        ],
        log,
    )
    client = redis.Redis(
        port=port,
        password=PASSWORD,
        ssl=True,
        ssl_ca_certs=str(certificates.ca),
        ssl_certfile=str(certificates.client_cert),
        ssl_keyfile=str(certificates.client_key),
        socket_connect_timeout=1,
    )
    with contextlib.closing(client):
        wait_until_up(process, log, f"TLS redis-server on port {port}", client.ping)
    return port, process


def start_tls_proxy(
    directory: Path, certificates: Certificates, *, mutual: bool
) -> tuple[int, subprocess.Popen[bytes]]:
    """socat: TLS on a free port, plain AMQP to the local RabbitMQ behind it."""
    port = free_port()
    log = directory / f"socat-{port}.log"
    verify = f"verify=1,cafile={certificates.ca}" if mutual else "verify=0"
    process = start_process(
        [
            require("socat"),
            f"OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,"
            f"cert={certificates.server_cert},key={certificates.server_key},{verify}",
            "TCP:127.0.0.1:5672",
        ],
        log,
    )

    def connect() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    wait_until_up(process, log, f"socat TLS proxy on port {port}", connect)
    return port, process


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Certificates, the TLS Redis servers and TLS proxies to RabbitMQ; stopped afterwards."""
    check_rabbitmq()
    directory = tmp_path_factory.mktemp("tls")
    certificates = make_certificates(directory)
    started: list[subprocess.Popen[bytes]] = []

    def start(starter: Callable[..., tuple[int, subprocess.Popen[bytes]]], mutual: bool) -> int:
        port, process = starter(directory, certificates, mutual=mutual)
        started.append(process)
        return port

    try:
        yield Servers(
            certificates,
            redis_port=start(start_tls_redis, False),
            amqps_port=start(start_tls_proxy, False),
            mutual_redis_port=start(start_tls_redis, True),
            mutual_amqps_port=start(start_tls_proxy, True),
        )
    finally:
        for process in started:
            stop_process(process)


@dataclass(frozen=True)
class Setup:
    """One running worker and the settings a publisher or reader of its store needs."""

    worker: Worker
    settings: Settings

    @property
    def store_url(self) -> str:
        return self.settings.result_store_url


def worker_setups(servers: Servers, launcher: Launcher, amqp_queue: str) -> dict[str, Setup]:
    """Start every worker at once: each spends seconds importing Ragas, so they overlap."""
    ca, other_ca = servers.certificates.ca, servers.certificates.other_ca
    in_url = f"?ssl_cert_reqs=required&ssl_ca_certs={ca}"
    plans: dict[str, tuple[str, str, str, Path | None]] = {
        # name: queue, broker URL, store URL, EVIDENCE_TLS_CA_FILE
        "ca-in-url": ("tls-url", servers.redis_url(0, in_url), servers.redis_url(1, in_url), None),
        "ca-setting": ("tls-setting", servers.redis_url(2), servers.redis_url(2), ca),
        "amqps": (amqp_queue, servers.amqps_url(), servers.redis_url(3), ca),
        "wrong-ca": ("tls-wrong-ca", servers.redis_url(4), servers.redis_url(4), other_ca),
    }
    setups = {}
    for name, (queue, broker_url, store_url, ca_file) in plans.items():
        env = {} if ca_file is None else {"EVIDENCE_TLS_CA_FILE": str(ca_file)}
        worker = launcher.start(
            queue,
            broker_url=broker_url,
            store_url=store_url,
            pool="solo" if name == "wrong-ca" else "prefork",
            env=env,
        )
        settings = Settings(
            broker_url=broker_url,
            store_url=store_url,
            key_prefix=launcher.key_prefix,
            tls_ca_file=ca_file,
        )
        setups[name] = Setup(worker, settings)
    return setups


@pytest.fixture(scope="module")
def workers(
    servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Setup]]:
    """The module's workers by name; all stopped (at once) and the AMQP queue deleted after."""
    launcher = Launcher(tmp_path_factory.mktemp("workers"), key_prefix="tls")
    amqp_queue = f"test-queue-{uuid.uuid4().hex[:10]}"
    try:
        yield worker_setups(servers, launcher, amqp_queue)
    finally:
        for worker in launcher.started:  # warm shutdowns in parallel, not one after another
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
        for worker in launcher.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(STOP_TIMEOUT_SECONDS)
        launcher.stop_all()  # SIGKILLs whatever is left of each process group
        with Connection(AMQP_URL, connect_timeout=3) as connection:
            connection.default_channel.queue_delete(amqp_queue)
            connection.default_channel.exchange_delete(amqp_queue)


@pytest.fixture
def publisher() -> Iterator[Callable[[Settings], Celery]]:
    """Factory: a publishing Celery app for these settings; closed afterwards."""
    made: list[Celery] = []

    def make(settings: Settings) -> Celery:
        made.append(create_app(settings))
        return made[-1]

    yield make
    for app in made:
        app.close()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run `evidence-worker ARGS` in this process (cli.main) with these EVIDENCE_* settings."""

    def run(*args: str, env: dict[str, str]) -> Run:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        # kombu's process-wide connection pools key a broker by URL and credentials, not by
        # TLS options: without this, a connection an earlier test opened with the right CA
        # would be reused here. A real run is a fresh process with an empty pool.
        pools.reset()
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


def assert_scored_through(
    setup: Setup, publisher: Callable[[Settings], Celery], messages: list[dict[str, Any]]
) -> None:
    """Send `messages`; each gets one `miss` record and a first outcome in the TLS store."""
    send_scores(publisher(setup.settings), setup.worker.queue, messages)
    records = setup.worker.wait_for(len(messages), timeout=RECORDS_TIMEOUT_SECONDS)
    assert sorted((line["event"], line["case_id"], line["cache"]) for line in records) == sorted(
        (SCORED, message["case_id"], "miss") for message in messages
    )
    store = open_store(setup.store_url, setup.settings)
    assert isinstance(store, RedisStore)
    try:
        assert len(check_first_outcomes(store, messages, records)) == len(messages)
    finally:
        store.close()


def assert_no_password(output: str) -> None:
    assert output.strip(), "nothing captured: the check below would prove nothing"
    assert PASSWORD not in output


def distinct(message_dict: Callable[..., dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    return [
        message_dict(case_id=f"{tag}-{n}", answer=f"Returns within 30 days. [{tag} {n}]")
        for n in range(3)
    ]


def test_rediss_broker_and_store_with_the_ca_in_the_url(
    workers: dict[str, Setup],
    publisher: Callable[[Settings], Celery],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """rediss://:password@host:port/db?ssl_cert_reqs=required&ssl_ca_certs=CA, both ways."""
    setup = workers["ca-in-url"]

    assert_scored_through(setup, publisher, distinct(message_dict, "ca-in-url"))

    assert_no_password(setup.worker.output())


def test_rediss_broker_and_store_with_evidence_tls_ca_file(
    workers: dict[str, Setup],
    publisher: Callable[[Settings], Celery],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """Plain rediss://:password@host:port/db URLs and the CA in EVIDENCE_TLS_CA_FILE."""
    setup = workers["ca-setting"]

    assert_scored_through(setup, publisher, distinct(message_dict, "ca-setting"))

    assert_no_password(setup.worker.output())


def test_amqps_broker_with_a_rediss_store(
    workers: dict[str, Setup],
    publisher: Callable[[Settings], Celery],
    message_dict: Callable[..., dict[str, Any]],
    servers: Servers,
) -> None:
    """amqps://user:password@host:port// and EVIDENCE_TLS_CA_FILE; the store on TLS Redis."""
    setup = workers["amqps"]

    assert_scored_through(setup, publisher, distinct(message_dict, "amqps"))

    connected = [
        line["event"]
        for line in setup.worker.lines()
        if str(line.get("event")).startswith("Connected to")
    ]
    assert connected == [f"Connected to amqps://guest:**@127.0.0.1:{servers.amqps_port}//"]
    assert_no_password(setup.worker.output())


def test_a_worker_given_the_wrong_ca_names_the_certificate_problem(
    workers: dict[str, Setup], servers: Servers
) -> None:
    """It keeps retrying (the broker may be fixed), logging why, never with the password."""
    worker = workers["wrong-ca"].worker

    lines = worker.wait_until(
        lambda lines: any("Cannot connect to" in str(line.get("event")) for line in lines),
        timeout=RECORDS_TIMEOUT_SECONDS,
        what="a connection error",
    )

    error = next(line for line in lines if "Cannot connect to" in str(line.get("event")))
    assert error["level"] == "error"
    assert str(error["event"]).startswith(
        f"consumer: Cannot connect to rediss://:**@127.0.0.1:{servers.redis_port}/4: "
    )
    assert CERTIFICATE_FAILED in error["event"]
    assert worker.alive()
    assert_no_password(worker.output())


@pytest.mark.parametrize("command", ["show", "alerts"])
@pytest.mark.parametrize("ca", ["wrong", "unset"])
def test_the_cli_refuses_a_store_it_cannot_verify(
    servers: Servers, cli: Callable[..., Run], command: str, ca: str
) -> None:
    """Certificates are checked by default: the system CAs do not know a private CA either."""
    env = {"EVIDENCE_STORE_URL": servers.redis_url(5)}
    if ca == "wrong":
        env["EVIDENCE_TLS_CA_FILE"] = str(servers.certificates.other_ca)
    args = ["show", "0" * 64] if command == "show" else ["alerts"]

    run = cli(*args, env=env)

    assert run.code == 2
    assert run.stderr.startswith("evidence-worker: store unavailable: Redis unreachable: Error ")
    assert CERTIFICATE_FAILED in run.stderr
    assert "Traceback" not in run.stderr
    assert_no_password(run.stdout + run.stderr)


@pytest.mark.parametrize("broker", ["rediss", "amqps"])
@pytest.mark.parametrize("ca", ["wrong", "unset"])
def test_publish_refuses_a_broker_it_cannot_verify(
    servers: Servers,
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
    *,
    broker: str,
    ca: str,
) -> None:
    """Nothing is sent to a broker whose certificate fails: exit 2, the problem named."""
    env = {
        "EVIDENCE_BROKER_URL": servers.redis_url(6) if broker == "rediss" else servers.amqps_url(),
        "EVIDENCE_STORE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite3'}",  # a ledger that opens
        "EVIDENCE_QUEUE": f"tls-unsent-{uuid.uuid4().hex[:10]}",
    }
    if ca == "wrong":
        env["EVIDENCE_TLS_CA_FILE"] = str(servers.certificates.other_ca)
    path = write_jsonl([message_dict(case_id=f"{broker}-unsent")])

    run = cli("publish", str(path), env=env)

    assert run.code == 2
    assert run.stderr.startswith("evidence-worker: broker unreachable (")
    assert CERTIFICATE_FAILED in run.stderr
    assert "Traceback" not in run.stderr
    assert_no_password(run.stdout + run.stderr)


@pytest.fixture
def amqp_queue() -> Iterator[str]:
    """A queue name of this test's own; deleted from RabbitMQ afterwards (over plain AMQP)."""
    name = f"tls-unsent-{uuid.uuid4().hex[:10]}"
    yield name
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        connection.default_channel.queue_delete(name)
        connection.default_channel.exchange_delete(name)


@pytest.mark.parametrize("target", ["store", "rediss-broker", "amqps-broker"])
@pytest.mark.parametrize("certificate", [True, False], ids=["client-cert", "no-client-cert"])
def test_mutual_tls_presents_evidence_tls_cert_file(
    servers: Servers,
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    amqp_queue: str,
    redis_url: str,
    key_prefix: str,
    *,
    target: str,
    certificate: bool,
) -> None:
    """A server that wants a client certificate gets EVIDENCE_TLS_CERT_FILE's, or refuses us."""
    env = {"EVIDENCE_TLS_CA_FILE": str(servers.certificates.ca), "EVIDENCE_QUEUE": amqp_queue}
    if certificate:
        env["EVIDENCE_TLS_CERT_FILE"] = str(servers.certificates.client_cert)
        env["EVIDENCE_TLS_KEY_FILE"] = str(servers.certificates.client_key)
    if target == "store":
        env["EVIDENCE_STORE_URL"] = servers.redis_url(7, mutual=True)
        args = ["alerts"]
    else:
        env["EVIDENCE_BROKER_URL"] = (
            servers.redis_url(7, mutual=True)
            if target == "rediss-broker"
            else servers.amqps_url(mutual=True)
        )
        if target == "amqps-broker":  # the publish ledger: the test's own keys, not DB 0's
            env.update({"EVIDENCE_STORE_URL": redis_url, "EVIDENCE_KEY_PREFIX": key_prefix})
        args = ["publish", str(write_jsonl([message_dict(case_id=f"{target}-mutual")]))]

    run = cli(*args, env=env)

    assert (run.code, "Traceback" in run.stderr) == (0 if certificate else 2, False), run.stderr
    assert_no_password(run.stdout + run.stderr)


def test_an_amqp_url_with_ssl_query_parameters_is_a_configuration_error(
    cli: Callable[..., Run],
) -> None:
    """kombu would hand them to py-amqp under names it rejects, on every connection attempt."""
    run = cli(
        "alerts",
        env={"EVIDENCE_BROKER_URL": f"amqps://guest:{PASSWORD}@127.0.0.1:5671//?ssl_ca_certs=ca"},
    )

    assert run.code == 2
    assert run.stderr == (
        "evidence-worker: configuration error: EVIDENCE_BROKER_URL: an AMQP URL "
        "cannot carry ssl_* query parameters: use amqps:// with EVIDENCE_TLS_CA_FILE "
        "(and EVIDENCE_TLS_CERT_FILE / EVIDENCE_TLS_KEY_FILE)\n"
    )


@pytest.mark.parametrize("ca", ["wrong", "unset"])
def test_publish_sends_nothing_when_its_ledger_store_fails_verification(
    servers: Servers,
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    ca: str,
) -> None:
    """The ledger (the broker's Redis, as the worker's store) is written before any send: a
    certificate it cannot verify stops the publish there, in one line."""
    env = {
        "EVIDENCE_BROKER_URL": servers.redis_url(6),
        "EVIDENCE_QUEUE": f"tls-unsent-{uuid.uuid4().hex[:10]}",
    }
    if ca == "wrong":
        env["EVIDENCE_TLS_CA_FILE"] = str(servers.certificates.other_ca)
    path = write_jsonl([message_dict(case_id="ledger-unverified")])

    run = cli("publish", str(path), env=env)

    assert run.code == 2
    assert run.stderr.startswith("evidence-worker: store unavailable: Redis unreachable: ")
    assert run.stderr.endswith("; check --store or EVIDENCE_STORE_URL\n")
    assert CERTIFICATE_FAILED in run.stderr
    assert_no_password(run.stdout + run.stderr)

"""deploy/k8s/: objects valid against Kubernetes' schemas, the Procfile's command, probes on
the light health command, secrets, metrics, a writable /tmp, the PDB and KEDA scaling."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import ROOT
from tests.factories import procfile_worker
from tests.unit.project.deploy_files import (
    K8S,
    celery_command,
    compose,
    dockerfile_healthcheck,
    health_command,
    image_environment,
    image_heartbeat_file,
    k8s_objects,
    worker_container,
    yaml_documents,
)
from worker.observability.metrics import MULTIPROC_ENV
from worker.settings import Settings

NOT_APPLIED = {"kustomization.yaml", "secret.example.yaml"}


# Kubernetes' own kinds; KEDA's (ScaledObject, TriggerAuthentication) have no schema there, and
# kustomization.yaml is kustomize's file, not an object.
CORE_KINDS = {"ConfigMap", "Deployment", "PodDisruptionBudget", "Secret"}


@pytest.mark.parametrize("kind", sorted(CORE_KINDS))
def test_k8s_objects_validate_strictly_against_kubernetes_schemas(kind: str) -> None:
    """Each object validates against the Kubernetes API schema of the newest version
    kubernetes-validate knows, strictly: a misspelt field (a probe's `comand`) fails."""
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(k8s_objects()[kind], version, strict=True)


def test_the_k8s_check_catches_a_misspelt_probe_field() -> None:
    """The check itself: a field Kubernetes does not know in the liveness probe fails."""
    import kubernetes_validate

    deployment = k8s_objects()["Deployment"]
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    probe["exec"]["comand"] = probe["exec"].pop("command")

    with pytest.raises(kubernetes_validate.ValidationError, match="'comand' was unexpected"):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_applies_every_manifest() -> None:
    """kustomization.yaml lists every manifest but the Secret example, and each exists."""
    (kustomization,) = yaml_documents(K8S / "kustomization.yaml")
    resources = set(kustomization["resources"])
    on_disk = {path.name for path in K8S.glob("*.yaml")} - NOT_APPLIED
    assert resources == on_disk


def test_deployment_runs_the_procfile_command() -> None:
    """The container's command is the Procfile's worker line, unchanged."""
    assert worker_container()["command"] == procfile_worker()


PROBES = ["startupProbe", "readinessProbe", "livenessProbe"]


@pytest.mark.parametrize("probe", PROBES)
def test_probes_run_the_light_health_command(probe: str) -> None:
    """Each probe execs `evidence-worker health` (no shell) on the image's heartbeat file,
    allowing several heartbeats' time, with a timeout the check cannot come near."""
    settings = worker_container()[probe]
    args = health_command(settings["exec"]["command"])
    assert args.file is None
    assert args.max_age >= 4 * Settings().heartbeat_seconds
    assert settings["timeoutSeconds"] >= 5


def test_liveness_waits_out_a_broker_outage_that_readiness_reports() -> None:
    """Readiness drops a worker that stopped consuming within a minute; liveness restarts it
    only after minutes; startup allows minutes to the first consume."""
    container = worker_container()

    def gives_up_after(probe: str) -> float:
        """Seconds without a heartbeat before the probe has failed failureThreshold times."""
        settings = container[probe]
        max_age: float = health_command(settings["exec"]["command"]).max_age
        return max_age + settings["periodSeconds"] * settings["failureThreshold"]

    assert gives_up_after("readinessProbe") <= 60
    assert gives_up_after("livenessProbe") >= 240
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 240


def test_compose_worker_healthcheck_is_the_image_s() -> None:
    """compose's worker healthcheck runs the image's command; beat, which consumes nothing and
    so writes no heartbeat, has the image's check disabled."""
    _, image_argv = dockerfile_healthcheck()
    services = compose()["services"]
    test = services["worker"]["healthcheck"]["test"]
    assert test == ["CMD", *image_argv]
    assert services["beat"]["healthcheck"] == {"disable": True}


def test_configmap_feeds_the_worker() -> None:
    """The worker takes its environment from the ConfigMap, which holds no broker secrets."""
    configmap = k8s_objects()["ConfigMap"]
    (source,) = worker_container()["envFrom"]
    assert source["configMapRef"]["name"] == configmap["metadata"]["name"]
    assert not {"EVIDENCE_BROKER_URL", "EVIDENCE_STORE_URL"} & set(configmap["data"])


@pytest.mark.parametrize("variable", ["EVIDENCE_BROKER_URL", "EVIDENCE_STORE_URL"])
def test_broker_and_store_urls_come_from_the_secret(variable: str) -> None:
    """The URLs (credentials inside) are secretKeyRefs to keys the example Secret defines."""
    secret = k8s_objects()["Secret"]
    (entry,) = [e for e in worker_container()["env"] if e["name"] == variable]
    reference = entry["valueFrom"]["secretKeyRef"]
    assert reference["name"] == secret["metadata"]["name"]
    assert reference["key"] in secret["stringData"]


def test_metrics_port_is_exposed_and_announced() -> None:
    """EVIDENCE_METRICS_PORT is the container's `metrics` port and the scrape annotation's."""
    objects = k8s_objects()
    port = int(objects["ConfigMap"]["data"]["EVIDENCE_METRICS_PORT"])
    (exposed,) = [p for p in worker_container()["ports"] if p["name"] == "metrics"]
    annotations = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert exposed["containerPort"] == port == int(annotations["prometheus.io/port"])
    worker = compose()["services"]["worker"]
    assert f"{port}:{port}" in " ".join(worker["ports"])
    assert int(worker["environment"]["EVIDENCE_METRICS_PORT"]) == port


def test_read_only_root_filesystem_has_a_writable_tmp() -> None:
    """With a read-only root, /tmp (prefork's temporary files) is an emptyDir."""
    container = worker_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_multiprocess_dir_is_in_the_environment_everywhere_the_worker_runs() -> None:
    """PROMETHEUS_MULTIPROC_DIR is set before the process starts (a Celery plugin may import
    prometheus_client before worker_init): the image, compose and the Deployment agree."""
    container = worker_container()
    (deployment,) = [e["value"] for e in container["env"] if e["name"] == MULTIPROC_ENV]
    image = image_environment()[MULTIPROC_ENV]
    assert image == compose()["services"]["worker"]["environment"][MULTIPROC_ENV] == deployment
    assert image == "/tmp/evidence-coverage-metrics"


def test_multiprocess_dir_is_a_directory_of_its_own_on_the_writable_tmp() -> None:
    """The directory is under the writable /tmp of compose and the pod (the emptyDir), and it
    is not /tmp itself: the worker empties it of *.db files at each start."""
    directory = Path(image_environment()[MULTIPROC_ENV])
    (tmp,) = [m for m in worker_container()["volumeMounts"] if m["name"] == "tmp"]
    volumes = k8s_objects()["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tmp", "emptyDir": {}} in volumes
    assert directory.parent == Path(tmp["mountPath"]) == Path("/tmp")
    assert compose()["services"]["worker"]["tmpfs"] == ["/tmp"]
    assert directory != image_heartbeat_file().parent


def test_procfile_says_when_to_set_the_multiprocess_dir() -> None:
    """The Procfile's note names the variable, the setting that needs it and the exit code."""
    comments = " ".join(
        line.lstrip("# ")
        for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )
    assert MULTIPROC_ENV in comments
    assert "EVIDENCE_METRICS_PORT" in comments
    assert "(exit 2)" in comments


def test_pod_disruption_budget_selects_the_worker_pods() -> None:
    """The PDB selects the Deployment's pods and never blocks a drain at one replica."""
    objects = k8s_objects()
    pdb, deployment = objects["PodDisruptionBudget"], objects["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]


def test_keda_scales_the_deployment_on_the_queue_list() -> None:
    """KEDA's redis trigger watches the list named like the queue the worker consumes."""
    objects = k8s_objects()
    scaled = objects["ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    _, worker = celery_command(procfile_worker())
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == Settings().queue == worker["queues"][0]
    assert scaled["spec"]["scaleTargetRef"]["name"] == objects["Deployment"]["metadata"]["name"]
    assert "replicas" not in objects["Deployment"]["spec"]


def test_keda_reads_the_brokers_redis() -> None:
    """KEDA's address, password and database are those of the broker URL in the Secret."""
    objects = k8s_objects()
    secret, auth = objects["Secret"], objects["TriggerAuthentication"]
    (trigger,) = objects["ScaledObject"]["spec"]["triggers"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    parameters = {}
    for reference in auth["spec"]["secretTargetRef"]:
        assert reference["name"] == secret["metadata"]["name"]
        parameters[reference["parameter"]] = secret["stringData"][reference["key"]]
    broker = urlsplit(secret["stringData"]["broker-url"])
    assert parameters == {
        "address": f"{broker.hostname}:{broker.port}",
        "password": broker.password,
    }
    assert trigger["metadata"]["databaseIndex"] == broker.path.lstrip("/")

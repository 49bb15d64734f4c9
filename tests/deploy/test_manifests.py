"""The deployment manifests, validated against the schemas the cluster would apply: KServe's
and the Prometheus Operator's published CRDs (tests/deploy/schemas, see SOURCES.md) and the
Kubernetes OpenAPI schemas (the kubernetes-validate package), strictly (an unknown field is an
error, as with ``kubectl apply --validate=strict``); then what the schemas cannot see: that
ptserve accepts the arguments, and that probes, ports, selectors and timings fit together."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import urllib.request
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from ptserve.cli import build_parser
from tests.serverproc import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMAS = Path(__file__).with_name("schemas")
KUBERNETES = "1.33.0"  # the oldest Kubernetes version the manifests are meant for
CRDS = {
    "ClusterServingRuntime": "serving.kserve.io_clusterservingruntimes.yaml",
    "InferenceService": "serving.kserve.io_inferenceservices.yaml",
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# --- schemas -------------------------------------------------------------------------------------


def strict(schema: Any) -> Any:
    """A CRD's structural schema as the API server applies it with strict field validation:
    an object with listed properties accepts no others, unless it preserves unknown fields."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


@cache
def crd_schema(kind: str, api_version: str) -> dict[str, Any]:
    crd = yaml.safe_load((SCHEMAS / CRDS[kind]).read_text())
    group, _, version = api_version.partition("/")
    assert crd["spec"]["group"] == group, f"{kind}: the CRD's group is {crd['spec']['group']}"
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            assert entry["served"], f"{kind} {api_version} is not served"
            return strict(entry["schema"]["openAPIV3Schema"])  # type: ignore[no-any-return]
    raise AssertionError(f"the {kind} CRD has no version {version}")


@cache
def kubernetes_definition(name: str) -> jsonschema.protocols.Validator:
    """A validator for one Kubernetes type (e.g. ``container-v1``), strict."""
    package = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    folder = package / f"v{KUBERNETES}-local-strict"
    schema = json.loads((folder / f"{name}.json").read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry: Registry = Resource.from_contents(definitions) @ (
        Resource.from_contents(schema) @ Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


def problems(document: dict[str, Any]) -> list[str]:
    """Every schema violation of one manifest ([] when it is valid)."""
    kind = document.get("kind", "")
    name = document.get("metadata", {}).get("name", "")
    where = f"{kind}/{name}"
    found: list[str] = []
    if not _DNS_LABEL.match(name) or len(name) > 63:
        found.append(f"{where}: metadata.name is not a DNS label")
    if kind in CRDS:
        validator = jsonschema.Draft202012Validator(crd_schema(kind, document["apiVersion"]))
        for error in validator.iter_errors(document):
            found.append(f"{where}: {'.'.join(map(str, error.path))}: {error.message}")
        if kind == "ClusterServingRuntime":  # its pod template: Kubernetes' own types
            container = kubernetes_definition("container-v1")
            for index, item in enumerate(document["spec"].get("containers", [])):
                for error in container.iter_errors(item):
                    path = ".".join(map(str, error.path))
                    found.append(f"{where}: spec.containers[{index}].{path}: {error.message}")
        return found
    try:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as error:
        found.append(f"{where}: {'.'.join(map(str, error.path))}: {error.message}")
    except kubernetes_validate.SchemaNotFoundError as error:
        found.append(f"{where}: {error.message}")
    return found


# --- the manifests -------------------------------------------------------------------------------


def kustomize() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is needed to render deploy/kubernetes (make install-test)"
    rendered = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / "kubernetes")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


@pytest.fixture(scope="module")
def kubernetes() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in kustomize()}


def kserve() -> list[dict[str, Any]]:
    documents = []
    for path in sorted((DEPLOY / "kserve").glob("*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


def runtime() -> dict[str, Any]:
    return next(d for d in kserve() if d["kind"] == "ClusterServingRuntime")


def test_kustomize_renders_every_part(kubernetes: dict[str, dict[str, Any]]) -> None:
    assert set(kubernetes) == {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ServiceMonitor",
    }


def test_kubernetes_manifests_are_valid(kubernetes: dict[str, dict[str, Any]]) -> None:
    assert [p for d in kubernetes.values() for p in problems(d)] == []


def test_kserve_manifests_are_valid() -> None:
    documents = kserve()
    assert {d["kind"] for d in documents} == {"ClusterServingRuntime", "InferenceService"}
    assert [p for d in documents for p in problems(d)] == []


@pytest.mark.parametrize(
    ("kind", "change", "expected"),
    [
        # A misspelt field, a wrong type, a missing required field: each must be caught.
        (
            "ClusterServingRuntime",
            lambda d: d["spec"].update(protocolVersion=["v2"]),
            "protocolVersion",
        ),
        (
            "ClusterServingRuntime",
            lambda d: d["spec"]["containers"][0]["readinessProbe"].update(httpGet={"path": 1}),
            "readinessProbe",
        ),
        (
            "InferenceService",
            lambda d: d["spec"]["predictor"].update(minReplicas="one"),
            "minReplicas",
        ),
        ("Deployment", lambda d: d["spec"].update(replicas="two"), "replicas"),
        (
            "Deployment",
            lambda d: d["spec"]["template"]["spec"].update(terminationGrace=5),
            "terminationGrace",
        ),
        ("HorizontalPodAutoscaler", lambda d: d["spec"].pop("scaleTargetRef"), "scaleTargetRef"),
        (
            "ServiceMonitor",
            lambda d: d["spec"]["endpoints"][0].update(intervall="15s"),
            "intervall",
        ),
    ],
)
def test_the_validation_catches_mistakes(
    kubernetes: dict[str, dict[str, Any]], kind: str, change: Any, expected: str
) -> None:
    documents = {d["kind"]: d for d in kserve()} | kubernetes
    broken = copy.deepcopy(documents[kind])
    change(broken)
    found = problems(broken)
    assert found, f"a broken {kind} passed validation"
    assert expected in " ".join(found)


# --- what the schemas cannot see ----------------------------------------------------------------


def arguments(args: list[str]) -> Any:
    """ptserve's own parser over a manifest's arguments (SystemExit if one is unknown)."""
    return build_parser().parse_args(args)


def test_the_runtime_starts_ptserve_as_kserve_expects() -> None:
    spec = runtime()["spec"]
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    assert {f["name"] for f in spec["supportedModelFormats"]} == {"pytorch", "torchscript"}
    container = spec["containers"][0]
    assert container["name"] == "kserve-container"
    args = arguments([a.replace("{{.Name}}", "simple") for a in container["args"]])
    assert [str(r) for r in args.model_repository] == ["/mnt/models"]
    assert args.model_name == "simple"
    # KServe sends HTTP to 8080 and gRPC to 9000; metrics where the annotations say.
    assert (args.http_port, args.grpc_port) == (8080, 9000)
    assert container["ports"] == [{"name": "http1", "containerPort": 8080, "protocol": "TCP"}]
    assert spec["annotations"]["prometheus.kserve.io/port"] == str(args.metrics_port)
    assert spec["annotations"]["prometheus.kserve.io/path"] == "/metrics"
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": 8080}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["securityContext"]["runAsUser"] == 1000  # the image's user


def test_the_inference_services_use_the_runtime() -> None:
    services = [d for d in kserve() if d["kind"] == "InferenceService"]
    for service in services:
        model = service["spec"]["predictor"]["model"]
        assert model["runtime"] == runtime()["metadata"]["name"]
        assert model["modelFormat"]["name"] in {"pytorch", "torchscript"}
        assert model["protocolVersion"] in runtime()["spec"]["protocolVersions"]
    grpc = next(
        s for s in services if s["spec"]["predictor"]["model"]["protocolVersion"] == "grpc-v2"
    )
    assert grpc["spec"]["predictor"]["model"]["ports"][0]["containerPort"] == 9000


def test_the_deployment_shuts_down_within_its_grace_period(
    kubernetes: dict[str, dict[str, Any]],
) -> None:
    pod = kubernetes["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = arguments(container["args"])
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = int(command[1])
    # The pod leaves the endpoints during preStop; then requests in flight get exit-timeout.
    assert pre_stop >= 5
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + args.exit_timeout_secs + 5
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": args.http_port, "grpc": args.grpc_port, "metrics": args.metrics_port}
    for probe, path in (
        ("startupProbe", "/v2/health/ready"),
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}
    assert args.repository_cache_dir == Path("/cache")
    assert {"name": "cache", "mountPath": "/cache"} in container["volumeMounts"]


def test_selectors_and_ports_fit_together(kubernetes: dict[str, dict[str, Any]]) -> None:
    deployment, service = kubernetes["Deployment"], kubernetes["Service"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"],
        kubernetes["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= pod_labels.items()
    container_ports = {
        p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports
    monitor = kubernetes["ServiceMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    target = kubernetes["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])


def test_the_autoscaling_metric_comes_from_ptserve(
    kubernetes: dict[str, dict[str, Any]], example_server: ServerProcess
) -> None:
    """The HPA's metric is ptserve's queue length as prometheus-adapter's rule names it, and
    ptserve really exports the series the rule reads."""
    metric = kubernetes["HorizontalPodAutoscaler"]["spec"]["metrics"][0]
    assert metric["type"] == "Pods"
    values = yaml.safe_load((DEPLOY / "kubernetes" / "prometheus-adapter-values.yaml").read_text())
    (rule,) = values["rules"]["custom"]
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
    series = rule["seriesQuery"].partition("{")[0]
    assert series == "nv_inference_pending_request_count"
    with urllib.request.urlopen(f"http://{example_server.metrics_url}/metrics", timeout=10) as r:
        exported = r.read().decode()
    assert re.search(rf"^{series}\{{model=", exported, re.MULTILINE)

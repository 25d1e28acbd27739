"""docs/deploy.md: its configuration examples are read by the tools that would read them, and it is listed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.platform.tls import self_signed
from gpuscope.render.docs import find_topic

REPO = Path(__file__).resolve().parents[3]
GUIDE = REPO / "docs" / "deploy.md"
MANIFEST = REPO / "deploy" / "kubernetes" / "daemonset.yaml"


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.S)


def prometheus_configs() -> list[str]:
    return [b for b in yaml_blocks() if b.startswith("scrape_configs:")]


def collector_config() -> dict[str, Any]:
    (block,) = [b for b in yaml_blocks() if "receivers:" in b]
    return yaml.safe_load(block)


@pytest.mark.parametrize("index", range(2))
def test_the_guides_prometheus_configurations_pass_promtool(index: int, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool comes with Prometheus, which `make setup` installs (apt package prometheus)")
    # given the configuration, its files (the CA, the token) where it names them, under a folder of the test
    config = prometheus_configs()[index]
    for path in re.findall(r"(?:ca_file|credentials_file): (/\S+)", config):
        local = tmp_path / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        if path.endswith(".pem"):
            shutil.copy(self_signed(tmp_path / "made", ["gpuscope-metrics"]).cert, local)
        else:
            local.write_text("f" * 64 + "\n")
        config = config.replace(path, str(local))
    file = tmp_path / "prometheus.yml"
    file.write_text(config)

    # when Prometheus's own checker reads it
    p = subprocess.run([promtool, "check", "config", str(file)], capture_output=True, text=True, timeout=60)
    if "field kubernetes_sd_configs not found" in p.stdout + p.stderr:
        # Debian's Prometheus is built without Kubernetes discovery: the rest is checked with static targets
        # in its place, the discovery by test_the_kubernetes_job_discovers_the_daemonsets_metrics_ports
        doc = yaml.safe_load(config)
        for job in doc["scrape_configs"]:
            if job.pop("kubernetes_sd_configs", None) is not None:
                job["static_configs"] = [{"targets": ["10.0.0.1:9464"]}]
        file.write_text(yaml.safe_dump(doc))
        p = subprocess.run([promtool, "check", "config", str(file)], capture_output=True, text=True, timeout=60)

    # then it is valid
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_guide_shows_both_prometheus_configurations() -> None:
    loopback, kubernetes = (yaml.safe_load(c) for c in prometheus_configs())
    assert loopback["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9464"]
    job = kubernetes["scrape_configs"][0]
    assert job["scheme"] == "https" and job["authorization"]["credentials_file"]
    # the certificate the DaemonSet's steps make is for this name
    assert job["tls_config"]["server_name"] == "gpuscope-metrics"
    assert "--nodes gpuscope-metrics" in MANIFEST.read_text()


def test_the_kubernetes_job_discovers_the_daemonsets_metrics_ports() -> None:
    # given the job and the DaemonSet it scrapes
    job = yaml.safe_load(prometheus_configs()[1])["scrape_configs"][0]
    daemonset = next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "DaemonSet")
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]

    # then it lists the pods of the agent's namespace, keeps those with its label, and their metrics port
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"]["names"] == [daemonset["metadata"]["namespace"]]
    keep = {r["source_labels"][0]: r["regex"] for r in job["relabel_configs"] if r["action"] == "keep"}
    # Prometheus spells a pod label's name with every character outside [a-zA-Z0-9_] as "_"
    for name, value in labels.items():
        meta = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)
        if meta in keep:
            assert keep[meta] == value
    assert "__meta_kubernetes_pod_label_app_kubernetes_io_name" in keep
    assert keep["__meta_kubernetes_pod_container_port_name"] in [p["name"] for p in container["ports"]]


def test_every_component_the_collectors_pipeline_names_is_configured() -> None:
    config = collector_config()
    pipeline = config["service"]["pipelines"]["metrics"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipeline[kind]) <= set(config[kind]), kind
    assert set(config["service"]["extensions"]) <= set(config["extensions"])
    # the receiver speaks OTLP/HTTP on the port --otlp pushes to, over TLS, with the bearer token checked
    http = config["receivers"]["otlp"]["protocols"]["http"]
    assert http["endpoint"].endswith(":4318") and http["tls"]["cert_file"]
    assert http["auth"]["authenticator"] in config["service"]["extensions"]
    # and the memory limiter comes first, the batch last, as the Collector's documentation asks
    assert pipeline["processors"][0] == "memory_limiter" and pipeline["processors"][-1] == "batch"


def test_the_network_policy_lets_the_metrics_port_of_the_daemonsets_pods_be_reached() -> None:
    (policy,) = [yaml.safe_load(b) for b in yaml_blocks() if "kind: NetworkPolicy" in b]
    daemonset = next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "DaemonSet")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 9464, "protocol": "TCP"}]


def test_the_guide_is_a_topic_of_gpuscope_docs_and_linked_from_the_readme() -> None:
    found = find_topic("deploy")
    assert found is not None and found.path.read_text() == GUIDE.read_text()
    assert "](docs/deploy.md)" in (REPO / "README.md").read_text()

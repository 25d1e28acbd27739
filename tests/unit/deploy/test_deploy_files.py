"""The deployment files of deploy/: the Kubernetes DaemonSet, the Dockerfile and the systemd unit.

Each is read as its consumer reads it (PyYAML for the manifest, systemd's own
``systemd-analyze`` for the unit, gpuscope's own argument parser and exporter
checks for the command lines) and held to what docs/deploy.md says of it. No
container is built here (no Docker on the test machines): the Dockerfile is
read as text, and its build stage's files are shown to build the wheel.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.cli import build_parser
from gpuscope.commands._exporters import plan_exporters
from gpuscope.platform.net import split_host_port
from gpuscope.platform.tls import self_signed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test machines run 3.11
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
MANIFEST = DEPLOY / "kubernetes" / "daemonset.yaml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
UNIT = DEPLOY / "systemd" / "gpuscope.service"
ROOT_OWNED_FOLDERS = ("/usr", "/usr/lib", "/usr/local", "/usr/local/lib", "/lib", "/lib64", "/usr/lib64", "/bin")


# -- the Kubernetes manifest -------------------------------------------------------


@pytest.fixture(scope="module")
def manifest() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(MANIFEST.read_text()))


@pytest.fixture(scope="module")
def pod(manifest: list[dict[str, Any]]) -> dict[str, Any]:
    (daemonset,) = [d for d in manifest if d["kind"] == "DaemonSet"]
    return daemonset["spec"]["template"]


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod["spec"]["containers"]
    return c


def unit_entries(key: str) -> list[str]:
    """The values of ``key=`` in the unit, in order."""
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def unit_capabilities() -> set[str]:
    (ambient,) = unit_entries("AmbientCapabilities")
    return {c.removeprefix("CAP_") for c in ambient.split()}


def expand_kubernetes_vars(arg: str, env: dict[str, str]) -> str:
    """``$(NAME)`` replaced as the kubelet replaces it, from the container's own environment."""

    def value(m: re.Match[str]) -> str:
        assert m.group(1) in env, f"{arg}: $({m.group(1)}) is not in the container's env"
        return env[m.group(1)]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value, arg)


def test_the_manifest_holds_a_namespace_a_service_account_and_the_daemonset(manifest: list[dict[str, Any]]) -> None:
    assert [d["kind"] for d in manifest] == ["Namespace", "ServiceAccount", "DaemonSet"]
    namespace = manifest[0]["metadata"]["name"]
    assert {d["metadata"].get("namespace", namespace) for d in manifest} == {namespace}
    assert manifest[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    daemonset = manifest[2]
    assert (
        daemonset["spec"]["selector"]["matchLabels"].items()
        <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    )
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == manifest[1]["metadata"]["name"]
    assert manifest[1]["automountServiceAccountToken"] is False


def test_the_pod_sees_the_hosts_processes_with_named_capabilities_not_privileged(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    assert pod["spec"]["hostPID"] is True
    assert pod["spec"].get("hostNetwork", False) is False
    sc = container["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    # uid 0 because added capabilities reach uid 0 only; every other capability of root is dropped
    assert sc["runAsUser"] == 0 and sc["capabilities"]["drop"] == ["ALL"]
    # the same capabilities as the systemd unit's, each of which docs/deploy.md explains
    assert set(sc["capabilities"]["add"]) == unit_capabilities()
    assert {"BPF", "PERFMON"} <= set(sc["capabilities"]["add"])
    guide = (REPO / "docs" / "deploy.md").read_text()
    for cap in sc["capabilities"]["add"]:
        assert f"`CAP_{cap}`" in guide, cap


def test_btf_and_the_cgroup_tree_are_mounted_read_only_and_recordings_stay_on_the_node(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}

    def host_path(mount_path: str) -> str:
        return str(volumes[mounts[mount_path]["name"]]["hostPath"]["path"])

    assert host_path("/sys/kernel/btf") == "/sys/kernel/btf" and mounts["/sys/kernel/btf"]["readOnly"] is True
    assert host_path("/sys/fs/cgroup") == "/sys/fs/cgroup" and mounts["/sys/fs/cgroup"]["readOnly"] is True
    assert host_path("/var/lib/gpuscope") == "/var/lib/gpuscope" and not mounts["/var/lib/gpuscope"].get("readOnly")
    # no host folder over the image's own libraries (its Python and libc would be replaced)
    assert not set(mounts) & set(ROOT_OWNED_FOLDERS)
    # the secrets are private to their owner: gpuscope refuses a key or token others can read
    for v in volumes.values():
        if "secret" in v:
            assert v["secret"]["defaultMode"] == 0o400, v["name"]


def test_the_node_name_comes_from_the_downward_api(container: dict[str, Any]) -> None:
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--node=$(NODE_NAME)" in container["args"]
    # and the pod's own names, which the OTLP resource reads
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_the_scrape_annotations_name_the_port_path_and_scheme_the_exporter_serves(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    annotations = pod["metadata"]["annotations"]
    (port,) = [p for p in container["ports"] if p["name"] == "metrics"]
    (prometheus,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--prometheus=")]
    address = split_host_port(prometheus)
    assert address is not None
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port["containerPort"]) == str(address[1]) == "9464"
    assert annotations["prometheus.io/path"] == "/metrics"
    # served beyond loopback, so over TLS
    assert annotations["prometheus.io/scheme"] == "https"


def test_the_container_runs_a_system_wide_trace_that_gpuscope_accepts(
    pod: dict[str, Any], container: dict[str, Any], tmp_path: Path
) -> None:
    # given the Secrets' files where the kubelet mounts them: tls.crt and tls.key (kubectl create secret
    # tls), token (--from-literal=token=...), mode 0400
    cert = self_signed(tmp_path / "made", ["gpuscope-metrics"])
    files: dict[str, Path] = {}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for mount in container["volumeMounts"]:
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        folder = tmp_path / secret["secretName"]
        folder.mkdir()
        if secret["secretName"].endswith("-tls"):
            shutil.copy(cert.cert, folder / "tls.crt")
            shutil.copy(cert.key, folder / "tls.key")
        else:
            (folder / "token").write_text("f" * 64 + "\n")
        for f in folder.iterdir():
            f.chmod(secret["defaultMode"])
        files[mount["mountPath"]] = folder
    env = {e["name"]: "gpu-node-07" for e in container["env"] if "valueFrom" in e}
    env |= {e["name"]: e["value"] for e in container["env"] if "value" in e}
    argv = [expand_kubernetes_vars(a, env) for a in container["args"]]
    for mount_path, folder in files.items():
        argv = [a.replace(mount_path, str(folder)) for a in argv]

    # when gpuscope's own parser and exporter checks read the container's command line
    assert container["command"] == ["gpuscope"]
    args = build_parser("trace").parse_args(argv)
    plan = plan_exporters(args)

    # then it is a trace of every process on the node (no command, no pid) into the node's recording,
    # with /metrics on every pod address over HTTPS with a token
    assert args.command == [] and args.pid == [] and args.lib == []
    assert args.node == "gpu-node-07" and args.no_tui
    assert args.db.startswith("/var/lib/gpuscope/")
    assert plan.prometheus is not None and plan.prometheus.tls is not None and plan.prometheus.token == "f" * 64
    assert (plan.prometheus.host, plan.prometheus.port) == ("0.0.0.0", 9464)


# -- the Dockerfile ------------------------------------------------------------------


def stages() -> list[tuple[str, list[tuple[str, str]]]]:
    """(FROM line, [(INSTRUCTION, arguments)]) of each stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[tuple[str, list[tuple[str, str]]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            out.append((rest, []))
        elif out:
            out[-1][1].append((word.upper(), " ".join(rest.split())))
    return out


def test_the_image_is_built_in_one_stage_and_run_from_a_small_one() -> None:
    (build_from, build), (run_from, run) = stages()
    assert build_from.endswith("AS build")
    build_runs = " ".join(a for i, a in build if i == "RUN")
    assert re.search(r"apt-get install .*\bclang\b.*\blibbpf-dev\b", build_runs)
    assert "pip wheel" in build_runs
    # the runtime stage starts from a slim Debian with Python, and installs libbpf1 and the wheels only
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), flags=re.M))
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], run_from.split()[0])
    assert re.fullmatch(r"python:3\.\d+-slim-bookworm|debian:bookworm-slim", base), base
    runtime_runs = " ".join(a for i, a in run if i == "RUN")
    assert re.search(r"apt-get install [^&]*\blibbpf1\b", runtime_runs)
    for compiler in ("clang", "gcc", "llvm", "libbpf-dev"):
        assert not re.search(rf"apt-get install [^&]*\b{compiler}\b", runtime_runs), compiler
    assert "pip install --no-cache-dir --no-index --find-links /wheels gpuscope" in runtime_runs
    assert ("ENTRYPOINT", '["gpuscope"]') in run


def test_the_image_runs_as_a_user_that_is_not_root() -> None:
    _, run = stages()[-1]
    users = [a for i, a in run if i == "USER"]
    assert users, "the runtime stage sets no USER: it would run as root"
    uid = users[-1].split(":")[0]
    assert uid not in ("0", "root") and int(uid) >= 1000


def build_context_paths() -> list[str]:
    """What the build stage copies from the build context."""
    (_, build), _ = stages()
    return [p.rstrip("/") for i, a in build if i == "COPY" for p in a.split()[:-1]]


def test_the_build_stage_copies_what_the_source_distribution_holds() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    sdist = {p.rstrip("/") for p in pyproject["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]}
    assert sdist | {"pyproject.toml"} <= set(build_context_paths())


def test_the_build_context_leaves_out_this_checkouts_builds_and_environment() -> None:
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()}
    assert {".git", ".venv", "src/gpuscope/_bpf", "src/gpuscope/_standin", "**/__pycache__"} <= ignored


def test_the_files_the_build_stage_copies_build_the_wheel_with_its_bpf_objects(tmp_path: Path) -> None:
    # given exactly what the build stage copies, without what .dockerignore leaves out
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()]

    def skip(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).relative_to(REPO)
        return {
            n
            for n in names
            if any(Path(rel / n).match(pattern.removeprefix("**/")) or str(rel / n) == pattern for pattern in ignored)
        }

    context = tmp_path / "context"
    for path in build_context_paths():
        src = REPO / path
        if src.is_dir():
            shutil.copytree(src, context / path, ignore=skip)
        else:
            (context / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, context / path)
    assert not (context / "src" / "gpuscope" / "_bpf").exists()

    # when pip builds the wheel there, as the build stage does
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(context)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    # then it builds, with the BPF objects compiled there
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("gpuscope-*.whl")
    with zipfile.ZipFile(wheel) as z:
        objects = {n for n in z.namelist() if n.startswith("gpuscope/_bpf/")}
    assert "gpuscope/_bpf/cuda.bpf.o" in objects


def test_the_docker_run_example_adds_the_same_capabilities_as_the_daemonset() -> None:
    added = set(re.findall(r"--cap-add (\w+)", DOCKERFILE.read_text()))
    assert added == unit_capabilities()
    assert "--cap-drop ALL" in DOCKERFILE.read_text() and "--pid=host" in DOCKERFILE.read_text()


# -- the systemd unit ----------------------------------------------------------------


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    return tool


def unit_copy_with_this_launcher(tmp_path: Path) -> Path:
    """The unit, its ExecStart's /usr/local/bin/gpuscope replaced by this environment's launcher.

    systemd-analyze verify checks that the program exists and is executable;
    /usr/local/bin/gpuscope may not be installed on the test machine, and
    the rest of the unit is verified as it is.
    """
    launcher = Path(sys.executable).parent / "gpuscope"
    assert os.access(launcher, os.X_OK), f"{launcher}: no gpuscope launcher beside the interpreter"
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/gpuscope " in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace("ExecStart=/usr/local/bin/gpuscope ", f"ExecStart={launcher} "))
    return copy


def test_systemd_analyze_verify_passes_on_the_unit_without_a_warning(tmp_path: Path) -> None:
    tool = systemd_analyze()
    p = subprocess.run(
        [tool, "verify", str(unit_copy_with_this_launcher(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # an unknown or misspelt setting is only a warning to systemd: any output fails the test
    assert p.returncode == 0 and p.stdout + p.stderr == "", p.stdout + p.stderr


def test_systemd_rates_the_units_exposure_ok(tmp_path: Path) -> None:
    tool = systemd_analyze()
    # the score is out of 10 (0 is best); --threshold takes it times ten and fails above it
    p = subprocess.run(
        [tool, "security", "--offline=yes", "--threshold=30", str(unit_copy_with_this_launcher(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"Overall exposure level for gpuscope\.service: [0-2]\.\d OK", p.stdout), p.stdout


def test_the_unit_runs_a_system_wide_trace_into_its_state_directory_on_loopback() -> None:
    # given the unit's command line, read by gpuscope's own parser and exporter checks
    (exec_start,) = unit_entries("ExecStart")
    program, *argv = exec_start.split()
    assert program == "/usr/local/bin/gpuscope"
    args = build_parser("trace").parse_args(argv)
    plan = plan_exporters(args)

    # then it traces every process, into the one folder it may write, with /metrics on loopback only
    assert args.command == [] and args.pid == [] and args.no_tui
    (state,) = unit_entries("StateDirectory")
    assert Path(args.db).parent == Path("/var/lib") / state
    assert plan.prometheus is not None and plan.prometheus.host == "127.0.0.1"
    assert unit_entries("IPAddressAllow") == ["localhost"] and unit_entries("IPAddressDeny") == ["any"]


def test_the_unit_runs_unprivileged_with_only_the_capabilities_it_explains() -> None:
    assert unit_entries("DynamicUser") == ["yes"] and not unit_entries("User")
    (ambient,) = unit_entries("AmbientCapabilities")
    (bounding,) = unit_entries("CapabilityBoundingSet")
    assert ambient.split() == bounding.split()
    comments = UNIT.read_text()
    for cap in ambient.split():
        assert re.search(rf"^#\s+{cap}\s+\w", comments, flags=re.M), f"{cap} is granted without a reason"
    assert unit_entries("NoNewPrivileges") == ["yes"]
    assert unit_entries("ProtectSystem") == ["strict"] and unit_entries("ProtectHome") == ["read-only"]

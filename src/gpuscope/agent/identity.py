"""Who did it: container, pod, job, rank of a process, read at first sight.

Everything here comes from /proc (cgroup paths, environment) and the cgroup
filesystems, so it must be read while the process is alive: after it exits,
its /proc entry is gone. Works on cgroup v2, v1 and hybrid hosts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_HEX64 = r"[0-9a-f]{64}"
# (runtime, pattern) in priority order; group 1 is the container id.
_CONTAINER_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("docker", re.compile(rf"docker-({_HEX64})\.scope")),
    ("docker", re.compile(rf"/docker/({_HEX64})")),
    ("containerd", re.compile(rf"cri-containerd-({_HEX64})\.scope")),
    ("cri-o", re.compile(rf"crio-(?:conmon-)?({_HEX64})\.scope")),
    ("podman", re.compile(rf"libpod-(?:conmon-)?({_HEX64})\.scope")),
    ("containerd", re.compile(rf"/kubepods[^ ]*/({_HEX64})$")),
    ("ecs", re.compile(rf"/ecs/[0-9a-f]+/({_HEX64})")),
]
# kubepods-burstable-pod1234_5678.slice (systemd) or /kubepods/burstable/pod1234-5678/ (cgroupfs)
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_SLURM = re.compile(r"/job_(\d+)(?:/step_([\w.]+))?")
_ECS_TASK = re.compile(r"/ecs/([0-9a-f]{32})/")

# Rank environment of common launchers: (launcher, rank, local rank, world size).
_RANK_VARS = [
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("mpich", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_SIZE"),
]


@dataclass(frozen=True, slots=True)
class CgroupInfo:
    cgroup_id: int
    hierarchy: str  # "v2" or "v1:memory"
    path: str
    container_id: str | None
    runtime: str | None
    pod_uid: str | None
    pod_name: str | None
    pod_namespace: str | None
    slurm_job_id: str | None
    slurm_step_id: str | None
    ecs_task_id: str | None


@dataclass(frozen=True, slots=True)
class RankInfo:
    launcher: str | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    slurm_job_id: str | None
    slurm_step_id: str | None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def read_environ(pid: int) -> dict[str, str]:
    return parse_environ(_read(f"/proc/{pid}/environ"))


def parse_environ(raw: bytes) -> dict[str, str]:
    """NUL-separated KEY=VALUE entries (a truncated last entry is dropped)."""
    env: dict[str, str] = {}
    items = raw.split(b"\0")
    if raw and not raw.endswith(b"\0"):
        items = items[:-1]
    for item in items:
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def rank_info(env: dict[str, str]) -> RankInfo:
    """Rank, local rank and world size from the first launcher whose variables are set."""
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
    for launcher, r, lr, ws in _RANK_VARS:
        if r in env:
            return RankInfo(launcher, _int(env.get(r)), _int(env.get(lr)), _int(env.get(ws)), job, step)
    return RankInfo(None, None, None, None, job, step)


def cgroup_paths(pid: int) -> dict[str, str]:
    """{'v2': path, 'v1:memory': path} from /proc/PID/cgroup."""
    out: dict[str, str] = {}
    for line in _read(f"/proc/{pid}/cgroup").decode("utf-8", "replace").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0":
            out["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            out["v1:memory"] = parts[2]
    return out


def _v2_root() -> str:
    return "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"


def cgroup_id_of(hierarchy: str, path: str, root: str | None = None) -> int | None:
    """The cgroup id (the directory's inode, as BPF reports it)."""
    base = root or (_v2_root() if hierarchy == "v2" else "/sys/fs/cgroup/memory")
    try:
        return os.stat(base + path).st_ino
    except OSError:
        return None


def parse_cgroup_path(path: str) -> dict[str, str | None]:
    """Container, pod, Slurm and ECS identity encoded in a cgroup path."""
    info: dict[str, str | None] = {
        "container_id": None,
        "runtime": None,
        "pod_uid": None,
        "slurm_job_id": None,
        "slurm_step_id": None,
        "ecs_task_id": None,
    }
    for runtime, pat in _CONTAINER_PATTERNS:
        m = pat.search(path)
        if m:
            info["container_id"], info["runtime"] = m.group(1), runtime
            break
    m = _POD_UID.search(path)
    if m:
        info["pod_uid"] = m.group(1).replace("_", "-")
        if info["runtime"] is None and info["container_id"] is None:
            info["runtime"] = "kubernetes"
    m = _SLURM.search(path) if "slurm" in path else None
    if m:
        info["slurm_job_id"], info["slurm_step_id"] = m.group(1), m.group(2)
    m = _ECS_TASK.search(path)
    if m:
        info["ecs_task_id"] = m.group(1)
    return info


def cgroups_of(pid: int, env: dict[str, str] | None = None) -> list[CgroupInfo]:
    """The v2 and v1-memory cgroups of a process, with what their paths identify."""
    env = env if env is not None else read_environ(pid)
    out: list[CgroupInfo] = []
    for hierarchy, path in cgroup_paths(pid).items():
        cid = cgroup_id_of(hierarchy, path)
        if cid is None:
            continue
        f = parse_cgroup_path(path)
        pod_name = pod_ns = None
        if f["pod_uid"]:
            # Kubernetes sets HOSTNAME to the pod name; the service-account
            # mount carries the namespace.
            pod_name = env.get("HOSTNAME")
            pod_ns = (
                _read(f"/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount/namespace").decode().strip()
                or None
            )
        job = f["slurm_job_id"] or env.get("SLURM_JOB_ID")
        step = f["slurm_step_id"] or env.get("SLURM_STEP_ID")
        ecs = f["ecs_task_id"]
        out.append(
            CgroupInfo(
                cid, hierarchy, path, f["container_id"], f["runtime"], f["pod_uid"], pod_name, pod_ns, job, step, ecs
            )
        )
    return out


class CgroupResolver:
    """Map cgroup ids seen on events to paths by walking the cgroup filesystems.

    A process may move into a container cgroup and exit between two reads of
    /proc, but its events carry the cgroup id; the id is the directory's inode,
    so a walk finds the path while the cgroup exists. Walks are cached and
    repeated at most once a second for unknown ids.
    """

    def __init__(self) -> None:
        self._index: dict[tuple[str, int], str] = {}
        self._last_walk = -1.0
        self._roots = [("v2", _v2_root())]
        if os.path.isdir("/sys/fs/cgroup/memory") and _v2_root() != "/sys/fs/cgroup/memory":
            self._roots.append(("v1:memory", "/sys/fs/cgroup/memory"))

    def _walk(self) -> None:
        import time

        now = time.monotonic()
        if now - self._last_walk < 1.0:
            return
        self._last_walk = now
        for hierarchy, root in self._roots:
            for dirpath, _dirs, _files in os.walk(root):
                try:
                    ino = os.stat(dirpath).st_ino
                except OSError:
                    continue
                self._index[(hierarchy, ino)] = dirpath[len(root) :] or "/"

    def resolve(self, hierarchy: str, cgroup_id: int) -> CgroupInfo | None:
        key = (hierarchy, cgroup_id)
        if key not in self._index:
            self._walk()
        path = self._index.get(key)
        if path is None:
            return None
        f = parse_cgroup_path(path)
        return CgroupInfo(
            cgroup_id,
            hierarchy,
            path,
            f["container_id"],
            f["runtime"],
            f["pod_uid"],
            None,
            None,
            f["slurm_job_id"],
            f["slurm_step_id"],
            f["ecs_task_id"],
        )

"""Container, pod, job and rank identity parsed from cgroup paths and environments."""

from __future__ import annotations

import pytest

from gpuscope.agent.identity import parse_cgroup_path, parse_environ, rank_info

CID = "a" * 64
UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
SYSTEMD_POD_PATH = (
    f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
    f"cri-containerd-{CID}.scope"
)


@pytest.mark.parametrize(
    ("path", "container", "runtime", "pod"),
    [
        (f"/system.slice/docker-{CID}.scope", CID, "docker", None),
        (f"/docker/{CID}", CID, "docker", None),
        (f"/system.slice/crio-{CID}.scope", CID, "cri-o", None),
        (f"/machine.slice/libpod-{CID}.scope", CID, "podman", None),
        (SYSTEMD_POD_PATH, CID, "containerd", UID),
        (f"/kubepods/burstable/pod{UID}/{CID}", CID, "containerd", UID),
        (f"/kubepods/besteffort/pod{UID}", None, "kubernetes", UID),
        ("/user.slice/user-1000.slice/session-3.scope", None, None, None),
    ],
)
def test_container_and_pod_come_from_the_cgroup_path(
    path: str, container: str | None, runtime: str | None, pod: str | None
) -> None:
    info = parse_cgroup_path(path)
    assert (info["container_id"], info["runtime"], info["pod_uid"]) == (container, runtime, pod)


def test_slurm_job_and_step_come_from_the_cgroup_path() -> None:
    info = parse_cgroup_path("/slurm/uid_1000/job_4242/step_0/user/task_0")
    assert (info["slurm_job_id"], info["slurm_step_id"]) == ("4242", "0")


def test_ecs_task_and_container_come_from_the_cgroup_path() -> None:
    task = "0123456789abcdef0123456789abcdef"
    info = parse_cgroup_path(f"/ecs/{task}/{CID}")
    assert (info["ecs_task_id"], info["container_id"], info["runtime"]) == (task, CID, "ecs")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}, ("torchrun", 3, 1, 8)),
        ({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16", "SLURM_JOB_ID": "77"}, ("slurm", 5, 1, 16)),
        (
            {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"},
            ("openmpi", 2, 0, 4),
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, ("mpich", 1, None, 2)),
        ({"HOME": "/root"}, (None, None, None, None)),
        ({"RANK": "not-a-number"}, ("torchrun", None, None, None)),
    ],
)
def test_rank_comes_from_the_launchers_environment(env: dict[str, str], expected: tuple[object, ...]) -> None:
    r = rank_info(env)
    assert (r.launcher, r.rank, r.local_rank, r.world_size) == expected


def test_torchrun_wins_over_slurm_when_both_are_set() -> None:
    r = rank_info({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_JOB_ID": "9"})
    assert (r.launcher, r.rank, r.slurm_job_id) == ("torchrun", 1, "9")


def test_environ_parsing_drops_a_truncated_last_entry() -> None:
    assert parse_environ(b"A=1\0B=two\0RANK=") == {"A": "1", "B": "two"}
    assert parse_environ(b"A=1\0B=x=y\0") == {"A": "1", "B": "x=y"}

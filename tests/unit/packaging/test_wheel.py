"""The wheel `make wheel` builds: its tag, what it carries, and a gpuscope installed from it."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.unit.packaging.btf import e_machine
from tests.unit.packaging.support import REPO, build_wheel


def newest_glibc_needed(library: Path) -> tuple[int, int]:
    """The newest GLIBC_X.Y among the versions `readelf -V` lists as needed."""
    out = subprocess.run(["readelf", "-V", "--wide", str(library)], capture_output=True, text=True, check=True).stdout
    needs = out.split("Version needs section", 1)[1]
    versions = [(int(a), int(b)) for a, b in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", needs)]
    assert versions, out
    return max(versions)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"), GPUSCOPE_TARGET_ARCH="")  # this machine's


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def test_the_wheel_is_tagged_manylinux_for_the_newest_glibc_its_libraries_need(wheel: Path, unpacked: Path) -> None:
    # given the shared libraries the wheel ships, read with binutils
    libraries = sorted((unpacked / "gpuscope" / "_standin").glob("*.so*"))
    assert [p.name for p in libraries] == [
        "libcuda.so.1",
        "libcudart.so.12",
        "libgpuscope_calibrate.so",
        "libgpuscope_sqlite_rows.so",
        "libnccl.so.2",
    ]
    newest = max(newest_glibc_needed(p) for p in libraries)
    # then its tag is the manylinux one for exactly that glibc, on this architecture
    tag = f"py3-none-manylinux_{newest[0]}_{newest[1]}_{platform.machine()}"
    assert wheel.name == f"gpuscope-{wheel.name.split('-')[1]}-{tag}.whl"
    assert f"Tag: {tag}" in (unpacked / f"gpuscope-{wheel.name.split('-')[1]}.dist-info" / "WHEEL").read_text()


def test_the_wheel_installs_where_glibc_is_older_than_2_28(wheel: Path, unpacked: Path) -> None:
    # given the stand-in runtime, which loads the driver with dlopen as the real one does
    cudart = unpacked / "gpuscope" / "_standin" / "libcudart.so.12"
    # then it needs no newer glibc than manylinux2014's: RHEL/Rocky 8 (2.28) and Ubuntu 20.04 (2.31) install
    # the wheel (glibc 2.34 versioned dlopen anew; the old version is bound, with libdl.so.2 as needed)
    assert newest_glibc_needed(cudart) <= (2, 17), newest_glibc_needed(cudart)
    assert "manylinux_2_17_" in wheel.name, wheel.name


def test_the_wheel_carries_bpf_objects_and_libraries_once_each(wheel: Path, unpacked: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert len(names) == len(set(names))
    objects = sorted((unpacked / "gpuscope" / "_bpf").iterdir())
    assert [p.name for p in objects] == [f"{n}.bpf.o" for n in ("cuda", "host", "io", "loads", "mem", "net")]
    assert {e_machine(p) for p in objects} == {247}  # EM_BPF


def test_the_wheel_carries_the_guides(unpacked: Path, tmp_path: Path) -> None:
    # given the wheel's files, where no docs/ folder is beside them: when its gpuscope looks for a guide
    env = dict(os.environ, PYTHONPATH=str(unpacked))
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "docs", "--path", "query"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    # then it finds the copy inside the package, identical to docs/query.md
    assert p.returncode == 0, p.stderr
    found = Path(p.stdout.strip())
    assert found.is_relative_to(unpacked / "gpuscope" / "_docs")
    assert found.read_text() == (REPO / "docs" / "query.md").read_text()


@pytest.mark.privileged
def test_gpuscope_check_runs_from_a_fresh_venv_the_wheel_was_installed_into(wheel: Path, tmp_path: Path) -> None:
    # given a new venv with the wheel installed by pip; its dependencies come from this
    # environment's site-packages through a .pth file (no index needed; .pth files in that
    # folder, such as this checkout's editable install, are not read from there)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "deps-from-dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUSCOPE_BPF_DIR")}
    where = subprocess.run(
        [str(py), "-c", "import gpuscope; print(gpuscope.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(Path(site))
    # when its console script runs the environment check (as root: it loads the shipped probes)
    p = subprocess.run(
        [str(venv / "bin" / "gpuscope"), "check", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    # then tracing is possible with the BPF objects from the wheel
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert doc["tracing_possible"] is True
    assert checks["gpuscope probes"]["status"] == "ok", checks["gpuscope probes"]


def test_pipx_installs_the_wheel_with_its_dependencies_and_its_command_runs(wheel: Path, tmp_path: Path) -> None:
    # given pipx with homes of its own (dependencies come from the package index, as for a user)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUSCOPE_BPF_DIR")}
    env.update(PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"), PIPX_MAN_DIR=str(tmp_path / "man"))
    # when it installs the wheel
    installed = subprocess.run(
        [sys.executable, "-m", "pipx", "install", str(wheel)], capture_output=True, text=True, env=env, timeout=300
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # then its `gpuscope` command runs from the isolated environment, with the probes the wheel carries
    p = subprocess.run(
        [str(tmp_path / "bin" / "gpuscope"), "check", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["tracing_possible"] is True
    where = subprocess.run(
        [str(tmp_path / "pipx" / "venvs" / "gpuscope" / "bin" / "python"), "-c", "import gpuscope; print(gpuscope.__file__)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "pipx")

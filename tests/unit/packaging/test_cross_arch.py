"""The BPF programs and the wheel for arm64 (aarch64), built on any machine.

No arm64 kernel is needed: the objects are CO-RE, so what must hold is that
they compile against the vendored minimal arm64 vmlinux.h and that their
relocations name arm64's registers (struct user_pt_regs), which libbpf then
places with the running kernel's BTF.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.packaging.btf import Relocation, core_relocations, e_machine
from tests.unit.packaging.support import REPO, build_wheel

sys.path.insert(0, str(REPO / "scripts"))
import build_native

INCLUDE = REPO / "bpf" / "include"
EM_BPF, EM_AARCH64 = 247, 183


def compile_all(out: Path, arch: str, vmlinux_dir: Path) -> dict[str, Path]:
    """Compile every program as build_native does, against vmlinux_dir/vmlinux.h; name -> object."""
    out.mkdir(parents=True, exist_ok=True)
    objects = {}
    for name in build_native.BPF_SOURCES:
        obj = out / f"{name}.bpf.o"
        p = subprocess.run(
            [
                build_native.find_clang(),
                "-g",
                "-O2",
                "-target",
                "bpf",
                f"-D__TARGET_ARCH_{arch}",
                "-I",
                str(INCLUDE),
                "-I",
                str(vmlinux_dir),
                "-Wall",
                "-Wno-unused-function",
                "-Werror",
                "-c",
                str(REPO / "bpf" / f"{name}.bpf.c"),
                "-o",
                str(obj),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert p.returncode == 0, f"{name}.bpf.c for {arch}:\n{p.stderr}"
        objects[name] = obj
    return objects


@pytest.fixture(scope="module")
def arm64(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return compile_all(tmp_path_factory.mktemp("arm64"), "arm64", INCLUDE / "vmlinux" / "arm64")


@pytest.fixture(scope="module")
def x86(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return compile_all(tmp_path_factory.mktemp("x86"), "x86", INCLUDE / "vmlinux" / "x86")


def _registers(relocs: list[Relocation], sections: Callable[[str], bool]) -> set[str]:
    return {r.access for r in relocs if sections(r.section) and "pt_regs" in r.access}


def test_every_program_compiles_for_arm64_against_the_vendored_header(arm64: dict[str, Path]) -> None:
    assert {e_machine(p) for p in arm64.values()} == {EM_BPF}
    assert set(arm64) == set(build_native.BPF_SOURCES)


def test_arm64_uprobe_arguments_relocate_against_user_pt_regs(arm64: dict[str, Path]) -> None:
    relocs = core_relocations(arm64["cuda"])
    entry = _registers(relocs, lambda s: s == "uprobe")
    # arguments 1-8 in x0-x7, the stack pointer, the frame pointer x29 and the link register x30; and the pc, where
    # a libpython start probe hit (gs_py_start: its load bias)
    assert entry == {f"user_pt_regs.regs[{i}]" for i in (*range(8), 29, 30)} | {"user_pt_regs.sp", "user_pt_regs.pc"}
    assert _registers(relocs, lambda s: s == "uretprobe") == {"user_pt_regs.regs[0]"}  # the return value


def test_arm64_mmap_hook_reads_the_syscall_from_arm64_registers(arm64: dict[str, Path]) -> None:
    regs = _registers(core_relocations(arm64["loads"]), lambda s: s.startswith("tp_btf/"))
    # the number in pt_regs.syscallno; prot, flags and fd: arguments 3-5 in x2-x4
    assert regs == {"pt_regs.syscallno", "user_pt_regs.regs[2]", "user_pt_regs.regs[3]", "user_pt_regs.regs[4]"}


def test_the_x86_objects_read_no_arm64_register_and_the_reverse(arm64: dict[str, Path], x86: dict[str, Path]) -> None:
    x86_regs = set().union(*(_registers(core_relocations(p), lambda s: True) for p in x86.values()))
    arm_regs = set().union(*(_registers(core_relocations(p), lambda s: True) for p in arm64.values()))
    assert "pt_regs.r9" in x86_regs and "pt_regs.orig_ax" in x86_regs
    assert not any(r.startswith("user_pt_regs") for r in x86_regs)
    arm64_names = {f"user_pt_regs.regs[{i}]" for i in range(31)} | {"user_pt_regs.sp", "user_pt_regs.pc"}
    assert arm_regs <= arm64_names | {"pt_regs.syscallno"}


def test_a_header_made_by_the_script_gives_the_relocations_of_the_full_dump(
    x86: dict[str, Path], tmp_path: Path
) -> None:
    # given a minimal x86 header written by the script that wrote the arm64 one
    made = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "gen_min_vmlinux.py"),
            "--arch",
            "x86",
            "-o",
            str(tmp_path / "min" / "vmlinux.h"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    # when every program is compiled against it, and (fixture) against the full bpftool dump
    minimal = compile_all(tmp_path / "o-min", "x86", tmp_path / "min")
    # then libbpf gets the same relocations, instruction by instruction: the same types and members by name (in
    # whichever order the compiler lists the sections: it may differ between the two builds)
    for name in build_native.BPF_SOURCES:
        assert sorted(core_relocations(minimal[name]), key=repr) == sorted(core_relocations(x86[name]), key=repr), name


def test_the_vendored_arm64_header_is_what_the_script_writes() -> None:
    header = (INCLUDE / "vmlinux" / "arm64" / "vmlinux.h").read_text()
    if "scripts/gen_min_vmlinux.py" not in header:
        # a full `bpftool btf dump` from an arm64 kernel replaced the minimal header
        assert "struct user_pt_regs {" in header and "preserve_access_index" in header
        return
    p = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_min_vmlinux.py"), "--arch", "arm64", "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr


def test_an_aarch64_wheel_carries_bpf_objects_and_aarch64_libraries(tmp_path: Path) -> None:
    # given the wheel `make wheel ARCH=aarch64` builds (the stand-ins with Debian's cross gcc)
    wheel = build_wheel(tmp_path / "dist", GPUSCOPE_TARGET_ARCH="aarch64")
    # then it is tagged for aarch64, and its files are BPF objects and aarch64 libraries
    assert wheel.name.startswith("gpuscope-") and wheel.name.endswith("_aarch64.whl")
    assert "-py3-none-manylinux_2_17_aarch64" in wheel.name  # the oldest glibc of aarch64 manylinux
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site")
    objects = sorted((tmp_path / "site" / "gpuscope" / "_bpf").glob("*.bpf.o"))
    libraries = sorted((tmp_path / "site" / "gpuscope" / "_standin").glob("*.so*"))
    assert len(objects) == len(build_native.BPF_SOURCES) and len(libraries) == len(build_native.STANDINS)
    assert {e_machine(p) for p in objects} == {EM_BPF}
    assert {e_machine(p) for p in libraries} == {EM_AARCH64}
    # and the objects are the arm64 build: their uprobes read user_pt_regs
    cuda = next(p for p in objects if p.name == "cuda.bpf.o")
    assert "user_pt_regs.regs[7]" in _registers(core_relocations(cuda), lambda s: s == "uprobe")

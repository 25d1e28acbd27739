"""The ELF reader finds exported functions and their file offsets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuscope.agent.discovery import Discovery, library_kind, probe_plan
from gpuscope.model.ops import Op
from gpuscope.platform.elf import ElfError, ElfFile, function_offsets
from tests.conftest import StandinLibs


def _nm_offsets(path: Path) -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
    return {
        p[2]: int(p[0], 16) for p in (line.split() for line in out.stdout.splitlines()) if len(p) == 3 and p[1] in "Tt"
    }


def test_function_addresses_agree_with_nm(standin: StandinLibs) -> None:
    nm = _nm_offsets(standin.cudart)
    with ElfFile(str(standin.cudart)) as elf:
        funcs = elf.functions()
    for name in ("cudaMalloc", "cudaLaunchKernel", "cudaStreamSynchronize"):
        assert funcs[name] == nm[name]


def test_file_offsets_point_at_the_function_code(standin: StandinLibs) -> None:
    offs = function_offsets(str(standin.cudart))
    data = standin.cudart.read_bytes()
    # -fno-omit-frame-pointer: every stand-in function starts with push %rbp (0x55)
    # or endbr64 (f3 0f 1e fa).
    first = data[offs["cudaMalloc"]]
    assert first in (0x55, 0xF3)


def test_probe_plan_covers_every_probed_api_once(standin: StandinLibs) -> None:
    plan = probe_plan(str(standin.cudart))
    ops = [op for _, op, _ in plan]
    assert Op.cudaLaunchKernel in ops and Op.cudaStreamSynchronize in ops
    # cudaLaunchKernel and cudaLaunchKernel_ptsz are two symbols of one op
    assert ops.count(Op.cudaLaunchKernel) == 2
    assert len({off for off, _, _ in plan}) == len(plan)


def test_soname_and_dynamic_entries(standin: StandinLibs) -> None:
    with ElfFile(str(standin.cuda)) as elf:
        assert elf.dynamic()[14] == ["libcuda.so.1"]
        assert elf.build_id()


def test_non_elf_file_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "libcudart.so.12"
    p.write_bytes(b"not an elf" * 10)
    with pytest.raises(ElfError, match="not a 64-bit"):
        ElfFile(str(p))
    assert Discovery().add(str(p), "test") is None


def test_library_kinds_by_name() -> None:
    assert library_kind("/x/libcudart.so.12.9.79") == "cudart"
    assert library_kind("libcuda.so.1") == "cuda"
    assert library_kind("libcudnn.so.9") is None


def test_discovery_deduplicates_symlinked_copies(standin: StandinLibs, tmp_path: Path) -> None:
    link = tmp_path / "libcudart.so"
    link.symlink_to(standin.cudart)
    d = Discovery()
    assert d.add(str(standin.cudart), "a") is not None
    assert d.add(str(link), "b") is None
    assert len(d.libraries) == 1


def test_discovery_finds_libraries_on_ld_library_path(standin: StandinLibs) -> None:
    d = Discovery()
    d.scan_system({"LD_LIBRARY_PATH": str(standin.dir)})
    found = {lib.path for lib in d.libraries}
    assert str(standin.cudart) in found and str(standin.cuda) in found

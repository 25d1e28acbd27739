"""Paths into a process's root are resolved inside it, never through the agent's own file system."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuscope.platform.proc_root import resolve, split_root


def test_links_inside_a_process_root_stay_inside_it(tmp_path: Path) -> None:
    # given, seen through our own /proc/PID/root, an absolute link, a relative link and a '..'
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "lib.so").write_bytes(b"x")
    (tmp_path / "abs").symlink_to(tmp_path / "real")
    (tmp_path / "rel").symlink_to("real")
    root = f"/proc/{os.getpid()}/root"
    # when / then each resolves to the file, still under the process's root (not to the agent's path)
    for name in ("abs", "rel", "rel/../abs"):
        assert resolve(f"{root}{tmp_path}/{name}/lib.so") == f"{root}{tmp_path}/real/lib.so"


def test_a_link_loop_inside_a_process_root_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="symbolic links"):
        resolve(f"/proc/{os.getpid()}/root{tmp_path}/a/x")


def test_other_paths_resolve_as_realpath_does(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert resolve(str(tmp_path / "link")) == os.path.realpath(tmp_path / "link")
    assert split_root(str(tmp_path)) is None
    assert split_root("/proc/12/root") == ("/proc/12/root", "/")

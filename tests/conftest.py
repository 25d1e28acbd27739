"""Shared fixtures: stand-in CUDA libraries and workloads built by the tests.

Everything native the tests need is compiled here from the project's own C
sources (native/standin, tests/workloads) into a session temp dir.

The run has a temporary directory of its own (``TMPDIR``, for this process
and every command it starts); pytest's ``tmp_path`` folders live in it too.
Anything else found there at the end is something gpuscope or a test left
behind: the run fails and names it. The folder is removed when pytest exits
(pass ``--basetemp DIR`` to keep the tests' folders for a look), and the next
run removes one whose run was killed before it could.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STANDIN_SRC = ROOT / "native" / "standin"
WORKLOADS_SRC = ROOT / "tests" / "workloads"


# -- the run's own temporary directory --------------------------------------------

_RUN_TMP_PREFIX = "gpuscope-tests-"
_RUN_TMP_KEY = pytest.StashKey[Path]()
_LEFT_BEHIND_KEY = pytest.StashKey[list[str]]()
_OLD_TMPDIR_KEY = pytest.StashKey[str | None]()
_CHANGED_FIXTURES_KEY = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Point TMPDIR at a fresh folder for this run, before pytest or any test asks for a temporary path."""
    _remove_stale_run_folders(Path(tempfile.gettempdir()))
    # The pid in the name lets a later run remove the folder of a run that was killed before it could.
    run_tmp = Path(tempfile.mkdtemp(prefix=f"{_RUN_TMP_PREFIX}{os.getpid()}-"))
    # Sticky and world-writable like /tmp: tests that run commands as another user need to reach it.
    run_tmp.chmod(0o1777)
    config.stash[_RUN_TMP_KEY] = run_tmp
    config.stash[_OLD_TMPDIR_KEY] = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(run_tmp)
    tempfile.tempdir = None  # tempfile caches the folder it chose first: make it read TMPDIR again


def _remove_stale_run_folders(tmp: Path) -> None:
    """Remove the folders that runs killed before their end left (their pytest process is gone)."""
    for folder in tmp.glob(f"{_RUN_TMP_PREFIX}*-*"):
        pid = folder.name[len(_RUN_TMP_PREFIX) :].split("-", 1)[0]
        try:
            ours = folder.is_dir() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if ours and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_tree(folder)


def _remove_tree(folder: Path) -> None:
    """Remove ``folder``, also where a test left a folder in it read-only (permission tests)."""
    for parent, dirs, _ in os.walk(folder):
        for name in dirs:
            with suppress(OSError):
                sub = os.path.join(parent, name)
                os.chmod(sub, os.stat(sub).st_mode | stat.S_IRWXU)
    shutil.rmtree(folder, ignore_errors=True)


def left_behind(run_tmp: Path) -> list[str]:
    """What lies in the run's temporary directory besides pytest's own folders (``pytest-of-<user>``)."""
    return sorted(p.name for p in run_tmp.iterdir() if not p.name.startswith("pytest-of-"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a carried recording changed, or something was left in the temporary directory."""
    changed = _changed_fixtures()
    session.config.stash[_CHANGED_FIXTURES_KEY] = changed
    if changed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    run_tmp = session.config.stash.get(_RUN_TMP_KEY, None)
    if run_tmp is None or not run_tmp.is_dir():
        return
    left = left_behind(run_tmp)
    session.config.stash[_LEFT_BEHIND_KEY] = left
    if left and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _changed_fixtures() -> list[str]:
    """The carried recordings whose bytes differ from their checksums (none where this conftest runs elsewhere)."""
    sums = Path(__file__).resolve().parent / "fixtures" / "ingero" / "SHA256SUMS"
    if not sums.is_file():  # a copy of this file, in a test's own scratch suite
        return []
    import hashlib

    changed = []
    for line in sums.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        path = sums.parent / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            changed.append(name)
    return changed


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    changed = config.stash.get(_CHANGED_FIXTURES_KEY, [])
    if changed:
        terminalreporter.section("fixtures changed", red=True)
        terminalreporter.line(f"tests wrote to {', '.join(changed)} (tests/fixtures/ingero): restore with git checkout")
    left = config.stash.get(_LEFT_BEHIND_KEY, [])
    if left:
        terminalreporter.section("left in the temporary directory", red=True)
        terminalreporter.line(f"the run left {len(left)} entr{'y' if len(left) == 1 else 'ies'}: {', '.join(left)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's temporary directory, pytest's folders included (``--basetemp DIR`` keeps them elsewhere)."""
    run_tmp = config.stash.get(_RUN_TMP_KEY, None)
    if run_tmp is None:
        return
    _remove_tree(run_tmp)
    old = config.stash.get(_OLD_TMPDIR_KEY, None)
    if old is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = old
    tempfile.tempdir = None


def _cc() -> str:
    for c in ("cc", "gcc", "clang"):
        if shutil.which(c):
            return c
    pytest.skip("no C compiler")
    raise AssertionError


@dataclass(frozen=True)
class StandinLibs:
    dir: Path
    cudart: Path
    cuda: Path
    nccl: Path

    def env(self, **latency: str) -> dict[str, str]:
        """Environment for a workload: the stand-in dir on LD_LIBRARY_PATH and latencies.

        ``env(cudaMalloc="200us", cudaStreamSynchronize="2ms:sleep")``
        """
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = str(self.dir)
        if latency:
            env["GPUSCOPE_STANDIN_LATENCY"] = ",".join(f"{k}={v}" for k, v in latency.items())
        return env


def build_standins(out: Path) -> StandinLibs:
    out.mkdir(parents=True, exist_ok=True)
    cc = _cc()
    for src, lib in (
        ("cudart_standin.c", "libcudart.so.12"),
        ("cuda_standin.c", "libcuda.so.1"),
        ("nccl_standin.c", "libnccl.so.2"),
    ):
        subprocess.run(
            [
                cc,
                "-shared",
                "-fPIC",
                "-O2",
                "-fno-omit-frame-pointer",
                f"-Wl,-soname,{lib}",
                "-o",
                str(out / lib),
                str(STANDIN_SRC / src),
                # libdl stays a dependency where no symbol of this glibc's needs it: an older
                # glibc provides the stand-in's dlopen there (native/standin/cudart_standin.c)
                "-Wl,--no-as-needed",
                "-l:libdl.so.2",
                "-lpthread",
            ],
            check=True,
        )
    return StandinLibs(out, out / "libcudart.so.12", out / "libcuda.so.1", out / "libnccl.so.2")


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Snapshots of killed recordings and Ingero conversions go to a cache of the test run, not the user's."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)
    yield cache
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def standin(tmp_path_factory: pytest.TempPathFactory) -> StandinLibs:
    """The stand-in libcudart.so.12 and libcuda.so.1, compiled for this test run."""
    return build_standins(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="session")
def build_workload(standin: StandinLibs, tmp_path_factory: pytest.TempPathFactory):
    """Compile a C workload from tests/workloads against the stand-in libraries.

    ``build_workload("cuda_calls.c", extra_flags=["-fomit-frame-pointer"])`` -> Path
    """
    out = tmp_path_factory.mktemp("workloads")
    cache: dict[tuple[str, tuple[str, ...]], Path] = {}

    def build(name: str, extra_flags: list[str] | None = None) -> Path:
        key = (name, tuple(extra_flags or []))
        if key not in cache:
            exe = out / (Path(name).stem + ("-" + "-".join(f.strip("-") for f in extra_flags) if extra_flags else ""))
            subprocess.run(
                [
                    _cc(),
                    "-O1",
                    "-g",
                    *(extra_flags or ["-fno-omit-frame-pointer"]),
                    "-o",
                    str(exe),
                    str(WORKLOADS_SRC / name),
                    f"-L{standin.dir}",
                    "-l:libcudart.so.12",
                    "-l:libcuda.so.1",
                    "-l:libnccl.so.2",
                    f"-Wl,-rpath,{standin.dir}",
                    "-lpthread",
                    "-lm",
                ],
                check=True,
            )
            cache[key] = exe
        return cache[key]

    return build


@functools.cache
def bpf_usable() -> bool:
    """True when this process can load and attach BPF programs (tried, not assumed)."""
    if os.geteuid() != 0:
        return False
    try:
        from gpuscope.bpf.features import probe_bpf_load

        return probe_bpf_load().available
    except Exception:
        return False


@dataclass
class TraceRun:
    db: Path
    returncode: int
    stdout: str
    stderr: str

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def op_counts(self) -> dict[str, int]:
        return {str(op): int(str(n)) for op, n in self.query("SELECT op, count(*) FROM events GROUP BY op")}


def run_gpuscope(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the gpuscope CLI in a subprocess (the way users run it)."""
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


@pytest.fixture
def trace_command(tmp_path: Path, standin: StandinLibs):
    """Trace a command with the real tracer: ``trace_command([exe, "100"], env=..., extra=[...])`` -> TraceRun.

    Only the stand-in libraries are probed (``--lib``), so results do not
    depend on which CUDA copies the machine has.
    """
    counter = iter(range(1000))

    def run(
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        extra: list[str] | None = None,
        timeout: float = 120,
        libs: list[Path] | None = None,
    ) -> TraceRun:
        db = tmp_path / f"trace{next(counter)}.db"
        lib_args: list[str] = []
        for lib in libs if libs is not None else [standin.cudart, standin.cuda]:
            lib_args += ["--lib", str(lib)]
        p = run_gpuscope(
            "trace", "--db", str(db), *lib_args, *(extra or []), "--", *cmd, env=env or standin.env(), timeout=timeout
        )
        return TraceRun(db, p.returncode, p.stdout, p.stderr)

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Privileged tests need root and working BPF; CI runs as root and must run them.

    Under CI=true a missing capability is a failure, not a skip (see
    ``pytest_runtest_setup``): a silent skip would hide the tests that matter most.
    """
    for item in items:
        if "/privileged/" in str(item.fspath):
            item.add_marker(pytest.mark.privileged)
    if bpf_usable() or os.environ.get("CI") == "true":
        return
    for item in items:
        if "privileged" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs root with BPF (run as root)"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """In CI, a privileged test on a machine without root and BPF fails (it was an xfail, which passes a run)."""
    if "privileged" in item.keywords and os.environ.get("CI") == "true" and not bpf_usable():
        pytest.fail("CI must run the privileged tests as root, with BPF usable (see `gpuscope check`)")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The pid of a process that runs until the test ends (beside ``tests.pids.dead_pid``)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield child.pid
    assert child.stdin is not None
    child.stdin.close()
    child.wait()

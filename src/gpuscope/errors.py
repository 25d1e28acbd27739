"""Error classes that carry their own remedy, and the exit codes they map to.

Exit codes: 0 ok, 1 failure, 2 usage, 3 the environment cannot support the
request. Commands print ``error: <message>`` and the remedy on stderr; a
traceback only with ``-vv``.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3


class GpuscopeError(Exception):
    """Base class: one line of message, an optional remedy, an exit code."""

    exit_code = EXIT_FAILURE
    remedy = ""

    def __init__(self, message: str, remedy: str | None = None) -> None:
        super().__init__(message)
        if remedy is not None:
            self.remedy = remedy

    def render(self) -> str:
        text = f"error: {self}"
        if self.remedy:
            text += f"\n  fix: {self.remedy}"
        return text


class UsageError(GpuscopeError):
    exit_code = EXIT_USAGE


class EnvironmentUnsupported(GpuscopeError):
    exit_code = EXIT_ENVIRONMENT


class LibbpfMissingError(EnvironmentUnsupported):
    remedy = "install libbpf 1.1 or newer: apt-get install libbpf1"


class PermissionDeniedError(EnvironmentUnsupported):
    remedy = (
        "run as root (sudo gpuscope ...) or grant CAP_BPF and CAP_PERFMON (plus CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL to trace other users' processes); "
        "`gpuscope check` shows what is missing"
    )


class BpfObjectMissingError(EnvironmentUnsupported):
    remedy = "reinstall gpuscope so its build compiles the BPF programs: apt-get install clang llvm libbpf-dev && pip install ."


class BpfLoadError(EnvironmentUnsupported):
    remedy = "run `gpuscope check` to see which kernel feature is missing"


class NoCudaLibraryError(EnvironmentUnsupported):
    remedy = (
        "point gpuscope at the library with --lib /path/to/libcudart.so.12 (PyTorch ships its own "
        "copy under site-packages/nvidia/*/lib or torch/lib)"
    )


class ProcessNotFoundError(GpuscopeError):
    remedy = "check the pid with `ps -p PID`; the process may have exited"


class DatabaseError(GpuscopeError):
    remedy = "pass a writable path with --db PATH or set GPUSCOPE_DB"


class SchemaTooNewError(GpuscopeError):
    remedy = "upgrade gpuscope (pip install -U gpuscope) to read this database"

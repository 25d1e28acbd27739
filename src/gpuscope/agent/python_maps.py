"""The tracer's Python maps: which processes' Python frames the kernel walks, and with which offsets.

A process is registered one by one (``py_procs``, from its maps), or through its interpreter's file: an
executable with the runtime inside (``py_exes``, found from AT_ENTRY) or a libpython (``py_libs``, each
process registered by the probe on the library's start). See ``gpuscope.stacks.python_files``.
"""

from __future__ import annotations

import struct

from gpuscope.bpf.loader import BpfObject
from gpuscope.bpf.wire import PY_LIB_SHIFT, PY_MAX_LIBS
from gpuscope.errors import BpfLoadError
from gpuscope.stacks.python_files import PythonLibrary


class PythonMaps:
    """Writes to the CUDA object's Python maps (``Tracer`` is one)."""

    _cuda: BpfObject | None
    multi: bool  # uprobe_multi links
    _python_exes: set[bytes]  # keys written to py_exes, for its count
    _python_libs: list[str]  # the libpythons in py_libs, by slot

    def set_python_offsets(self, version: int, packed: bytes) -> None:
        """Load one interpreter version's struct gs_py_offsets into slot ``version``."""
        if self._cuda is not None:
            self._cuda.lib.map_update(self._cuda.map_fd("py_offsets"), struct.pack("<I", version), packed)

    def clear_python_process(self, pid: int) -> None:
        """Stop walking Python frames in ``pid`` (it exec'd another program)."""
        if self._cuda is not None:
            self._cuda.lib.map_delete(self._cuda.map_fd("py_procs"), struct.pack("<I", pid))

    def set_python_process(self, pid: int, runtime: int, version: int, code_type: int = 0) -> None:
        """Walk Python frames in ``pid``, whose _PyRuntime is at ``runtime``.

        ``code_type``: PyCode_Type - _PyRuntime in its build (0: unknown; code objects are then known by their
        type's name, which a forked child may not be able to read yet).
        """
        if self._cuda is not None:
            self._cuda.lib.map_update(
                self._cuda.map_fd("py_procs"), struct.pack("<I", pid), struct.pack("<QIi", runtime, version, code_type)
            )

    def set_python_exe(self, ino: int, dev: int, runtime_from_entry: int, version: int, code_type: int = 0) -> None:
        """Walk Python frames in every process that runs this executable, from its first call.

        ``(ino, dev)``: the file, ``dev`` encoded as the kernel does (major << 20 | minor).
        ``runtime_from_entry``: _PyRuntime's distance from the entry point, in the file's addresses.
        ``code_type``: as for ``set_python_process``.
        """
        if self._cuda is None:
            return
        key = struct.pack("<QII", ino, dev, 0)
        self._cuda.lib.map_update(
            self._cuda.map_fd("py_exes"), key, struct.pack("<qIi", runtime_from_entry, version, code_type)
        )
        self._python_exes.add(key)
        self._cuda.lib.map_update(
            self._cuda.map_fd("py_exe_count"), b"\0" * 4, struct.pack("<I", len(self._python_exes))
        )

    def attach_python_library(self, lib: PythonLibrary, version: int) -> bool:
        """Register each process that starts ``lib`` from now on for Python walks (``version``: its py_offsets slot).

        False when it cannot be: no CUDA object, every slot taken, or its start functions refused a probe.
        """
        if self._cuda is None or len(self._python_libs) >= PY_MAX_LIBS:
            return False
        slot = len(self._python_libs)
        self._cuda.lib.map_update(
            self._cuda.map_fd("py_libs"),
            struct.pack("<I", slot),
            struct.pack("<QQqIi", lib.ino, lib.runtime, lib.text_delta, version, lib.code_type),
        )
        offsets = [off for _, off in lib.starts]
        cookies = [vaddr << PY_LIB_SHIFT | slot for vaddr, _ in lib.starts]
        try:
            if self.multi:
                self._cuda.attach_uprobe_multi("gs_py_start", lib.path, offsets, cookies, retprobe=False)
            else:
                for off, cookie in zip(offsets, cookies, strict=True):
                    self._cuda.attach_uprobe("gs_py_start", lib.path, off, cookie, retprobe=False)
        except BpfLoadError:
            return False
        self._python_libs.append(lib.path)
        return True

    def python_processes(self) -> list[int]:
        """The processes whose Python frames the kernel walks now (``py_procs``)."""
        if self._cuda is None:
            return []
        return [struct.unpack("<I", k)[0] for k in self._cuda.lib.map_keys(self._cuda.map_fd("py_procs"), 4)]

"""The wheel's platform tag, from what its shared libraries really need (PEP 600).

The wheel ships no Python extension: its native files are BPF objects (data
for the kernel, one set per architecture) and the stand-in CUDA libraries,
ordinary shared objects that processes load. Those decide where the wheel
runs, so the tag is ``py3-none-manylinux_X_Y_<arch>`` with X.Y the newest
GLIBC_X.Y symbol version any of them needs, and the build stops when one
needs a library outside the manylinux policy: only glibc's libc, libdl,
libpthread and libm, which every glibc system has.

Read with pyelftools (a build requirement in pyproject.toml).
"""

from __future__ import annotations

import os
import re

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

ALLOWED_LIBS = ("libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6")
# The oldest glibc of any manylinux tag for each architecture (PEP 600 via
# manylinux1/manylinux2014): a library that names no versioned symbol runs there.
OLDEST_GLIBC = {"x86_64": (2, 5), "aarch64": (2, 17)}
# The ELF e_machine names pyelftools gives each architecture's libraries.
E_MACHINE = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
_GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?$")


class PolicyError(SystemExit):
    """A shipped library that no manylinux tag covers."""


def glibc_needs(path: str) -> tuple[tuple[int, int] | None, list[str], str]:
    """(newest GLIBC_X.Y version needed or None, DT_NEEDED libraries, e_machine) of one shared object."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        needed: list[str] = []
        newest: tuple[int, int] | None = None
        for sec in elf.iter_sections():
            if isinstance(sec, DynamicSection):
                needed += [tag.needed for tag in sec.iter_tags("DT_NEEDED")]
            if isinstance(sec, GNUVerNeedSection):
                for verneed, auxes in sec.iter_versions():
                    for aux in auxes:
                        m = _GLIBC.match(aux.name)
                        if not m or verneed.name not in ALLOWED_LIBS:
                            raise PolicyError(
                                f"error: {os.path.basename(path)} needs symbol version {aux.name} of "
                                f"{verneed.name}, outside the manylinux policy (GLIBC_X.Y of "
                                f"{', '.join(ALLOWED_LIBS)})"
                            )
                        version = (int(m.group(1)), int(m.group(2)))
                        newest = version if newest is None else max(newest, version)
        return newest, needed, elf["e_machine"]


def manylinux_tag(libraries: list[str], machine: str) -> str:
    """``py3-none-manylinux_X_Y_<machine>`` for a wheel shipping ``libraries``.

    Raises PolicyError (a SystemExit with the reason) for a library of another
    architecture or one that needs anything beyond glibc's core libraries.
    """
    newest = OLDEST_GLIBC[machine]
    for path in libraries:
        version, needed, e_machine = glibc_needs(path)
        name = os.path.basename(path)
        if e_machine != E_MACHINE[machine]:
            raise PolicyError(f"error: {name} is built for {e_machine}, not {machine}: check the C compiler used")
        outside = [lib for lib in needed if lib not in ALLOWED_LIBS]
        if outside:
            raise PolicyError(
                f"error: {name} needs {', '.join(outside)}, outside the manylinux policy "
                f"({', '.join(ALLOWED_LIBS)}): link it statically or drop the dependency"
            )
        if version is not None:
            newest = max(newest, version)
    return f"py3-none-manylinux_{newest[0]}_{newest[1]}_{machine}"

"""Readable frames and whole stacks: what is stored and printed."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from gpuscope.store.stored_json import stored_json

# Libraries whose frames are the API being traced or the interpreter's call
# machinery, never "the call site" a user wants named.
_PLUMBING = re.compile(r"^(libcudart|libcuda|libnccl|libcublas|libcudnn|libffi|_ctypes|libpython|python3)")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame, innermost first in a stack.

    kind: "native" or "python". A frame that could not be named keeps what is
    known (module, offset or address) and says why in ``marker``.
    """

    kind: str
    function: str | None = None
    module: str | None = None  # native: file path
    offset: int | None = None  # native: offset into the function (or file offset when unnamed)
    file: str | None = None  # python: source file
    line: int | None = None  # python: the executing line
    address: str | None = None  # raw address, when nothing else is known
    marker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Frame:
        return cls(
            str(d.get("kind", "native")),
            d.get("function"),
            d.get("module"),
            d.get("offset"),
            d.get("file"),
            d.get("line"),
            d.get("address"),
            d.get("marker"),
        )

    def render(self) -> str:
        if self.kind == "python":
            where = f"{self.file}:{self.line}" if self.file else "?"
            return f"{self.function or '?'} ({where})" + (f" [{self.marker}]" if self.marker else "")
        mod = os.path.basename(self.module) if self.module else "?"
        if self.function:
            # a named frame's marker is only ever "scanned": found by stack scanning, heuristic
            return f"{self.function}+{self.offset or 0:#x} ({mod})" + (f" [{self.marker}]" if self.marker else "")
        what = f"{mod}+{self.offset:#x}" if self.offset is not None else (self.address or "?")
        return f"{what} [{self.marker or 'unnamed'}]"

    @property
    def is_plumbing(self) -> bool:
        if self.kind == "python":
            return self.function is None
        return self.module is None or bool(_PLUMBING.match(os.path.basename(self.module)))


def frames_from_json(text: object) -> tuple[Frame, ...]:
    """The stored frames of a stack; none where they are not the JSON list the collector writes (a changed file)."""
    items = stored_json(text)
    return tuple(Frame.from_json(f) for f in items if isinstance(f, dict)) if isinstance(items, list) else ()


@dataclass(frozen=True, slots=True)
class Stack:
    frames: tuple[Frame, ...]
    native_depth: int
    python_depth: int
    marker: str | None

    @property
    def json(self) -> str:
        return json.dumps([f.to_json() for f in self.frames], ensure_ascii=False, separators=(",", ":"))

    @property
    def hash(self) -> int:
        """A stable signed 64-bit id of the readable stack (equal stacks of any process share it)."""
        digest = hashlib.blake2b(self.json.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little", signed=True)

    @property
    def call_site(self) -> str | None:
        """The innermost frame that is the user's code: a Python line, else a native function."""
        for f in self.frames:
            if f.kind == "python" and f.function:
                return f.render()
        for f in self.frames[1:]:
            if not f.is_plumbing and f.function:
                return f"{f.function} ({os.path.basename(f.module or '?')})"
        return None

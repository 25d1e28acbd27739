"""The Python mirror of bpf/include/events.h matches what the C compiler lays out."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gpuscope.bpf.wire import EVENT_DTYPE, EVENT_SIZE, RECORD_SIZE, Flag, Stat
from gpuscope.model.ops import Op

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "bpf" / "include" / "events.h"


def _c_enum(name: str) -> dict[str, int]:
    """Parse `enum name { A = 1, ... }` members from the header text."""
    text = HEADER.read_text()
    body = re.search(rf"enum {name} \{{(.*?)\}};", text, re.S)
    assert body, name
    out = {}
    for m in re.finditer(r"(GS_[A-Z0-9_]+)\s*=\s*([^,\n]+),", body.group(1)):
        out[m.group(1)] = m.group(2).strip()
    return out


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    fields = [name for name in EVENT_DTYPE.names or ()]
    prog = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{HEADER}"', "int main(void) {"]
    prog.append('printf("sizeof %zu\\n", sizeof(struct gs_event));')
    for f in fields:
        prog.append(f'printf("{f} %zu %zu\\n", offsetof(struct gs_event, {f}), sizeof(((struct gs_event*)0)->{f}));')
    for enum in ("gs_op", "gs_flag", "gs_stat"):
        for member in _c_enum(enum):
            prog.append(f'printf("{member} %lld\\n", (long long){member});')
    prog.append("return 0; }")
    d = tmp_path_factory.mktemp("wire")
    src = d / "layout.c"
    src.write_text("\n".join(prog))
    subprocess.run(["cc", "-o", str(d / "layout"), str(src)], check=True)
    out = subprocess.run([str(d / "layout")], check=True, capture_output=True, text=True).stdout
    res: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] in fields:
            res[parts[0] + ".offset"] = int(parts[1])
            res[parts[0] + ".size"] = int(parts[2])
        else:
            res[parts[0]] = int(parts[1])
    return res


def test_event_struct_size_matches_the_c_header(layout: dict[str, int]) -> None:
    assert EVENT_SIZE == layout["sizeof"] == 104
    assert 8 + layout["sizeof"] == RECORD_SIZE


def test_every_field_offset_and_size_matches_the_c_header(layout: dict[str, int]) -> None:
    assert EVENT_DTYPE.fields is not None
    for name, (dtype, offset, *_) in EVENT_DTYPE.fields.items():
        assert layout[f"{name}.offset"] == offset, name
        assert layout[f"{name}.size"] == dtype.itemsize, name


def test_op_enum_mirrors_gs_op(layout: dict[str, int]) -> None:
    c_ops = {k: v for k, v in layout.items() if k.startswith("GS_OP_") and k not in ("GS_OP_MAX", "GS_OP_UNKNOWN")}
    assert len(c_ops) == len([o for o in Op if o is not Op.UNKNOWN])
    py_ids = {int(o) for o in Op}
    for name, value in c_ops.items():
        assert value in py_ids, name


def test_flag_and_stat_enums_mirror_the_header(layout: dict[str, int]) -> None:
    assert layout["GS_FLAG_ENTRY_ONLY"] == Flag.ENTRY_ONLY
    assert layout["GS_FLAG_PREEMPTED"] == Flag.PREEMPTED
    assert layout["GS_FLAG_GROUP_EXIT"] == Flag.GROUP_EXIT
    for s in Stat:
        assert layout[f"GS_STAT_{s.name}"] == int(s), s

"""Write a minimal CO-RE vmlinux.h for another architecture from the vendored x86 dump.

The BPF programs are CO-RE: libbpf relocates every field access against the
running kernel's BTF when it loads them, matching types and members by name.
A header for another architecture therefore needs only the types and members
the programs touch, each with the right name, plus that architecture's own
register layout (``struct pt_regs``), which bpf_tracing.h reads for uprobe
arguments and which is the part that really differs.

This script finds that set by compiling: it starts from an almost empty
header, compiles every ``bpf/*.bpf.c`` for the target architecture, and adds
what clang reports missing (a typedef, an enum constant, a struct, one member
of a struct) from the x86 dump, until the programs compile without a warning.
Members keep their names and declared types; a member nested in an anonymous
struct or union is lifted into its parent (libbpf looks through anonymous
members in the kernel's type when it matches). The architecture's register
structs come from the table below, never from the x86 dump, and a request for
another architecture-specific x86 type stops the script.

Usage: scripts/gen_min_vmlinux.py [--arch arm64] [--check] [-o OUTPUT]
  --arch    arm64 (default), or x86 to make a minimal x86 header (tests compare
            its CO-RE relocations with those against the full dump)
  --check   compare with OUTPUT instead of writing it; exit 1 when it differs

Exit codes: 0 written or current, 1 stale (--check), 2 usage, 3 cannot converge.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import build_native  # noqa: E402

X86_DUMP = os.path.join(ROOT, "bpf", "include", "vmlinux", "x86", "vmlinux.h")

# arm64's register structs as in Linux 6.1 (Debian 12's kernel):
# arch/arm64/include/uapi/asm/ptrace.h (user_pt_regs) and
# arch/arm64/include/asm/ptrace.h (pt_regs, little-endian), spelled as
# bpftool spells them. Later kernels renamed fields after syscallno; the
# programs read only regs[], sp, pc, orig_x0 and syscallno, which every
# arm64 kernel with BTF has.
ARM64_TYPES = {
    ("struct", "user_pt_regs"): """struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};""",
    ("struct", "pt_regs"): """struct pt_regs {
	union {
		struct user_pt_regs user_regs;
		struct {
			u64 regs[31];
			u64 sp;
			u64 pc;
			u64 pstate;
		};
	};
	u64 orig_x0;
	s32 syscallno;
	u32 unused2;
	u64 sdei_ttbr1;
	u64 pmr_save;
	u64 stackframe[2];
	u64 lockdep_hardirqs;
	u64 exit_rcu;
};""",
}
ARM64_SEEDS = [("typedef", "__u64"), ("typedef", "u64"), ("typedef", "s32"), ("typedef", "u32")]

# x86 types whose layout or members are x86's own: an arm64 program that
# needs one needs its arm64 definition added to ARM64_TYPES, not the x86 one.
X86_ONLY = {
    "pt_regs",
    "thread_struct",
    "thread_info",
    "fpu",
    "fpstate",
    "mm_context_t",
    "user_regs_struct",
    "desc_struct",
    "fred_cs",
    "fred_ss",
}

_C_TYPE_WORDS = {"long", "int", "unsigned", "signed", "short", "char", "_Bool"}


@dataclass
class Member:
    name: str
    text: str  # the declaration, indented one tab, without a newline


@dataclass
class Item:
    kind: str  # struct, union, enum, typedef
    name: str
    order: int
    text: str
    members: dict[str, Member] = field(default_factory=dict)
    member_order: list[str] = field(default_factory=list)
    closing: str = "};"


def _member_name(decl: str) -> str | None:
    """The declared name in one member or typedef declaration (None for padding)."""
    d = re.sub(r"__attribute__\(\(.*\)\)", "", decl).strip().rstrip(";").strip()
    if "(*" in d:
        m = re.search(r"\(\*\s*(\w+)", d)
        return m.group(1) if m else None
    d = re.sub(r"\s*:\s*\d+$", "", d)  # bitfield width
    d = re.sub(r"(\[[^\]]*\])+$", "", d)  # array dimensions
    m = re.search(r"(\w+)$", d)
    if not m:
        return None
    words = d.replace("*", " ").split()
    if all(w in _C_TYPE_WORDS for w in words):
        return None  # `long: 64;`: unnamed padding
    return m.group(1)


def _dedent(lines: list[str], tabs: int) -> list[str]:
    return [ln[tabs:] if ln.startswith("\t" * tabs) else ln.lstrip("\t") for ln in lines]


def _parse_members(lines: list[str], depth: int, out: Item) -> None:
    """Index the members of a body; anonymous nested members are lifted."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("{"):
            level, j = 0, i
            while True:
                level += lines[j].count("{") - lines[j].count("}")
                if level == 0:
                    break
                j += 1
            closing = lines[j].strip()
            name = None if closing == "};" else _member_name(closing[1:])
            if name is None:
                _parse_members(lines[i + 1 : j], depth + 1, out)
            else:
                block = _dedent(lines[i : j + 1], depth - 1)
                out.members[name] = Member(name, "\n".join(block))
                out.member_order.append(name)
            i = j + 1
            continue
        name = _member_name(line)
        if name is not None:
            out.members[name] = Member(name, "\t" + line.strip())
            out.member_order.append(name)
        i += 1


class Dump:
    """The items of a bpftool `format c` dump, by kind and name."""

    def __init__(self, text: str) -> None:
        self.items: dict[tuple[str, str], Item] = {}
        self.enumerators: dict[str, tuple[str, str]] = {}
        anon = 0
        for order, block in enumerate(text.split("\n\n")):
            block = block.strip("\n")
            first = block.split("\n", 1)[0]
            if first.startswith("#") or not block.endswith(";"):
                continue
            m = re.match(r"(struct|union|enum) (\w+) \{$", first)
            if first.startswith("typedef"):
                last = block.split("\n")[-1]
                name = _member_name(last[1:] if last.startswith("}") else block.replace("\n", " "))
                if name:
                    self.items[("typedef", name)] = Item("typedef", name, order, block)
            elif m:
                kind, name = m.group(1), m.group(2)
                item = Item(kind, name, order, block)
                lines = block.split("\n")
                item.closing = lines[-1]
                if kind == "enum":
                    self._enum(item, lines[1:-1])
                else:
                    _parse_members(lines[1:-1], 1, item)
                self.items[(kind, name)] = item
            elif first == "enum {":
                anon += 1
                item = Item("enum", f"(anonymous {anon})", order, block)
                self.items[("enum", item.name)] = item
                self._enum(item, block.split("\n")[1:-1])

    def _enum(self, item: Item, lines: list[str]) -> None:
        for ln in lines:
            m = re.match(r"\s*(\w+)", ln)
            if m:
                self.enumerators[m.group(1)] = ("enum", item.name)


@dataclass
class Selection:
    whole: set[tuple[str, str]] = field(default_factory=set)  # typedefs, enums, arch types
    shells: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # struct/union -> members
    forward: set[tuple[str, str]] = field(default_factory=set)


class Generator:
    def __init__(self, arch: str, dump: Dump) -> None:
        self.arch = arch
        self.dump = dump
        self.arch_types = ARM64_TYPES if arch == "arm64" else {}
        self.sel = Selection()
        if arch == "arm64":
            self.sel.whole.update(ARM64_SEEDS)

    def _dump_item(self, key: tuple[str, str]) -> Item:
        if self.arch != "x86" and key[1] in X86_ONLY and key not in self.arch_types:
            raise SystemExit(
                f"error: the programs need {key[0]} {key[1]}, whose {self.arch} layout differs from x86's\n"
                f"  fix: add its {self.arch} definition to ARM64_TYPES in scripts/gen_min_vmlinux.py, "
                "or keep the program from touching it on this architecture (bpf/include/arch.bpf.h)"
            )
        item = self.dump.items.get(key)
        if item is None:
            raise SystemExit(f"error: {key[0]} {key[1]} is not in {X86_DUMP}")
        return item

    def want(self, kind: str, name: str, member: str | None = None) -> bool:
        """Add a type, or one member of a struct or union; True when something was new."""
        key = (kind, name)
        if key in self.arch_types or kind in ("typedef", "enum"):
            if key not in self.arch_types:
                self._dump_item(key)
            new = key not in self.sel.whole
            self.sel.whole.add(key)
            return new
        item = self._dump_item(key)
        new = key not in self.sel.shells
        members = self.sel.shells.setdefault(key, [])
        if member is not None and member not in members:
            if member not in item.members:
                raise SystemExit(f"error: {kind} {name} has no member {member} in {X86_DUMP}")
            members.append(member)
            new = True
        return new

    def render(self) -> str:
        blocks: list[tuple[int, str]] = []
        for key in self.sel.whole | set(self.sel.shells):
            if key in self.arch_types:
                continue
            item = self._dump_item(key)
            if key in self.sel.shells:
                wanted = set(self.sel.shells[key])
                body = [item.members[m].text for m in item.member_order if m in wanted]
                blocks.append((item.order, "\n".join([f"{item.kind} {item.name} {{", *body, item.closing])))
            else:
                blocks.append((item.order, item.text))
        forward = sorted(f"{k} {n};" for k, n in self.sel.forward)
        parts = [HEAD.format(arch=self.arch)]
        if forward:
            parts.append("\n".join(forward))
        parts += [text for _, text in sorted(blocks)]
        parts += [text for k, text in self.arch_types.items() if k in self.sel.whole]
        parts.append(TAIL)
        return "\n\n".join(parts) + "\n"


HEAD = """\
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)
#endif"""

TAIL = """\
#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

#endif /* __VMLINUX_H__ */"""

_Q = r"'(?:const |volatile )*"
_RULES = [
    (re.compile(r"unknown type name '(\w+)'"), lambda g: [("typedef", g[0], None)]),
    (re.compile(r"no member named '(\w+)' in " + _Q + r"(struct|union) (\w+)'"), lambda g: [(g[1], g[2], g[0])]),
    (re.compile(r"incomplete[^']*" + _Q + r"(struct|union|enum) (\w+)'"), lambda g: [(g[0], g[1], None)]),
    (re.compile(r"use of undeclared identifier '(\w+)'"), lambda g: [("enumerator", g[0], None)]),
    (re.compile(r"declaration of '(struct|union) (\w+)' will not be visible"), lambda g: [("forward", g[0], g[1])]),
]


def compile_all(arch: str, header_dir: str, syntax_only: bool = True) -> str:
    """Diagnostics of compiling every program against header_dir/vmlinux.h."""
    inc = os.path.join(ROOT, "bpf", "include")
    sources = [os.path.join(ROOT, "bpf", f"{n}.bpf.c") for n in build_native.BPF_SOURCES]
    cmd = [
        build_native.find_clang(),
        "-fsyntax-only",
        "-ferror-limit=0",
        "-fno-caret-diagnostics",
        "-target",
        "bpf",
        f"-D__TARGET_ARCH_{arch}",
        "-I",
        inc,
        "-I",
        header_dir,
        "-Wall",
        "-Wno-unused-function",
        *sources,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stderr


def generate(arch: str) -> str:
    with open(X86_DUMP) as f:
        gen = Generator(arch, Dump(f.read()))
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(200):
            text = gen.render()
            with open(os.path.join(tmp, "vmlinux.h"), "w") as f:
                f.write(text)
            diags = compile_all(arch, tmp)
            if not re.search(r"(error|warning):", diags):
                return text
            progress = False
            for line in diags.splitlines():
                for rx, to_wants in _RULES:
                    m = rx.search(line)
                    if not m:
                        continue
                    for kind, name, member in to_wants(m.groups()):
                        if kind == "enumerator":
                            key = gen.dump.enumerators.get(name)
                            if key is not None:
                                progress |= gen.want(*key)
                        elif kind == "forward":
                            fwd = (name, member or "")
                            progress |= fwd not in gen.sel.forward
                            gen.sel.forward.add(fwd)
                        elif kind == "typedef" and ("typedef", name) not in gen.dump.items:
                            continue
                        else:
                            progress |= gen.want(kind, name, member)
            if not progress:
                raise SystemExit(f"error: the programs do not compile, and the x86 dump has nothing to add:\n{diags}")
    raise SystemExit("error: no header after 200 rounds")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--arch", choices=["arm64", "x86"], default="arm64")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    out = args.output or os.path.join(ROOT, "bpf", "include", "vmlinux", args.arch, "vmlinux.h")
    if args.arch == "x86" and not args.output:
        ap.error("--arch x86 needs -o: the vendored x86 header is the full dump (scripts/gen_vmlinux.sh)")
    text = PREAMBLE.format(arch=args.arch) + generate(args.arch)
    if args.check:
        try:
            with open(out) as f:
                current = f.read()
        except OSError:
            current = ""
        if current != text:
            print(f"{out} is not what scripts/gen_min_vmlinux.py --arch {args.arch} writes: run it", file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    print(f"wrote {out} ({text.count(chr(10))} lines)", file=sys.stderr)
    return 0


PREAMBLE = """\
/* A minimal CO-RE vmlinux.h for {arch}: only the kernel types and members the
 * programs in bpf/ use, each as the kernel names it. Not a dump of a kernel.
 *
 * Written by scripts/gen_min_vmlinux.py --arch {arch}: it compiles the
 * programs for {arch} and takes what they lack from the vendored x86 dump
 * (bpf/include/vmlinux/x86/vmlinux.h); members nested in anonymous structs
 * are lifted into their parent. Offsets here are placeholders: libbpf
 * relocates every access against the running kernel's BTF by name, and
 * preserve_access_index (below, as bpftool emits it) makes each one a CO-RE
 * access. The register structs (struct user_pt_regs, struct pt_regs) are
 * {arch}'s own, as in the kernel's asm/ptrace.h, never x86's.
 *
 * Regenerate after a program starts using another kernel type or member:
 *   scripts/gen_min_vmlinux.py --arch {arch}
 * Or replace it with a full dump from a real {arch} machine with BTF:
 *   bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux/{arch}/vmlinux.h
 * (scripts/gen_vmlinux.sh, run on that machine, does the same); then
 * tests/unit/packaging/test_cross_arch.py checks the dump instead.
 */
"""

if __name__ == "__main__":
    sys.exit(main())

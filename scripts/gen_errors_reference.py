"""Write docs/errors.md, every error gpuscope reports, from the code that raises it.

Read from the source with ``ast`` (nothing is imported or run): each class
derived from ``GpuscopeError`` with its exit code and default fix, then each
``raise`` of one of them, grouped by module, with its message and fix as the
code spells them (``{name}`` marks a part filled in at run time). A message
the code builds elsewhere is shown as such.

Usage: .venv/bin/python scripts/gen_errors_reference.py [--check]
--check writes nothing and exits 1 when docs/errors.md differs from what would be written.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "gpuscope"
REFERENCE = ROOT / "docs" / "errors.md"
REGENERATE = ".venv/bin/python scripts/gen_errors_reference.py"
EXIT_NAMES = {"EXIT_OK": 0, "EXIT_FAILURE": 1, "EXIT_USAGE": 2, "EXIT_ENVIRONMENT": 3}
BASE = "GpuscopeError"

HEADER = """# Errors: every message, its exit code and its fix

gpuscope reports a failure as one line on stderr, `error: MESSAGE`, and
usually a second, `  fix: WHAT TO DO`; the exit code says what kind of failure
it was. A traceback is printed only with `-vv`, and only for a bug.

| exit code | meaning |
| --- | --- |
| 0 | success |
| 1 | the request failed (a damaged recording, an unreachable node, a full disk …) |
| 2 | the request is wrong (an option, a value, SQL that writes) |
| 3 | this machine cannot do it (no root or capabilities, no BTF, no libbpf, no CUDA library) |

Servers answer with the same messages in their error shape: the dashboard's
API as `{"error": {"code", "message"}}` with an HTTP status, the MCP server
as a tool error.

This page is generated from the code (`scripts/gen_errors_reference.py`;
a test checks it is current). In messages, `{…}` is a part filled in at run time.
"""


class ErrorClass(NamedTuple):
    name: str
    bases: tuple[str, ...]
    module: str
    exit_name: str | None
    remedy: str | None


class Raise(NamedTuple):
    module: str
    cls: str
    message: str
    remedy: str | None


def _text(node: ast.expr | None) -> str | None:
    """A string literal or f-string as written, ``{expr}`` for what is filled in; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + ast.unparse(v.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def scan() -> tuple[dict[str, ErrorClass], list[Raise]]:
    """Every class and every raise in the package (classes by name: they are unique in gpuscope)."""
    classes: dict[str, ErrorClass] = {}
    raises: list[tuple[str, str, ast.Call]] = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                exit_name, remedy = None, None
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.Assign)
                        and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)
                    ):
                        target = stmt.targets[0].id
                        if target == "exit_code" and isinstance(stmt.value, ast.Name):
                            exit_name = stmt.value.id
                        elif target == "remedy":
                            remedy = _text(stmt.value)
                bases = tuple(b.id for b in node.bases if isinstance(b, ast.Name))
                classes[node.name] = ErrorClass(node.name, bases, module, exit_name, remedy)
            elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                raises.append((module, node.exc.func.id, node.exc))
    ours = {name: c for name, c in classes.items() if _is_ours(name, classes)}
    found = []
    for module, cls, call in raises:
        if cls not in ours:
            continue
        message = _text(call.args[0]) if call.args else None
        remedy_node = next((k.value for k in call.keywords if k.arg == "remedy"), None)
        if remedy_node is None and len(call.args) > 1:
            remedy_node = call.args[1]
        remedy = _text(remedy_node) if remedy_node is not None else None
        if remedy_node is not None and remedy is None:
            remedy = "(built at run time)"
        found.append(
            Raise(module, cls, message if message is not None else "(built at run time: see the code)", remedy)
        )
    return ours, found


def _is_ours(name: str, classes: dict[str, ErrorClass]) -> bool:
    seen = set()
    while name in classes and name not in seen:
        if name == BASE:
            return True
        seen.add(name)
        c = classes[name]
        if not c.bases:
            return False
        name = c.bases[0]
    return name == BASE


def _inherited(name: str, classes: dict[str, ErrorClass], field: str) -> str | None:
    while name in classes:
        value = getattr(classes[name], field)
        if value is not None:
            return str(value)
        bases = classes[name].bases
        if not bases:
            return None
        name = bases[0]
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(classes: dict[str, ErrorClass], raises: list[Raise]) -> str:
    out = [HEADER, "## Kinds of error", "", "| error | exit code | default fix |", "| --- | --- | --- |"]
    for name in sorted(classes):
        code = EXIT_NAMES.get(_inherited(name, classes, "exit_name") or "EXIT_FAILURE", 1)
        remedy = _inherited(name, classes, "remedy") or ""
        out.append(f"| `{name}` ({classes[name].module}) | {code} | {_cell(remedy)} |")
    by_module: dict[str, list[Raise]] = {}
    for r in raises:
        by_module.setdefault(r.module, []).append(r)
    out += ["", "## Every message, by module", ""]
    for module in sorted(by_module):
        out += [f"### `{module}`", "", "| message | exit code | fix |", "| --- | --- | --- |"]
        rows = sorted({(r.message, r.cls, r.remedy) for r in by_module[module]})
        for message, cls, remedy in rows:
            code = EXIT_NAMES.get(_inherited(cls, classes, "exit_name") or "EXIT_FAILURE", 1)
            fix = remedy if remedy is not None else (_inherited(cls, classes, "remedy") or "(the message says it)")
            out.append(f"| `{_cell(message)}` | {code} | {_cell(fix)} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/errors.md is out of date")
    args = ap.parse_args()
    text = render(*scan())
    if args.check:
        current = REFERENCE.read_text() if REFERENCE.exists() else ""
        if current != text:
            print(f"{REFERENCE} is out of date: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    REFERENCE.write_text(text)
    print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Docs are kept honest by tests: schema, rules, commands and their options are all documented."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from gpuscope.analysis.cross_node import KIND as CROSS_NODE_KIND
from gpuscope.analysis.rules import RULES
from gpuscope.cli import COMMANDS, build_parser
from gpuscope.store.connect import connect_writer

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Commands whose guide documents every option (pages written with the option table).
GUIDES_WITH_EVERY_OPTION = ("trace", "check", "import", "dashboard", "mcp")


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (\w+)\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_table_view_and_column_is_in_docs_schema(tmp_path: Path) -> None:
    conn = connect_writer(tmp_path / "a.db")
    sections = _sections((ROOT / "docs" / "schema.md").read_text())
    objects = conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    missing = []
    for (name,) in objects:
        if name not in sections:
            missing.append(name)
            continue
        text = sections[name]
        for parent in ("events", "cuda_calls", "nccl_calls"):
            if f"every column of `{parent}`" in text:
                text += sections.get(parent, "") + sections.get("events", "")
        for col in conn.execute(f"PRAGMA table_info({name})").fetchall():
            if f"`{col[1]}`" not in text:
                missing.append(f"{name}.{col[1]}")
    assert not missing, f"undocumented in docs/schema.md: {missing}"


def test_every_subcommand_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in COMMANDS:
        assert f"gpuscope {name}" in readme, name


def _markdown_links(text: str) -> set[str]:
    return {target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", text)}


def _rule_table_kinds() -> list[str]:
    text = (DOCS / "explain.md").read_text()
    catalogue = text.split("## Rule catalogue", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9-]+)` \|", catalogue, flags=re.M)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _load_script(name: str) -> ModuleType:
    """A script of scripts/ as a module (they are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_cli_reference_script() -> ModuleType:
    return _load_script("gen_cli_reference")


def test_every_explain_rule_kind_has_exactly_one_row_in_the_rule_table() -> None:
    # given the kinds the registry's rules give their findings (a rule's id), the fleet's own cross-node kind
    # (`explain --nodes`), and the rows of the docs table
    kinds = {rule.id for rule in RULES} | {CROSS_NODE_KIND}
    rows = _rule_table_kinds()

    # then each kind has one row, and no row names a rule that is gone
    assert sorted(kinds - set(rows)) == [], "rules missing from the table in docs/explain.md"
    assert sorted(set(rows) - kinds) == [], "rows in docs/explain.md for rules that are not in RULES (or the fleet's)"
    assert len(rows) == len(set(rows)), "a rule has two rows in docs/explain.md"


def test_the_cli_reference_is_what_gen_cli_reference_writes() -> None:
    script = _load_cli_reference_script()
    expected = script.render(script.help_texts())
    current = (DOCS / "cli.md").read_text()
    assert current == expected, f"docs/cli.md is out of date with --help: run {script.REGENERATE}"


def test_the_errors_reference_is_what_gen_errors_reference_writes() -> None:
    script = _load_script("gen_errors_reference")
    classes, raises = script.scan()
    # every error class of the package is found, with the exit codes the code gives them
    assert {"UsageError", "DatabaseError", "QueryRefusedError", "PermissionDeniedError"} <= set(classes)
    assert len(raises) > 100
    current = (DOCS / "errors.md").read_text()
    assert current == script.render(classes, raises), f"docs/errors.md is out of date: run {script.REGENERATE}"


def test_the_cli_reference_has_a_section_for_every_command() -> None:
    text = (DOCS / "cli.md").read_text()
    headings = re.findall(r"^## `gpuscope ?(\w*)`$", text, flags=re.M)
    assert headings == ["", *COMMANDS]


def test_every_subcommand_has_a_guide_or_a_cli_reference_section_linked_from_the_readme() -> None:
    # given the docs pages the README links to
    linked = _markdown_links((ROOT / "README.md").read_text())

    # then each command's own page is linked, and a command without one is in the linked reference
    undocumented = []
    for name in COMMANDS:
        page = f"docs/{name}.md"
        if (ROOT / page).exists():
            if page not in linked:
                undocumented.append(f"{name}: {page} is not linked from README.md")
        elif "docs/cli.md" not in linked:
            undocumented.append(f"{name}: no docs/{name}.md, and docs/cli.md is not linked from README.md")
    assert not undocumented


def test_every_page_the_readme_links_to_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    local = {t for t in _markdown_links(readme) if not t.startswith(("http://", "https://"))}
    assert sorted(t for t in local if not (ROOT / t).exists()) == []


@pytest.mark.parametrize("name", GUIDES_WITH_EVERY_OPTION)
def test_every_option_of_the_command_is_described_in_its_guide(name: str) -> None:
    # given the command's options (hidden ones aside) and positionals
    parser = _subparsers()[name]
    shown = [a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    # --verbose is the global option, accepted after every command too: docs/cli.md describes it once
    options = [max(a.option_strings, key=len) for a in shown if a.option_strings and a.dest != "verbose"]
    positionals = [str(a.metavar or a.dest) for a in shown if not a.option_strings]

    # then the guide names each option in code, and each positional inside a code span
    guide = (DOCS / f"{name}.md").read_text()
    missing = [opt for opt in options if not re.search(rf"`{re.escape(opt)}[` ]", guide)]
    missing += [p for p in positionals if not re.search(rf"`[^`]*\b{re.escape(p)}\b[^`]*`", guide, flags=re.I)]
    assert not missing, f"options of gpuscope {name} not described in docs/{name}.md"


def _load_readme_samples_script() -> ModuleType:
    return _load_script("readme_samples")


def test_no_doc_shows_a_path_of_the_machine_it_was_written_on() -> None:
    # given the README and every page under docs/ (samples and examples included)
    machine_paths = _load_readme_samples_script().machine_paths
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

    # then none names this checkout, a home folder or a random temporary folder
    found = {str(p.relative_to(ROOT)): machine_paths(p.read_text(), ROOT) for p in pages}
    assert {page: paths for page, paths in found.items() if paths} == {}


def _finding_queries() -> dict[str, str]:
    text = (DOCS / "explain.md").read_text()
    section = text.split("## Reproducing a finding with one query", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sql\n(-- [a-z0-9-]+:.*?)```", section, flags=re.S)
    queries = {}
    for b in blocks:
        name = re.match(r"-- ([a-z0-9-]+):", b)
        assert name is not None, b  # the block pattern above starts every block so
        queries[name.group(1)] = b.strip().rstrip(";")
    return queries


def test_every_rule_kind_has_a_query_that_reproduces_its_measure_and_runs(tmp_path: Path) -> None:
    import gzip
    import shutil

    import gpuscope

    queries = _finding_queries()
    assert sorted(queries) == sorted(r.id for r in RULES)
    # on a real PyTorch recording from an H100 (NCCL, graphs, both CUDA layers, sched and host events)
    db = tmp_path / "features.db"
    with gzip.open(ROOT / "tests" / "fixtures" / "gpu" / "h100-features.db.gz", "rb") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    trace = gpuscope.open(db, frame="rows")
    for sql in queries.values():
        trace.query(sql)  # raises on a query that does not run
    # and the cpu-preemption query counts every call once, the graph-recapture one every launch
    calls = trace.query("SELECT count(*) AS n FROM cuda_calls")[0]["n"]
    assert sum(r["calls"] for r in trace.query(queries["cpu-preemption"])) == calls
    launches = trace.query("SELECT count(*) AS n FROM events WHERE op IN ('cudaGraphLaunch', 'cuGraphLaunch')")
    assert sum(r["launches"] for r in trace.query(queries["graph-recapture"])) == launches[0]["n"] == 100


def test_the_documented_percentile_query_gives_explains_percentiles(tmp_path: Path) -> None:
    import gzip
    import shutil

    import numpy as np

    import gpuscope
    from gpuscope.analysis.stats import pct

    text = (DOCS / "explain.md").read_text()
    section = text.split("## Reproducing a finding with one query", 1)[1].split("```sql\n", 1)[1]
    sql = section.split("```", 1)[0].strip().rstrip(";")
    assert "p50_ns" in sql and "p99_ns" in sql
    # on every row of a real recording
    db = tmp_path / "features.db"
    with gzip.open(ROOT / "tests" / "fixtures" / "gpu" / "h100-features.db.gz", "rb") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    trace = gpuscope.open(db, frame="rows")
    got = {r["op"]: (r["calls"], r["p50_ns"], r["p99_ns"]) for r in trace.query(sql)}
    # the same nearest-rank percentiles explain computes from rows
    rows = trace.query("SELECT op, duration_ns FROM cuda_calls")
    want = {}
    for op in {r["op"] for r in rows}:
        d = np.array([r["duration_ns"] for r in rows if r["op"] == op])
        want[op] = (len(d), pct(d, 50), pct(d, 99))
    assert got == want and len(want) > 20


def _first_column(doc: str, header: str) -> list[str]:
    """The first column of the markdown table whose header row starts with ``header``."""
    text = (DOCS / doc).read_text()
    table = text.split(header, 1)[1].split("\n\n", 1)[0]
    return [row.split("|")[1].strip() for row in table.splitlines()[2:] if row.startswith("|")]


def test_the_dashboard_guide_lists_exactly_the_apis_endpoints() -> None:
    from gpuscope.serve.endpoints import ENDPOINTS

    listed = {
        m for cell in _first_column("dashboard.md", "| endpoint |") for m in re.findall(r"`(GET|POST) ([\w.-]+)`", cell)
    }
    served = {("GET", ep.path.lstrip("/")) for ep in ENDPOINTS} | {("POST", "query")}
    assert listed == served


def test_the_mcp_guide_lists_exactly_the_servers_tools(tmp_path: Path) -> None:
    import anyio

    from gpuscope.serve.mcp_server import build_server

    server = build_server(tmp_path / "none.db")
    tools = {t.name for t in anyio.run(server.list_tools)}
    listed = {cell.strip("`") for cell in _first_column("mcp.md", "| tool |")}
    assert listed == tools

"""The layout's import rules (``shared/design.md``, "Layout"), checked on every import raysight's source makes,
at module level or inside a function: what each part may not know."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import raysight

SOURCE = Path(raysight.__file__).parent

# part → the parts it must not import (a part: a package of raysight, or a top-level module by its name)
FORBIDDEN = {
    "wire": {"*"},  # shared by every part, so it knows none
    "sql_literals": {"*"},  # SQL literals of Python values, written by any part
    "tables": {"*"},  # how a table is declared: pure, for the parsers beside which their tables are declared
    "ingest": {"store", "server", "instrument", "agent", "client", "cli"},  # pure: records from what was sent
    "store": {"server", "client", "cli", "agent", "instrument"},  # the database, knowing nothing of HTTP
    "instrument": {"server", "store", "cli", "agent", "client"},  # runs inside Ray's workers
    "agent": {"store", "server", "cli"},  # reaches the server over HTTP only
    "client": {"store", "server", "cli", "agent", "instrument"},
    "cli": {"store"},  # goes through the server's HTTP API (`raysight server` starts the server, so it may import it)
    "server": {"cli", "client", "agent", "instrument"},
    # pure: evaluates over a Source (the scrapes' read model implements one)
    "promql": {"store", "server", "client", "cli", "agent", "instrument", "ingest", "signals"},
    "signals": {"server", "client", "cli", "agent", "instrument"},  # each signal's parser, writes, tables, reads
    "signal parser": {"store", "server", "client", "cli", "agent", "instrument"},  # a signal's parse.py: pure
}
# part → the third-party packages it must not import: the pure parts hold no database
FORBIDDEN_PACKAGES = {"promql": {"duckdb"}, "ingest": {"duckdb"}, "tables": {"duckdb"}, "signal parser": {"duckdb"}}


def part_of(path: Path) -> str:
    """``ingest/otlp.py`` → ``ingest``, ``wire.py`` → ``wire``, ``signals/run_exits/parse.py`` → ``signal parser``."""
    parts = path.relative_to(SOURCE).parts
    return "signal parser" if parts[0] == "signals" and parts[-1] == "parse.py" else parts[0].removesuffix(".py")


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, list[str]]]:
    """(line, name split at its dots) of each module an import in ``tree`` may name (``from m import a``: ``m`` and
    ``m.a``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            yield node.lineno, module.split(".")


def imported_parts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, part of raysight) of each import in ``tree``."""
    for line, name in imported_modules(tree):
        if name[0] == "raysight" and len(name) > 1:
            yield line, name[1]


def forbidden_imports(part: str, tree: ast.AST) -> Iterator[str]:
    """``line (part) imports module`` for each import in ``tree`` (a module of ``part``) that the layout forbids."""
    forbidden = FORBIDDEN.get(part, set())
    for line, imported in imported_parts(tree):
        if imported != part and ("*" in forbidden or imported in forbidden):
            yield f"{line} ({part}) imports raysight.{imported}"
    for line, name in imported_modules(tree):
        if name[0] in FORBIDDEN_PACKAGES.get(part, set()):
            yield f"{line} ({part}) imports {name[0]}"


def test_each_part_imports_only_what_the_layout_lets_it() -> None:
    broken = [
        f"{path.relative_to(SOURCE)}:{found}"
        for path in sorted(SOURCE.rglob("*.py"))
        for found in forbidden_imports(part_of(path), ast.parse(path.read_text(), str(path)))
    ]
    assert not broken, "imports the layout forbids:\n" + "\n".join(sorted(set(broken)))


def test_the_rules_catch_a_forbidden_import() -> None:
    tree = ast.parse("def f():\n    from raysight.store.store import Store\nimport raysight.wire")
    assert list(imported_parts(tree)) == [(3, "wire"), (2, "store"), (2, "store")]
    assert part_of(SOURCE / "cli" / "server.py") == "cli" and "store" in FORBIDDEN["cli"]


def test_the_rules_catch_a_database_import_in_a_pure_part() -> None:
    tree = ast.parse("import numpy, duckdb as db\ndef f():\n    from duckdb import DuckDBPyConnection\nimport duckdbx")
    assert sorted(set(forbidden_imports("promql", tree))) == ["1 (promql) imports duckdb", "3 (promql) imports duckdb"]
    assert list(forbidden_imports("ingest", ast.parse("import duckdb"))) == ["1 (ingest) imports duckdb"]
    assert list(forbidden_imports("store", tree)) == []
    parser = part_of(SOURCE / "signals" / "run_exits" / "parse.py")
    assert list(forbidden_imports(parser, ast.parse("import duckdb"))) == ["1 (signal parser) imports duckdb"]
    assert part_of(SOURCE / "signals" / "run_exits" / "apply.py") == "signals"
    read_model = "from raysight.signals.scrapes.metrics_query import SessionMetrics"
    assert list(forbidden_imports("promql", ast.parse(read_model))) == [
        "1 (promql) imports raysight.signals",
        "1 (promql) imports raysight.signals",
    ]


# A string that names one of raysight's or Ray's URL paths (``wire.py``'s), to be written nowhere else
PATH_PREFIXES = ("/api/", "/ingest/", "/v1/", "/ui/", "/sessions/", "/metrics")
BARE_PATHS = ("/api", "/ui")


def path_literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of each string constant in ``tree`` (f-strings' parts too, docstrings aside) that begins with a
    URL path of raysight's or Ray's."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else None
        if isinstance(text, str) and (text.startswith(PATH_PREFIXES) or text in BARE_PATHS):
            yield node.lineno, text


def test_no_url_path_is_written_outside_the_wire_module() -> None:
    found = [
        f"{path.relative_to(SOURCE)}:{line}: {text!r}"
        for path in sorted(SOURCE.rglob("*.py"))
        if path != SOURCE / "wire.py"
        for line, text in path_literals(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, "URL paths written outside wire.py:\n" + "\n".join(found)


def test_a_path_literal_is_found_and_a_docstring_is_not() -> None:
    tree = ast.parse('"""GET /api/raysight/logs"""\nurl = f"{base}/ingest/agent/logs"\nok = "/tmp/x"')
    assert list(path_literals(tree)) == [(2, "/ingest/agent/logs")]

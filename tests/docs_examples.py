"""The command examples of the documentation (a ``$ `` line of a ``console`` block, in the README and under docs/):
what tests/test_docs.py runs, and what a live test that runs one of them reads."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Example:
    """A command a page shows, as written after its ``$ ``."""

    page: Path
    line: int
    command: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: $ {self.command}"

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)


def examples(page: Path) -> Iterator[Example]:
    """The ``$ `` lines of ``page``'s ``console`` blocks."""
    in_console = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_console = not in_console and line.strip() == "```console"
        elif in_console and line.startswith("$ "):
            yield Example(page, number, line[2:])


EXAMPLES = [example for page in PAGES for example in examples(page)]


def python_blocks(page: Path) -> Iterator[tuple[int, str]]:
    """The ``python`` blocks of ``page``: the line each starts on, and its code."""
    lines = page.read_text().splitlines()
    starts = [number for number, line in enumerate(lines) if line.strip() == "```python"]
    for start in starts:
        end = next(number for number in range(start + 1, len(lines)) if lines[number].startswith("```"))
        yield start + 2, "\n".join(lines[start + 1 : end])


PYTHON = [(page, line, code) for page in PAGES for line, code in python_blocks(page)]


def documented(prefix: str) -> list[str]:
    """The words of the one example that is ``prefix`` and at most options after it (a live test runs it)."""
    found = {tuple(e.argv) for e in EXAMPLES if e.argv[: len(prefix.split())] == prefix.split()}
    assert len(found) == 1, f"the docs show {len(found)} different examples of {prefix!r}: {found}"
    return list(found.pop())

"""The documentation's generated parts, made from the code they describe: every command of `raysight` with its
options (their help as `--help` gives it), and the settings table (`raysight server`'s options, the environment
variables raysight's parts read). Each part sits in a page between ``<!-- generated: NAME -->`` and
``<!-- end generated -->``; ``python build_support/docs_reference.py`` writes them, and tests/test_docs.py fails when
a page's part differs from what the code makes of it.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from raysight.cli import SECTIONS, main
from raysight.settings import CLIENT_ENVIRONMENT, SERVER, Setting

DOCS = Path(__file__).resolve().parent.parent / "docs"
PART = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _commands(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """``command`` and every command under it, depth first, in the order they were added."""
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _context(path: tuple[str, ...], command: click.Command) -> click.Context:
    """The context `raysight` gives ``command`` (at ``path``), as `--help` sees it (click keeps the help option a
    context makes on its command: it must be the one `raysight` makes)."""
    root = click.Context(main, info_name=path[0], **main.context_settings)
    return root if len(path) == 1 else click.Context(command, info_name=path[-1], parent=root)


def _help(command: click.Command) -> str:
    """``command``'s help as Markdown: its example (see :data:`raysight.cli.SECTIONS`) in code."""
    text = inspect.cleandoc((command.help or "").replace("\b\n", ""))
    return re.sub(r"^Example: (.*)$", r"Example: `\1`", text, count=1, flags=re.M)


def _section(path: tuple[str, ...], command: click.Command) -> str:
    """One command: its usage, its help, and its options as its `--help` lists them (each with its environment
    variable and default where it shows them)."""
    ctx = _context(path, command)
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    out = [f"### `{ctx.command_path}`\n", f"```text\n{usage}\n```\n", f"{_help(command)}\n"]
    params = [param for param in command.get_params(ctx) if param is not command.get_help_option(ctx)]
    records = filter(None, (param.get_help_record(ctx) for param in params))
    rows = [f"| `{_cell(names)}` | {_cell(text)} |" for names, text in records]
    if rows:
        out.append("| option | what it does |\n|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def cli_reference() -> str:
    """`raysight` itself, then every command by section as `raysight --help` lists them."""
    out = [_section(("raysight",), main)]
    for title, commands in SECTIONS.items():
        out.append(f"## {title}\n")
        out.extend(
            _section(path, command)
            for top, _ in commands
            for path, command in _commands(top, ("raysight", top.name or ""))
        )
    return "\n".join(out)


def _setting_default(setting: Setting) -> str:
    if setting.shown is not None:
        return setting.shown
    if setting.kind is bool:
        return f"`--{'' if setting.default else 'no-'}{setting.name}`"
    return "" if setting.default in (None, ()) else f"`{setting.default}`"


def server_settings() -> str:
    """`raysight server`'s options, as the settings table declares them."""
    rows = [
        f"| `--{s.name}{f' {s.metavar}' if s.metavar else ''}` | {f'`{s.env}`' if s.env else ''} | "
        f"{_setting_default(s)} | {_cell(s.help)} |"
        for s in SERVER
    ]
    return "| option | environment variable | default | meaning |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"


def client_environment() -> str:
    """The environment variables raysight's other parts read."""
    rows = [f"| `{v.name}` | {_cell(v.help)} |" for v in CLIENT_ENVIRONMENT]
    return "| variable | meaning |\n|---|---|\n" + "\n".join(rows) + "\n"


PARTS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "server-settings": server_settings,
    "client-environment": client_environment,
}


def regenerated(text: str) -> str:
    """``text`` with each of its generated parts made again."""

    def fill(match: re.Match[str]) -> str:
        make = PARTS.get(match["name"])
        if make is None:
            raise KeyError(f"no generated part is named {match['name']!r}; there are {sorted(PARTS)}")
        return f"{match.group(1)}{make()}{match.group(4)}"

    return PART.sub(fill, text)


def pages() -> Iterator[Path]:
    """The pages that hold a generated part."""
    return (page for page in sorted(DOCS.rglob("*.md")) if PART.search(page.read_text()))


if __name__ == "__main__":
    for page in pages():
        text = page.read_text()
        if (new := regenerated(text)) != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(DOCS.parent)}", file=sys.stderr)

"""The `raysight` command."""

from __future__ import annotations

import inspect
import shlex
from typing import Any

import click

from raysight import __version__
from raysight.cli.agent import agent_cmd
from raysight.cli.captures import profiles_cmd
from raysight.cli.debug import debug_cmd
from raysight.cli.failures import errors_cmd
from raysight.cli.logs import logs_cmd
from raysight.cli.metrics import metrics_cmd
from raysight.cli.node import start_cmd, stop_cmd
from raysight.cli.poll import poll_cmd
from raysight.cli.profile import profile_cmd
from raysight.cli.query import doctor_cmd, get_cmd, list_cmd, reindex_cmd, sessions_cmd, summary_cmd
from raysight.cli.run import demo_cmd, env_cmd, run_cmd
from raysight.cli.serve import serve_cmd
from raysight.cli.server import server_cmd
from raysight.cli.status import status_cmd
from raysight.cli.timeline import timeline_cmd
from raysight.cli.traces import traces_cmd
from raysight.errors import BadQuery, RaysightError


class RaysightGroup(click.Group):
    """Turns raysight's errors into one-line CLI errors at this one boundary: a query the user must fix (a bad
    filter or sort) exits 2 like any usage error; anything else (unreachable, unauthorised, not found) exits 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BadQuery as exc:
            raise click.UsageError(str(exc)) from None
        except RaysightError as exc:
            raise click.ClickException(str(exc)) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by what they are for (:data:`SECTIONS`), each section in the order it lists them."""
        for title, commands in SECTIONS.items():
            with formatter.section(title):
                formatter.write_dl([(command.name or "", _summary(command)) for command, _ in commands])


@click.group(cls=RaysightGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raysight")
def main() -> None:
    """raysight: Ray's monitoring toolbox, with history that outlives the cluster.

    Start a server (`raysight server`), point Ray at it (`raysight run -- python app.py`, or `raysight start` in place
    of `ray start`), then ask as you would ask Ray: `raysight list actors`, `raysight summary tasks`.
    """


# Every command under what it is for, each with the one example its help leads with (its arguments after `raysight`)
SECTIONS: dict[str, tuple[tuple[click.Command, tuple[str, ...]], ...]] = {
    "Recording": (
        (server_cmd, ("server", "--data-dir", "/var/lib/raysight")),
        (run_cmd, ("run", "--", "python", "app.py")),
        (start_cmd, ("start", "--head", "--server", "http://head:8271", "--cluster", "prod", "--num-cpus=8")),
        (stop_cmd, ("stop",)),
        (env_cmd, ("env", "--server", "http://head:8271", "--cluster", "prod")),
        (agent_cmd, ("agent", "--server", "http://head:8271")),
        (poll_cmd, ("poll", "--dashboard", "http://head:8265", "--server", "http://head:8271")),
        (demo_cmd, ("demo",)),
    ),
    "Querying": (
        (sessions_cmd, ("sessions",)),
        (list_cmd, ("list", "tasks", "--filter", "state=FAILED")),
        (get_cmd, ("get", "actors", "5c6b7d40e6a24a9b7c4e06ab01000000")),
        (summary_cmd, ("summary", "tasks", "--session", "prod")),
        (errors_cmd, ("errors", "--since", "-1h")),
        (logs_cmd, ("logs", "--grep", "CUDA error", "--follow")),
        (traces_cmd, ("traces", "--errors", "--min-duration", "250ms")),
        (profile_cmd, ("profile", "--task", "c2668a65bda616c1ffffffffffffffffffffffff01000000", "-o", "task.svg")),
        (timeline_cmd, ("timeline", "-o", "trace.json")),
        (status_cmd, ("status", "--at", "-10m")),
        (serve_cmd, ("serve", "status", "--at", "-10m")),
        (metrics_cmd, ("metrics", "top")),
    ),
    "Debugging": (
        (debug_cmd, ("debug", "attach", "3f2a9c1e5b7d4e60")),
        (profiles_cmd, ("profiles", "--actor", "5c6b7d40e6a24a9b7c4e06ab01000000")),
    ),
    "Tools": (
        (doctor_cmd, ("doctor",)),
        (reindex_cmd, ("reindex",)),
    ),
}


SHORT_HELP = 64  # characters of a command's line in `raysight --help`: its help's first sentence, cut to fit 80


def _leading_with(command: click.Command, example: tuple[str, ...]) -> click.Command:
    """``command`` whose help starts with ``example``, a paragraph of its own."""
    command.help = f"\b\nExample: {shlex.join(['raysight', *example])}\n\n{inspect.cleandoc(command.help or '')}"
    return command


def _summary(command: click.Command) -> str:
    """The first sentence of ``command``'s help after its example, cut at a word to :data:`SHORT_HELP`."""
    text = (command.help or "").split("\n\n", 2)[1]
    sentence = " ".join(text.split()).split(". ")[0]
    return sentence if len(sentence) <= SHORT_HELP else sentence[: SHORT_HELP - 3].rsplit(" ", 1)[0] + "..."


for _commands in SECTIONS.values():
    for _command, _example in _commands:
        main.add_command(_leading_with(_command, _example))

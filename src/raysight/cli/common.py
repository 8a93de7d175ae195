"""Options every query command shares, and the one place client errors become CLI errors."""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
import orjson

from raysight import units
from raysight.cli.render import FORMATS
from raysight.client import Client
from raysight.config import is_loopback
from raysight.settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_ADMIN_TOKEN,
    ENV_METRICS_DROP,
    ENV_METRICS_KEEP,
    ENV_SERVER,
    SECRETS_FILE,
    default_data_dir,
)

F = TypeVar("F", bound=Callable[..., Any])


def server_option(fn: F) -> F:
    return click.option(
        "--server",
        envvar=ENV_SERVER,
        metavar="URL",
        help=f"raysight server [env {ENV_SERVER}; default http://{DEFAULT_HOST}:{DEFAULT_PORT}].",
    )(fn)


def client_options(fn: F) -> F:
    """--server and --format, which every query command takes."""
    text = "Output format [table; YAML for get and list --detail, as Ray]."
    fn = click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help=text)(fn)
    return server_option(fn)


def session_option(fn: F) -> F:
    return click.option(
        "--session", metavar="NAME", help="Session name or label; '*' for all. Default: the one that started last."
    )(fn)


def _pattern(ctx: click.Context, param: click.Parameter, value: str | None) -> re.Pattern[str] | None:
    try:
        return re.compile(value) if value else None
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}") from None


def metrics_options(fn: F) -> F:
    """--metrics-keep and --metrics-drop: the metric families an agent sends (``agent/metrics_scrape.Families``)."""
    for flag, env, text in (
        ("--metrics-drop", ENV_METRICS_DROP, "Send no metric whose name this regex matches (whole name)."),
        ("--metrics-keep", ENV_METRICS_KEEP, "Send only the metrics whose names this regex matches (whole "
         "name), as Prometheus's metric_relabel_configs keep [default: all]."),
    ):  # fmt: skip
        fn = click.option(flag, envvar=env, metavar="REGEX", callback=_pattern, help=f"{text} [env {env}]")(fn)
    return fn


def make_client(server: str | None) -> Client:
    return Client(server)


def admin_token_for(url: str) -> str | None:
    """The admin token what reaches into Ray's processes needs at ``url`` (attaching a debugger, an on-demand
    profile), on loopback too: ``$RAYSIGHT_ADMIN_TOKEN``, else, for a server on loopback, the one in this machine's
    data dir (its secrets file, readable by the server's user alone; never sent beyond loopback)."""
    if token := os.environ.get(ENV_ADMIN_TOKEN):
        return token
    if not is_loopback(urlsplit(url).hostname or ""):
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        found = orjson.loads((default_data_dir() / SECRETS_FILE).read_bytes()).get("admin_token")
        return found if isinstance(found, str) else None
    return None


def who_asks() -> str:
    """How a request that reaches into a process names its maker, as it is recorded: user@host."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


class Checked(click.ParamType):
    """A value kept as given (the text, for the settings to read once), once ``check`` (which raises ValueError saying
    what is wrong) accepts it; a value not given as text (a default) as it is."""

    def __init__(self, check: Callable[[str], object], name: str) -> None:
        self.check, self.name = check, name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            self.check(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return value.strip()


def time_window(since: str | None, until: str | None) -> dict[str, int | None]:
    """``--since`` and ``--until`` as epoch ns (each None where not given), read against one moment."""
    now = time.time_ns()
    return {
        "since": None if since is None else parse_time(since, now),
        "until": None if until is None else parse_time(until, now),
    }


def parse_time(text: str, now_ns: int) -> int:
    """Epoch ns of a ``--since``-like option: a time ago (``30s``, ``-10m``), ISO 8601 (UTC unless it says) or epoch ms
    (:func:`raysight.units.time_ns`)."""
    try:
        return units.time_ns(text, now_ns)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None

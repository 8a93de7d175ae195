"""`raysight start` and `raysight stop`: a `ray start` node with raysight beside it, one command each.

`raysight start` runs `ray start` with what `raysight env` exports (on the head, with raysight's ``--system-config``
merged into the user's), then starts the node's agent and, on the head, the poller of its dashboard, in the background
with their logs in the node's state dir, and records all of it there (``node.json``). `raysight stop` stops what that
file records, and nothing else: Ray's processes of that node, then the agent and the poller.

Ray's processes of a node are known by the Unix session its `ray start` began: Ray starts its daemons in no session of
their own, so they and all they start (workers, agents) stay in it, while any other Ray on the host is in another. The
system gives a session's number to no other while a process is in it; the node's counts as running while one of its
processes names the node's session directory on its command line (its raylet, GCS and dashboard do).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from raysight.agent.node_agent import default_state_dir, hold
from raysight.agent.node_watch import GCS, RAYLET, cmdline_options
from raysight.agent.state_poll import dashboard_url
from raysight.cli.common import server_option
from raysight.cli.detach import command_line, exclusive, last_words, signal_and_wait, spawn
from raysight.cli.run import (
    RAY_SYSTEM_CONFIG,
    cluster_option,
    ensure_server,
    env_exports,
    key_option,
    left_off,
    profiling_option,
    tracing_option,
)
from raysight.settings import ENV_INGEST_KEY

STATE_FILE = "node.json"
RAY_START_TIMEOUT_S = 120
RAY_GRACE_S = 16.0  # `ray stop`'s grace period, which it splits between its three steps, as here
KILL_WAIT_S = 10.0
PIECE_STOP_S = 60.0  # the agent ships what is left before it exits (giving up after 30 s of a server taking nothing)

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where `raysight start` records the node it started, with the logs of its agent and poller "
    "[default: ~/.local/state/raysight/node]; one node a directory.",
)


def default_node_dir() -> Path:
    """Where `raysight start` records its node unless told: beside the agent's checkpoint."""
    return default_state_dir().parent / "node"


def with_system_config(ray_args: Sequence[str], ours: Mapping[str, Any]) -> list[str]:
    """``ray_args`` (`ray start`'s) with one ``--system-config``: the JSON objects the user gave there, merged in
    order (their keys kept), and ``ours`` added. ValueError saying what is wrong with one that is no JSON object."""
    rest: list[str] = []
    theirs: dict[str, Any] = {}
    args = iter(ray_args)
    for arg in args:
        if arg != "--system-config" and not arg.startswith("--system-config="):
            rest.append(arg)
            continue
        text = arg.partition("=")[2] if "=" in arg else next(args, "")
        try:
            given = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--system-config is not JSON ({exc}): {text!r}") from None
        if not isinstance(given, dict):
            raise ValueError(f"--system-config is not a JSON object: {text!r}")
        theirs |= given
    return [*rest, f"--system-config={json.dumps({**ours, **theirs})}"]


def _session_of(pid: int) -> int | None:
    """The Unix session process ``pid`` is in, read from /proc; None once it has ended (a zombie has)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[3])


def unix_session(sid: int) -> dict[int, list[str]]:
    """The processes in Unix session ``sid`` now, and their command lines."""
    found = {}
    for entry in os.scandir("/proc"):
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and _session_of(pid) == sid and (args := command_line(pid)) is not None:
            found[pid] = args
    return found


def ray_processes(ray: Mapping[str, Any]) -> dict[int, list[str]]:
    """The processes of the node ``ray`` records (its Unix session ``sid``, its ``session_dir``) running now."""
    members = unix_session(ray["sid"])
    return members if any(ray["session_dir"] in arg for args in members.values() for arg in args) else {}


def _step(args: list[str]) -> int:
    """When `ray stop` stops a process: its raylet first (the agents it started go with it), its GCS last."""
    program = os.path.basename(args[0])
    return 0 if program == RAYLET else 2 if program == GCS else 1


def stop_session(sid: int) -> tuple[int, int]:
    """Stop the processes of Unix session ``sid`` as `ray stop` stops Ray's: SIGTERM to the raylet, then to the rest,
    then to the GCS (and whatever is left), each step given its share of :data:`RAY_GRACE_S` before SIGKILL. How many
    there were, and how many needed SIGKILL; ClickException naming those that outlive it."""
    seen, killed = set(unix_session(sid)), 0

    def in_it(pid: int) -> bool:
        return _session_of(pid) == sid

    for step in range(3):
        pids = [pid for pid, args in unix_session(sid).items() if _step(args) == step or step == 2]
        seen.update(pids)
        if left := signal_and_wait(pids, in_it, RAY_GRACE_S / 3, signal.SIGTERM):
            killed += len(left)
            if left := signal_and_wait(left, in_it, KILL_WAIT_S, signal.SIGKILL):
                raise click.ClickException(f"Ray's processes {left} outlived SIGKILL by {KILL_WAIT_S:.0f} s")
    return len(seen), killed


def _start_ray(ray_args: Sequence[str], env: Mapping[str, str], log_path: Path) -> dict[str, Any]:
    """Run `ray start` in a Unix session of its own, and wait for it; the node it started, as its raylet's command line
    says. ClickException with Ray's last words when it failed (what it had started stopped)."""
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", *ray_args]
    proc, log_start = spawn(command, log_path, env)
    try:
        code: int | None = proc.wait(timeout=RAY_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    raylet = next((args for args in unix_session(proc.pid).values() if _step(args) == 0), None)
    if code != 0 or raylet is None:
        stop_session(proc.pid)
        proc.wait()
        said = "\n".join(last_words(log_path, log_start, 5))
        ended = f"exited with code {code}" if code is not None else f"still ran after {RAY_START_TIMEOUT_S} s"
        raise click.ClickException(f"`ray start` {ended}; from {log_path}:\n{said}")
    options = cmdline_options(raylet)
    return {
        "sid": proc.pid,
        "session_dir": options["session_dir"],
        "temp_dir": options["temp_dir"],
        "node_id": options["node_id"],
        "gcs_address": options["gcs-address"],
        "dashboard": None,
        "log": str(log_path),
    }


def _spawn_piece(args: Sequence[str], log_path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """Start `raysight ARGS…` in the background; what :func:`stop_cmd` needs to stop it, and only it."""
    proc, _ = spawn([sys.executable, "-m", "raysight", *args], log_path, env)
    return {"pid": proc.pid, "command": proc.args, "log": str(log_path)}


def _runs(piece: Mapping[str, Any]) -> bool:
    """Whether the agent or poller recorded still runs (the same command line: not a program given its pid since)."""
    return command_line(piece["pid"]) == piece["command"]


def _read(state_file: Path) -> dict[str, Any] | None:
    try:
        return json.loads(state_file.read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise click.ClickException(
            f"cannot read {state_file} ({exc}); remove it once what it records is stopped"
        ) from None


def _save(state_file: Path, state: Mapping[str, Any]) -> None:
    """Write the state whole or not at all, readable by its user only."""
    partial = state_file.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=2)
    partial.replace(state_file)


def _running(state: Mapping[str, Any]) -> list[str]:
    """What of the node ``state`` records runs now, in words."""
    found = []
    if processes := ray_processes(state["ray"]):
        found.append(f"Ray's {_processes(len(processes))} of {os.path.basename(state['ray']['session_dir'])}")
    pieces = {name: piece for name in ("agent", "poller") if (piece := state.get(name))}
    return found + [f"its {name} (pid {piece['pid']})" for name, piece in pieces.items() if _runs(piece)]


@click.command("start", context_settings={"ignore_unknown_options": True})
@click.option("--head", is_flag=True, help="Start a head node (`ray start --head`).")
@click.option(
    "--address", metavar="HEAD:PORT", help="Start a node that joins the cluster at HEAD:PORT (`ray start --address`)."
)
@server_option
@cluster_option
@key_option
@tracing_option
@profiling_option
@state_dir_option
@click.argument("ray_args", nargs=-1, type=click.UNPROCESSED)
def start_cmd(
    head: bool,
    address: str | None,
    server: str | None,
    cluster: str | None,
    ingest_key: str | None,
    tracing: bool,
    profiling: bool,
    state_dir: Path | None,
    ray_args: tuple[str, ...],
) -> None:
    """Start a Ray node with raysight beside it: `ray start`, given the options raysight does not take, with the
    variables `raysight env` prints set and, on the head, raysight's --system-config merged into any you give; then,
    in the background, the node's agent and, on the head, the poller of its dashboard. Says what it started;
    `raysight stop` stops it all. A head starts a background server when none is named and none answers."""
    if head == bool(address):
        raise click.UsageError("start a head (--head) or a node that joins one (--address HEAD:PORT)")
    if "--block" in ray_args:
        raise click.UsageError("`raysight start` leaves Ray running in the background and returns: drop --block")
    args = [*(["--head"] if head else ["--address", str(address)]), *ray_args]
    if head:
        try:
            args = with_system_config(args, RAY_SYSTEM_CONFIG)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    state_dir = (state_dir or default_node_dir()).resolve()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    state_file = state_dir / STATE_FILE
    with exclusive(state_dir / "node.lock"):
        if (state := _read(state_file)) and (running := _running(state)):
            raise click.ClickException(
                f"a node `raysight start` started runs ({', '.join(running)}; recorded in {state_file}): "
                "`raysight stop` stops it"
            )
        try:
            hold(default_state_dir()).close()
        except RuntimeError:
            raise click.ClickException(
                f"a raysight agent already runs on this host (it holds {default_state_dir()}): stop it first, "
                "`raysight start` starts the node's own"
            ) from None
        url = ensure_server(server, start=head)
        env = {**os.environ, **env_exports(url, cluster, ingest_key, tracing, profiling)}
        left_off(env, tracing, profiling)
        ray = _start_ray(args, env, state_dir / "ray-start.log")
        state = {"head": head, "server": url, "cluster": cluster, "ray": ray, "agent": None, "poller": None}
        _save(state_file, state)  # from now on, `raysight stop` stops it
        own = {**os.environ, **({ENV_INGEST_KEY: ingest_key} if ingest_key else {})}  # a key on no command line
        agent = ("agent", "--server", url, "--ray-dir", ray["temp_dir"])
        state["agent"] = _spawn_piece(agent, state_dir / "agent.log", own)
        _save(state_file, state)
        if head and (dashboard := dashboard_url(Path(ray["session_dir"]))):
            ray["dashboard"] = dashboard
            state["poller"] = _spawn_piece(
                ("poll", "--dashboard", dashboard, "--server", url), state_dir / "poll.log", own
            )
            _save(state_file, state)
    _say_started(state, state_file)


def _say_started(state: Mapping[str, Any], state_file: Path) -> None:
    ray, agent, poller = state["ray"], state["agent"], state["poller"]
    kind = "head node" if state["head"] else "node"
    lines = [
        f"Started Ray {kind} {ray['node_id']} of {os.path.basename(ray['session_dir'])}, recorded by "
        f"{state['server']}" + (f" as cluster {state['cluster']}" if state["cluster"] else ""),
        f"  Ray:        {ray['gcs_address']}  (its output: {ray['log']})",
    ]
    if state["head"]:
        lines.append(f"  dashboard:  {ray['dashboard'] or 'none (not polled: what only it answers goes unrecorded)'}")
    lines.append(f"  agent:      pid {agent['pid']}, log {agent['log']}")
    if poller:
        lines.append(f"  poller:     pid {poller['pid']}, log {poller['log']}")
    if state["head"]:
        join = f"raysight start --address {ray['gcs_address']} --server {state['server']}"
        join += f" --cluster {state['cluster']}" if state["cluster"] else ""
        lines.append(f'Other nodes join with `{join}`; drivers, from any shell, with ray.init("{ray["gcs_address"]}").')
    lines.append(f"`raysight stop` stops all of it (recorded in {state_file}).")
    click.echo("\n".join(lines))


@click.command("stop")
@state_dir_option
def stop_cmd(state_dir: Path | None) -> None:
    """Stop what `raysight start` started here, and nothing else: Ray's processes of that node (as `ray stop` does,
    SIGTERM then SIGKILL, but only these: never another Ray on the host), then its agent, which ships what is left,
    and its poller."""
    state_dir = (state_dir or default_node_dir()).resolve()
    state_file = state_dir / STATE_FILE
    nothing = click.ClickException(f"no node `raysight start` started is recorded in {state_dir}: nothing to stop")
    if not state_dir.is_dir():
        raise nothing
    with exclusive(state_dir / "node.lock"):
        if (state := _read(state_file)) is None:
            raise nothing
        said = [_stop_ray(state["ray"])]
        said += _stop_pieces({name: piece for name in ("agent", "poller") if (piece := state.get(name))})
        state_file.unlink()
    click.echo("; ".join(said) + ".")


def _stop_ray(ray: Mapping[str, Any]) -> str:
    """Stop the node's Ray processes (:func:`stop_session`, once they are the node's); what was done, in words."""
    if not ray_processes(ray):
        return f"Ray on node {ray['node_id']} had ended"
    count, killed = stop_session(ray["sid"])
    by_kill = f", {killed} by SIGKILL" if killed else ""
    return f"Stopped Ray on node {ray['node_id']} ({_processes(count)}{by_kill})"


def _processes(count: int) -> str:
    return f"{count} process{'es' if count != 1 else ''}"


def _stop_pieces(pieces: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """SIGTERM the agent and the poller recorded that still run (the agent ships what is left, then exits), SIGKILL
    any that outlives :data:`PIECE_STOP_S`; what was done to each, in words."""
    running = {piece["pid"]: piece for piece in pieces.values() if _runs(piece)}

    def still(pid: int) -> bool:
        return _runs(running[pid])

    stubborn = signal_and_wait(running, still, PIECE_STOP_S, signal.SIGTERM)
    if left := signal_and_wait(stubborn, still, KILL_WAIT_S, signal.SIGKILL):
        raise click.ClickException(f"processes {left} outlived SIGKILL by {KILL_WAIT_S:.0f} s")
    said = []
    for name, piece in pieces.items():
        if piece["pid"] not in running:
            ended = "had ended"
        elif piece["pid"] in stubborn:
            ended = f"killed, still running {PIECE_STOP_S:.0f} s after SIGTERM"
        else:
            ended = "stopped"
        said.append(f"its {name} (pid {piece['pid']}) {ended}")
    return said

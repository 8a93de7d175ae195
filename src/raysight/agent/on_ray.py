"""The node agent as Ray actors: one pinned to each node of a cluster, and a watcher that gives each node that joins
its own. `raysight agent --on-ray` (or :func:`deploy`, from a driver) starts them; they are detached, so they live as
long as the cluster, not as long as what started them.

Each ships what `raysight agent` ships (``agent/node_agent.py``) from its node's Ray temp dir. The nodes of one host
share that dir, and so the agent's state dir and its lock: the first agent there ships, the others wait to take
over. An actor dies with its node, so it cannot report its own node's death nor ship the node's last lines (they
stay in the files, for the next agent there); `raysight agent` beside `ray start` can.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raysight.agent.node_agent import NodeAgent, default_state_dir

log = logging.getLogger("raysight.agent")

NAMESPACE = "raysight"
WATCHER = "agent-watcher"
WATCH_S = 5.0  # between looks for nodes without an agent
RETRY_S = 10.0  # between tries to take the state dir's lock, or after a failure
STOP_S = 60.0  # for an agent to ship what is left when told to stop


def agent_name(node_id: str) -> str:
    return f"agent-{node_id}"


def _options(name: str) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "lifetime": "detached", "num_cpus": 0, "get_if_exists": True}


class NodeAgentActor:
    """One node's agent, shipping on a thread of its own so that the actor's methods answer meanwhile."""

    def __init__(self, server: str, key: str | None, state_dir: str | None) -> None:
        node = ray._private.worker.global_worker.node  # this worker's view of its node: where its sessions are
        self.ray_dir = Path(node.get_session_dir_path()).resolve().parent
        self.node_id = ray.get_runtime_context().get_node_id()
        self._stop = threading.Event()
        self._status = "starting"
        self._agent: NodeAgent | None = None
        args = (server, key, Path(state_dir) if state_dir else default_state_dir())
        self._thread = threading.Thread(target=self._serve, args=args, name="raysight-agent", daemon=True)
        self._thread.start()

    def _serve(self, server: str, key: str | None, state_dir: Path) -> None:
        while not self._stop.is_set():
            try:
                self._agent = NodeAgent(server, self.ray_dir, state_dir, key)
            except RuntimeError as exc:  # another agent ships this host's logs
                self._status = f"waiting: {exc}"
                self._stop.wait(RETRY_S)
                continue
            self._status = "shipping"
            try:
                self._agent.run(self._stop)
            except Exception as exc:  # noqa: BLE001 (an agent's bug must not end the actor: it tries again)
                log.exception("the raysight agent failed; starting again in %s s", RETRY_S)
                self._status = f"failed ({type(exc).__name__}: {exc}); starting again"
                self._stop.wait(RETRY_S)
            finally:
                self._agent.close()
        self._status = "stopped"

    def status(self) -> dict[str, Any]:
        """What this agent is doing: shipping, waiting for the lock, failed or stopped, and the lines it shipped."""
        return {
            "node_id": self.node_id,
            "pid": os.getpid(),
            "ray_dir": str(self.ray_dir),
            "status": self._status,
            "sent_lines": self._agent.sent_lines if self._agent else 0,
        }

    def stop(self) -> dict[str, Any]:
        """Ship what is left, stop, and say so."""
        self._stop.set()
        self._thread.join(STOP_S)
        return self.status()


class AgentWatcher:
    """Gives each live node of the cluster an agent actor, now and as nodes join."""

    def __init__(self, server: str, key: str | None, state_dir: str | None) -> None:
        self._args = (server, key, state_dir)
        self._agents: dict[str, Any] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="raysight-agent-watcher", daemon=True).start()

    def _watch(self) -> None:
        while True:
            try:
                self.ensure()
            except Exception:  # noqa: BLE001 (the GCS away for a while, say: look again later)
                log.exception("could not look for nodes without a raysight agent")
            time.sleep(WATCH_S)

    def ensure(self) -> list[str]:
        """Start an agent on each live node that has none; the nodes that have one."""
        with self._lock:
            live = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
            for node_id in live:
                strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
                self._agents[node_id] = _NodeAgentActor.options(  # an existing one is got, not made anew
                    **_options(agent_name(node_id)), scheduling_strategy=strategy
                ).remote(*self._args)
            for gone in set(self._agents) - live:
                del self._agents[gone]
            return sorted(self._agents)

    def agents(self) -> list[Any]:
        """The handles of the agents of live nodes."""
        with self._lock:
            return list(self._agents.values())


_NodeAgentActor = ray.remote(max_restarts=-1)(NodeAgentActor)
_AgentWatcher = ray.remote(max_restarts=-1, max_task_retries=-1)(AgentWatcher)


def deploy(server: str, key: str | None = None, state_dir: str | None = None) -> list[dict[str, Any]]:
    """Start the watcher (and through it an agent on every node) in the cluster this process is connected to, unless
    they run already; what each node's agent is doing."""
    watcher: Any = _AgentWatcher.options(**_options(WATCHER)).remote(server, key, state_dir)
    ray.get(watcher.ensure.remote())
    statuses: list[dict[str, Any]] = ray.get([agent.status.remote() for agent in ray.get(watcher.agents.remote())])
    return statuses


def undeploy() -> list[dict[str, Any]]:
    """Stop the watcher, then each agent once it has shipped what is left; what each agent did."""
    try:
        watcher = ray.get_actor(WATCHER, namespace=NAMESPACE)
    except ValueError:
        return []
    agents: list[Any] = ray.get(watcher.agents.remote())
    ray.kill(watcher, no_restart=True)
    done: list[dict[str, Any]] = ray.get([agent.stop.remote() for agent in agents])
    for agent in agents:
        ray.kill(agent, no_restart=True)
    return done

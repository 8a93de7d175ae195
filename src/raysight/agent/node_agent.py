"""The node agent: ships the logs of its node's Ray sessions, and reports what it sees of their Ray processes.

Logs: what the tailer reads is sent to the server, and the checkpoint moved on only once the server has made it
durable. The files themselves are the buffer while the server is away: nothing is held in memory but the batch in
flight (one at a time). Node life (``agent/node_watch.py``): each change seen is sent, and kept until the server has
taken it. Metrics (``agent/metrics_scrape.py``): the host's part of each session followed, scraped on a thread of its
own, each scrape sent once (a moment's view: the next one follows). On-demand profiles (``agent/captures.py``): what
the server is asked of the node's processes, run on threads of their own where the server allows it. Serve's memray
captures (``agent/serve_captures.py``): each shipped once it settles after a change, on a thread of its own, and what
changed since as the agent stops."""

from __future__ import annotations

import base64
import fcntl
import gzip
import logging
import math
import os
import socket
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx
import orjson

from raysight import wire
from raysight.agent import node_watch
from raysight.agent.captures import CaptureRunner
from raysight.agent.metrics_scrape import SCRAPE_EVERY_S, Families, HostScraper
from raysight.agent.serve_captures import ServeCaptures
from raysight.agent.tailer import Chunk, Gap, Tailer
from raysight.config import OWN_HEADERS

log = logging.getLogger("raysight.agent")

BATCH_BYTES = 4 * 1024 * 1024  # read per batch, at most (about)
POLL_S = 0.2  # between looks at the files, unless the last batch was full (the files hold more)
LINGER_S = 1.0  # after a batch, before the next (lines that keep coming go in one POST a second, as spans do)
MAX_BACKOFF_S = 5.0
LOOK_S = 1.0  # between looks at the node's Ray processes


def batch_body(host: str, chunks: list[Chunk], gaps: list[Gap]) -> bytes:
    """The JSON the server's ``/ingest/agent/logs`` takes (``signals/log_lines/parse.py``)."""
    now = time.time_ns()
    files: list[wire.LogFile] = []
    for chunk in chunks:
        info = chunk.file.info
        texts: list[str] = []
        raw: list[str | None] = []
        for piece, _, _ in chunk.pieces:
            try:
                texts.append(piece.data.decode())
                raw.append(None)
            except UnicodeDecodeError:
                texts.append(piece.data.decode("utf-8", "replace"))
                raw.append(base64.b64encode(piece.data).decode())
        files.append(
            {
                "session": chunk.file.session,
                "key": chunk.file.key,
                "name": info.name,
                "path": chunk.path,
                "stream": info.stream,
                "worker_id": info.worker_id,
                "job_id": info.job_id,
                "pid": info.pid,
                "end": chunk.after.offset,
                "read_ns": min(now, chunk.written_ns),  # the time of a line that shows none: by then it was written
                "offsets": [piece.offset for piece, _, _ in chunk.pieces],
                "texts": texts,
                "raw": raw if any(raw) else None,
                "continued": [piece.continued for piece, _, _ in chunk.pieces],
                "markers": [is_marker for _, _, is_marker in chunk.pieces],
                "jobs": [context.get("job_id", info.job_id) for _, context, _ in chunk.pieces],
                "tasks": [context.get("task_name") for _, context, _ in chunk.pieces],
                "actors": [context.get("actor_name") for _, context, _ in chunk.pieces],
            }
        )
    gap_rows: list[wire.LogGap] = [
        {
            "session": g.file.session,
            "key": g.file.key,
            "name": g.file.info.name,
            "start": g.start,
            "end": g.end,
            "why": g.why,
        }
        for g in gaps
    ]
    offset = time.localtime().tm_gmtoff  # Ray stamps its lines in local time
    batch: wire.AgentLogs = {"host": host, "utc_offset_s": offset, "files": files, "gaps": gap_rows}
    return orjson.dumps(batch)


class NodeAgent:
    """Ships the logs of the Ray sessions under ``ray_dir`` to ``server``, and what it sees of their Ray processes on
    this host; its checkpoint lives in ``state_dir``."""

    def __init__(
        self,
        server: str,
        ray_dir: Path,
        state_dir: Path,
        key: str | None = None,
        since: float | None = None,
        families: Families | None = None,
    ) -> None:
        """``since``: only the sessions active from then on (epoch seconds); else every session under ``ray_dir``.
        ``families``: the metric families sent (all, by default)."""
        self.server, self.key, self.host = server.rstrip("/"), key, socket.gethostname()
        self._lock = hold(state_dir)
        self.tailer = Tailer(ray_dir, state_dir / "checkpoint.json", since)
        self._http = httpx.Client(timeout=30, headers=OWN_HEADERS)
        self.sent_lines = 0
        self.behind = False  # the last batch was full: the files hold more
        self.watch = node_watch.NodeWatch(ray_dir)
        self._unsent: dict[node_watch.Key, node_watch.Sighting] = {}
        self._next_look = 0.0
        self._metrics_http = httpx.Client(timeout=10, headers=OWN_HEADERS)  # (the scraping thread's own)
        self.scraper = HostScraper(self._send_scrape, families, report=self._send_aggregator_lines)
        self.captures = CaptureRunner(self.server, key)
        self.serve_captures = ServeCaptures(self.server, key, ray_dir)

    def _send(
        self, route: str, body: bytes, what: str, gzipped: bool = False, http: httpx.Client | None = None
    ) -> None:
        """POST ``body`` (``what`` it holds) to ``route``. Taken once the server made it durable, or refused its
        content (400: a bug on one side, said in the log; sending it again cannot help); raises httpx.HTTPError
        otherwise (to be sent again)."""
        headers = {"Content-Type": "application/json", **({"Content-Encoding": "gzip"} if gzipped else {})}
        params = wire.key_params(self.key)
        response = (http or self._http).post(f"{self.server}{route}", content=body, params=params, headers=headers)
        if response.status_code == 400:
            log.error("the server refused %s: %s", what, response.text[:500])
        else:
            response.raise_for_status()

    def _send_scrape(self, scrape: wire.MetricsScrape) -> None:
        self._send(wire.AGENT_METRICS, orjson.dumps(scrape), "a scrape", http=self._metrics_http)

    def _send_aggregator_lines(self, text: str) -> None:
        body: wire.RayMetrics = {"text": text}
        self._send(wire.AGENT_RAY_METRICS, orjson.dumps(body), "aggregator counts", http=self._metrics_http)

    def scrape_metrics(self, stop: threading.Event) -> None:
        """Scrape the host's part of the sessions followed every :data:`SCRAPE_EVERY_S`, on a fixed schedule (as
        Prometheus keeps its targets' intervals; a scrape that overran skips the slots it missed), until ``stop``."""
        due = time.monotonic() + SCRAPE_EVERY_S
        while not stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.scraper.scrape(self.tailer.ray_dir, self.tailer.sessions)
            except Exception:  # never let a scrape stop the agent
                log.exception("scraping metrics failed; trying again in %s s", SCRAPE_EVERY_S)
            due += SCRAPE_EVERY_S * max(1, math.ceil((time.monotonic() - due) / SCRAPE_EVERY_S))

    def report_node_life(self) -> None:
        """Look at the node's Ray processes (at most every :data:`LOOK_S`) and send what changed; what the server did
        not take goes again with the next look."""
        if time.monotonic() < self._next_look:
            return
        self._next_look = time.monotonic() + LOOK_S
        for sighting in self.watch.look(self.tailer.sessions, time.time_ns(), node_watch.running()):
            self._unsent[sighting.key] = sighting
        if not self._unsent:
            return
        sightings: wire.NodeLife = {"host": self.host, "sightings": [s.sent() for s in self._unsent.values()]}
        try:
            self._send(wire.AGENT_NODE_LIFE, orjson.dumps(sightings), "node sightings")
            self._unsent.clear()
        except httpx.HTTPError as exc:
            log.warning("could not report node sightings to %s (%s); retrying", self.server, exc)

    def cycle(self, final: bool = False) -> int:
        """Look at the files, send what is new (one batch), and move the checkpoint on; the lines sent (0 when there
        was nothing new). Raises httpx.HTTPError when the server did not take the batch (it is read again next
        time)."""
        self.tailer.scan()
        chunks, gaps = self.tailer.read(BATCH_BYTES, final=final), list(self.tailer.gaps)
        self.behind = sum(chunk.after.offset - chunk.file.offset for chunk in chunks) >= BATCH_BYTES
        if not chunks and not gaps:
            return 0
        body = gzip.compress(batch_body(self.host, chunks, gaps), compresslevel=1)
        self._send(wire.AGENT_LOGS, body, "a batch of logs", gzipped=True)
        self.tailer.commit(chunks, gaps)
        lines = sum(len(c.pieces) for c in chunks)
        self.sent_lines += lines
        return lines

    def run(self, stop: threading.Event) -> None:
        """Ship until ``stop`` is set, then what is left (partial last lines too), and return; scrape, run on-demand
        profiles and ship Serve's captures meanwhile (a poll under way is left to end with the process)."""
        scraping = threading.Thread(target=self.scrape_metrics, args=(stop,), name="raysight-metrics", daemon=True)
        scraping.start()
        threading.Thread(target=self.captures.run, args=(stop,), name="raysight-captures", daemon=True).start()
        shipping = threading.Thread(
            target=self.serve_captures.follow,
            args=(lambda: self.tailer.sessions, stop),
            name="raysight-serve-captures",
            daemon=True,
        )
        shipping.start()
        try:
            self._ship(stop)
        finally:
            scraping.join()

    def _ship(self, stop: threading.Event) -> None:
        backoff = POLL_S
        while not stop.is_set():
            self.report_node_life()
            try:
                sent = self.cycle()
                backoff = POLL_S
                if sent and self.behind:
                    continue  # a full batch: more is waiting
                # lines that come soon after a batch wait for the next, a second later: a trickle costs a POST a
                # second, not five; a line after a quiet second goes at the next look
                wait = LINGER_S if sent else POLL_S
            except httpx.HTTPError as exc:
                log.warning("could not send logs to %s (%s); the files keep them, retrying", self.server, exc)
                wait = backoff = min(backoff * 2, MAX_BACKOFF_S)
            resume = time.monotonic() + wait
            while not stop.wait(POLL_S) and time.monotonic() < resume:
                self.tailer.scan()  # while the server is away, files Ray rotates away are opened, so kept readable
                self.report_node_life()
        self.drain()

    def drain(self, patience_s: float = 30.0) -> bool:
        """Send everything the files hold now, partial last lines too, and every Serve capture that changed, however
        long that takes while the server takes it; give up once it has taken nothing for ``patience_s``. Whether
        everything was sent."""
        deadline = time.monotonic() + patience_s
        while time.monotonic() < deadline:
            try:
                if not self.cycle(final=True):
                    self._next_look = 0.0
                    self.report_node_life()
                    self.serve_captures.last_look(self.tailer.sessions)
                    return True
                deadline = time.monotonic() + patience_s
            except httpx.HTTPError as exc:
                log.warning("could not send logs to %s (%s)", self.server, exc)
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        return False

    def close(self) -> None:
        self.tailer.close()
        self.scraper.close()
        self.captures.close()
        self.serve_captures.close()
        self._metrics_http.close()
        self._http.close()
        self._lock.close()


def hold(state_dir: Path) -> IO[Any]:
    """The lock that makes ``state_dir`` one agent's (released when the file returned is closed); RuntimeError when
    another agent holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = (state_dir / "agent.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise RuntimeError(f"another raysight agent uses {state_dir}; give this one its own --state-dir") from None
    return lock


def default_state_dir() -> Path:
    """Where an agent keeps its checkpoint unless told: per user, beside other caches."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "raysight" / "agent"

"""A DAP client of the few requests the debugger's tests make (VS Code's side of a debug session): requests sent,
responses and events read as the Debug Adapter Protocol frames them (``Content-Length`` headers, JSON bodies)."""

from __future__ import annotations

import socket
import time
from typing import Any

import orjson


class DapClient:
    def __init__(self, port: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:  # (until the port listens)
            try:
                self.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, f"nothing listens on 127.0.0.1:{port}"
                time.sleep(0.1)
        self.buffer, self.seq = b"", 0
        self.seen: list[dict[str, Any]] = []  # every message read, in order

    def send(self, command: str, **arguments: Any) -> int:
        self.seq += 1
        body = orjson.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments})
        self.socket.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def _read(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(dict(line.split(b": ", 1) for line in head.split(b"\r\n"))[b"Content-Length"])
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        message: dict[str, Any] = orjson.loads(rest[:length])
        self.seen.append(message)
        return message

    def _recv(self) -> bytes:
        data = self.socket.recv(65536)
        assert data, "the DAP connection closed"
        return data

    def event(self, name: str) -> dict[str, Any]:
        """The next event ``name`` (those before it kept in ``seen``)."""
        while (message := self._read()).get("event") != name or message.get("type") != "event":
            pass
        return message

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        """Send ``command``; its response's body (AssertionError where it failed)."""
        seq = self.send(command, **arguments)
        while not ((message := self._read()).get("type") == "response" and message.get("request_seq") == seq):
            pass
        assert message["success"], message
        body: dict[str, Any] = message.get("body") or {}
        return body

    def close(self) -> None:
        self.socket.close()

"""The poller's own rules (``agent/state_poll.py``): where a session's dashboard is, and the token it sends."""

from __future__ import annotations

from pathlib import Path

from raysight.agent.state_poll import dashboard_url, due, ray_auth_headers


def test_the_dashboard_is_where_the_head_last_said_it_listens(tmp_path: Path) -> None:
    session = tmp_path / "session_2026-11-24_10-00-00_000000_1"
    (session / "logs").mkdir(parents=True)
    assert dashboard_url(session) is None  # no log yet: not started
    log = session / "logs" / "dashboard.log"
    log.write_text("2026-11-24 10:00:01,000\tINFO head.py:272 -- Loaded 1 dashboard head modules\n")
    assert dashboard_url(session) is None
    with log.open("a") as f:
        f.write(
            "2026-11-24 10:00:02,000\tINFO http_server_head.py:492 -- Dashboard head http address: 127.0.0.1:8265\n"
        )
        f.write("2026-11-24 10:05:00,000\tINFO http_server_head.py:492 -- Dashboard head http address: 10.0.0.5:8266\n")
    assert dashboard_url(session) == "http://10.0.0.5:8266"  # restarted elsewhere: the last


def test_the_token_is_the_one_rays_own_processes_send(tmp_path: Path) -> None:
    token_file = tmp_path / "auth_token"
    assert ray_auth_headers({"RAY_AUTH_TOKEN_PATH": str(token_file)}) == {}  # none anywhere
    token_file.write_text("from-file\n")
    assert ray_auth_headers({"RAY_AUTH_TOKEN_PATH": str(token_file)}) == {"authorization": "Bearer from-file"}
    given = {"RAY_AUTH_TOKEN": "from-env", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    assert ray_auth_headers(given) == {"authorization": "Bearer from-env"}
    assert ray_auth_headers({**given, "RAY_AUTH_MODE": "disabled"}) == {}


def test_objects_are_sampled_every_sixth_poll_and_the_rest_every_poll() -> None:
    assert [n for n in range(13) if "objects" in due(n)] == [0, 6, 12]
    assert all(set(due(n)) | {"objects"} == set(due(0)) for n in range(13))

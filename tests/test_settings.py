"""The settings table (``raysight/settings.py``): documented whole in docs/settings.md, and a server's settings changed
a part or a field at a time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raysight import settings
from raysight.settings import CLIENT_ENVIRONMENT, SERVER, QueryLimits, Settings

DOCS = Path(__file__).parent.parent / "docs" / "settings.md"


def test_every_setting_and_environment_variable_is_documented() -> None:
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("| `")]
    for setting in SERVER:
        found = [row for row in rows if re.match(rf"\| `--{setting.name}[ `/]", row)]
        assert len(found) == 1, f"docs/settings.md has no row of --{setting.name}"
        assert setting.env is None or f"`{setting.env}`" in found[0], f"--{setting.name}'s row names no {setting.env}"
    declared = {s.env for s in SERVER if s.env} | {v.name for v in CLIENT_ENVIRONMENT}
    assert {value for name, value in vars(settings).items() if name.startswith("ENV_")} == declared  # (each in a table)
    documented = {name for row in rows for name in re.findall(r"`(RAYSIGHT_\w+)`", row)}
    assert declared - documented == set(), "environment variables docs/settings.md does not name"


def test_a_change_names_a_part_or_a_field_of_one() -> None:
    base = Settings(Path("/data"))
    changed = base.replace(fold_rest=0, max_body=9, queries=QueryLimits(timeout_s=1), token="t")
    assert (changed.writer.fold_rest, changed.http.max_body, changed.queries.timeout_s) == (0, 9, 1)
    assert changed.secrets.token == "t" and changed.writer.fold_linger_s == base.writer.fold_linger_s
    assert changed.replace() == changed and base.replace(host="::1").host == "::1"
    with pytest.raises(TypeError, match="no part of the settings has one field named 'nonsense'"):
        base.replace(nonsense=1)

"""Table layout (pure): what a narrow terminal may cut, and what it may not; and text without a terminal's escapes."""

from __future__ import annotations

import duckdb
import orjson
from hypothesis import given
from hypothesis import strategies as st

from raysight.ansi import plain, plain_json_sql, plain_sql
from raysight.cli.render import MIN_TEXT_WIDTH, cell, fit, is_whole, layout

columns = st.lists(st.tuples(st.integers(1, 200), st.booleans()), min_size=1, max_size=12)


@given(columns, st.integers(0, 400))
def test_fit_cuts_only_text_columns_never_below_their_floor_and_fits_when_it_can(cols, budget) -> None:
    widths = [w for w, _ in cols]
    floors = [None if whole else min(w, MIN_TEXT_WIDTH) for w, whole in cols]
    fitted = fit(widths, floors, budget)
    assert all(f == w for f, w, floor in zip(fitted, widths, floors) if floor is None)  # whole columns stay whole
    assert all(floor <= f <= w for f, w, floor in zip(fitted, widths, floors) if floor is not None)
    at_floors = sum(w if floor is None else floor for w, floor in zip(widths, floors))
    assert sum(fitted) <= budget or fitted == [w if floor is None else floor for w, floor in zip(widths, floors)]
    if sum(widths) <= budget:
        assert fitted == widths  # nothing is cut when the table fits
    elif at_floors <= budget:
        assert budget - sum(fitted) < len(widths)  # what is left over would not widen every cut column by one


def test_layout_cuts_text_with_an_ellipsis_and_keeps_ids() -> None:
    header = ["TASK_ID", "NAME", "ERROR_MESSAGE"]
    body = [["ab" * 20, "a_rather_long_function_name", "ValueError: something went wrong here"]]
    whole = [is_whole("task_id", ["x"]), is_whole("name", ["x"]), is_whole("error_message", ["x"])]
    assert whole == [True, False, False]
    assert layout(header, body, whole, None)[1] == "  ".join(body[0])  # a pipe: whole rows
    narrow = layout(header, body, whole, 70)
    assert all(len(line) <= 70 for line in narrow) and narrow[1].startswith("ab" * 20 + "  ")
    assert narrow[1].split()[1].endswith("…") and narrow[1].endswith("…")


ESCAPES = [
    "\x1b[36m",
    "\x1b[39m",
    "\x1b[1;31m",
    "\x1b[0m",
    "\x1b[2K",
    "\x1b]8;;https://docs.ray.io\x1b\\",
    "\x1b]0;t\x07",
]
TEXTS = ["ray::explode()", " (pid=7)", "\n", '"', "\\", "u001b", "[36m", "\\u001b[1m", "ü"]


@given(st.lists(st.sampled_from(ESCAPES + TEXTS), max_size=12))
def test_escapes_leave_text_alike_in_python_in_sql_and_in_json_text(pieces: list[str]) -> None:
    """Colours (Ray's: ``\\x1b[36mray::explode()\\x1b[39m``), a cursor move, an OSC link or title: each left out, the
    text around it kept, by the three forms of the one pattern; in JSON text (orjson's ``\\u001b``, DuckDB's
    ``\\u001B``), a quote, a backslash or the text ``\\u001b`` stay as they are and the JSON stays valid."""
    text, expected = "".join(pieces), "".join(p for p in pieces if p not in ESCAPES)
    assert plain(text) == expected
    as_json = orjson.dumps({"message": text}).decode()
    by_duckdb = "json_object('message', $1)::VARCHAR"
    sql, *json_texts = duckdb.execute(
        f"SELECT {plain_sql('$1')}, {plain_json_sql('$2')}, {plain_json_sql(by_duckdb)}", [text, as_json]
    ).fetchone()
    assert sql == expected and [orjson.loads(j) for j in json_texts] == [{"message": expected}] * 2


def test_a_traceback_cell_is_its_last_line_without_escapes() -> None:
    link = "\x1b]8;;https://docs.ray.io\x1b\\ValueError\x1b]8;;\x1b\\"
    assert cell("error_message", f"User exception:\n\x1b[36mray::f()\x1b[39m\n{link}: boom\n") == "ValueError: boom"

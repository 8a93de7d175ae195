"""Table layout (pure): what a narrow terminal may cut, and what it may not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raysight.cli.render import MIN_TEXT_WIDTH, fit, is_whole, layout

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

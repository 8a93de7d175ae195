"""A terminal's escape sequences in text (the colours Ray puts in its tracebacks: ``\\x1b[36mray::f()\\x1b[39m``).

They are stored as Ray sent them and left out of every answer read as JSON, YAML or HTML; only a terminal shows them
(``click.echo`` drops them in a pipe). One pattern, applied in Python (:func:`plain`) or in DuckDB's SQL, to text
(:func:`plain_sql`) or to JSON text, where ESC is written ``\\u001b`` (:func:`plain_json_sql`).
"""

from __future__ import annotations

import re

from raysight.sql_literals import sql_str

# CSI (a colour, a cursor move: ESC [, parameters, intermediates, a final byte) or OSC (a title, a link: ESC ], up to
# BEL or ESC \), as Python's re and DuckDB's RE2 both read it
ESCAPES = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\))"
_ESCAPES = re.compile(ESCAPES)
# The same in JSON text, no quote or backslash of the JSON taken for part of one; an escaped backslash is matched
# first and put back, so that `\\u001b` (a backslash, then the text "u001b") stays as it is
_ESCAPED_IN_JSON = r'(\\\\)|\\u001[bB](?:\[[0-?]*[ !#-/]*[@-\[\]-~]|\][^"\\]*(?:\\u0007|\\u001[bB]\\\\))'


def plain(text: str) -> str:
    """``text`` without escape sequences."""
    return _ESCAPES.sub("", text)


def plain_sql(text: str) -> str:
    """SQL: the text ``text`` without escape sequences."""
    return f"regexp_replace({text}, {sql_str(ESCAPES)}, '', 'g')"


def plain_json_sql(json_text: str) -> str:
    """SQL: the JSON text ``json_text`` with no escape sequence in its strings."""
    return f"regexp_replace({json_text}, {sql_str(_ESCAPED_IN_JSON)}, '\\1', 'g')"

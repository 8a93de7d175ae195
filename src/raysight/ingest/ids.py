"""What names a Ray session, as every signal's parser checks it."""

from __future__ import annotations

import re

SESSION_NAME = re.compile(r"session_[\w.-]{1,200}", re.ASCII)  # as Ray names a session's directory

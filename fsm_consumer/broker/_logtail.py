"""Reading the end of a child's log file for error messages."""

from __future__ import annotations

import re
from pathlib import Path

# Tansu colours its tracing output even when writing to a file.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def tail(path: Path, lines: int = 12, max_bytes: int = 64 * 1024, width: int = 400) -> str:
    """The last ``lines`` lines of ``path``, ANSI colours removed, each cut to ``width``."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError as exc:
        return f"<log {path} unreadable: {exc}>"
    text = _ANSI.sub("", data.decode("utf-8", errors="replace"))
    last = text.splitlines()[-lines:]
    return "\n".join(line if len(line) <= width else line[:width] + " [...]" for line in last)

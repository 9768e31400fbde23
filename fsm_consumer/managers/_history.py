"""Member history as JSON lines (the ``debug_history_path`` option): what a member owned, when it
polled and what it committed, so a checker can prove no loss and no double ownership across members.

One line per event: {"t": monotonic ms, "wall": unix s, "client": client_id, "member": member id,
"generation": n, "event": ..., plus event fields}. Written on the background thread; a line per poll
makes it a debugging aid, not something to leave on in production.
"""

from __future__ import annotations

import json
import time
from typing import Any


class MemberHistory:
    def __init__(self, path: str, client_id: str) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1)  # line-buffered: survives a kill
        self._client = client_id

    def write(self, event: str, member: str, generation: int, now: float, **fields: Any) -> None:
        # "t" is the engine's clock (given); "wall" lets a checker order lines of several processes,
        # as a log line's timestamp would
        line = {
            "t": round(now, 3),
            "wall": round(time.time(), 6),
            "client": self._client,
            "member": member,
            "generation": generation,
            "event": event,
        }
        line.update(fields)
        self._file.write(json.dumps(line, default=str) + "\n")

    def close(self) -> None:
        self._file.close()

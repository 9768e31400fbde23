"""Ctrl-C as a request to stop, for ``fsm-consumer ingest``: the first one is noted (the job stops its query,
abandoning the batch under way, and says what it committed), a second one interrupts at once.

PySpark's own SIGINT handler cancels every Spark job and then raises KeyboardInterrupt in the driver: the
streaming query then fails mid-batch with pages of py4j and Spark traces. Stopping the query instead
(``StreamingQuery.stop``) ends it cleanly, its checkpoint at the last whole batch.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def ctrl_c_stops(first: Callable[[], None] = lambda: None) -> Iterator[Callable[[], bool]]:
    """Within the block, Ctrl-C calls ``first`` and sets the flag the yielded function reads; a second Ctrl-C
    raises KeyboardInterrupt. The previous handler comes back after the block."""
    asked = [0]

    def on_sigint(signum: int, frame: object) -> None:
        asked[0] += 1
        if asked[0] > 1:
            raise KeyboardInterrupt
        first()
        print(
            "\nstopping: the batch under way is abandoned, the checkpoint keeps every whole batch "
            "(Ctrl-C again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield lambda: asked[0] > 0
    finally:
        signal.signal(signal.SIGINT, previous)

"""A consumer's history as JSON lines (the ``history_path`` option; the format is docs/histories.md).

Both of a consumer's threads write to it (and a ParallelConsumer's loop): one lock, one line per
``write``, the file line-buffered so that a killed or frozen process loses at most the line it was
writing. The writer is the only part of a history that does I/O or reads the wall clock; the managers
and the collector call it as they would a logger.

Every line carries two clocks: ``t`` (``time.monotonic()`` ms, what the checker orders by) and ``wall``
(Unix seconds) of the same instant, so a checker can tell whether two files' ``t`` share a base (one
machine, one boot, no time namespace between them) and refuse to order lines that do not. A consumer's
name is unique beyond its machine: the process id, its number in the process and a random part.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._config import ConsumerConfig
    from .machines._log import TransitionRecord
    from .structs import TopicPartition

_instances = itertools.count(1)
# the settings a "started" line records: what a checker of the run needs to know
_STARTED_CONFIG = (
    "partition_assignment_strategy",
    "session_timeout_ms",
    "max_poll_records",
    "enable_auto_commit",
    "auto_offset_reset",
    "isolation_level",
    "group_instance_id",
    "group_protocol",
)


def tp_list(partitions: Iterable[TopicPartition]) -> list[list[str | int]]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


def clock_base() -> dict[str, Any]:
    """What says whose monotonic clock a history's ``t`` is: the kernel's boot id (Linux: one per boot,
    shared by the containers of a host) and the host name. Lines of two files compare only on one clock."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot: str | None = f.read().strip() or None
    except OSError:
        boot = None
    return {"boot_id": boot, "host": socket.gethostname()}


def unique_name(client_id: str) -> str:
    """``<client_id>@<pid>#<n>~<random>``: two processes (two containers) with one pid still differ."""
    return f"{client_id}@{os.getpid()}#{next(_instances)}~{secrets.token_hex(4)}"


class HistoryWriter:
    """Appends the lines of one consumer to ``path``. ``member`` and ``generation`` are the membership's
    as last written by the background thread; lines from other threads carry those."""

    def __init__(self, path: str | os.PathLike[str], client_id: str) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1)  # line-buffered: survives a kill
        self._lock = threading.Lock()
        self.client = client_id
        self.consumer = unique_name(client_id)
        self.member = ""
        self.generation = -1
        self.closed = False

    def write(
        self,
        event: str,
        *,
        member: str | None = None,
        generation: int | None = None,
        t: float | None = None,
        **fields: Any,
    ) -> None:
        """One line; ``member``/``generation`` given: the writer's current ones from now on (the
        membership's), except for a ``commit``, which carries the membership it was sent with. ``t``: when
        it happened (monotonic ms) if not now, e.g. the time a hand-out checked the lease at; ``wall`` is
        then that instant's too (a line written after a freeze keeps both clocks of the same moment)."""
        with self._lock:
            if self.closed:
                return
            if event != "commit":
                if member is not None:
                    self.member = member
                if generation is not None:
                    self.generation = generation
            mono, wall = time.monotonic() * 1000.0, time.time()
            if t is not None:
                wall -= (mono - t) / 1000.0
                mono = t
            line: dict[str, Any] = {
                "t": round(mono, 3),
                "wall": round(wall, 6),
                "consumer": self.consumer,
                "client": self.client,
                "member": self.member if member is None else member,
                "generation": self.generation if generation is None else generation,
                "event": event,
            }
            line.update(fields)
            self._file.write(json.dumps(line, default=str) + "\n")

    def started(self, config: ConsumerConfig) -> None:
        self.write(
            "started",
            group=config.group_id,
            pid=os.getpid(),
            clock=clock_base(),
            config={k: getattr(config, k) for k in _STARTED_CONFIG},
        )

    def ownership(self, by: str, added: Iterable[TopicPartition], dropped: Iterable[TopicPartition]) -> None:
        """Partitions that became, or stopped being, this consumer's outside a group's rebalance: ``assign()``
        (``by="assign"``), a subscription without a group (``"subscribe"``), ``unsubscribe()``."""
        dropped, added = tp_list(dropped), tp_list(added)
        if dropped:
            self.write("revoked", partitions=dropped, by=by)
        if added:
            self.write("assigned", partitions=added, by=by)

    def callback(
        self, fn: Callable[..., object], args: tuple[Any, ...], took_ms: float, error: BaseException | None
    ) -> None:
        """A callback the application thread ran: a rebalance listener's (its partitions), or a commit's."""
        first = args[0] if args else None
        self.write(
            "callback",
            name=getattr(fn, "__name__", repr(fn)),
            partitions=tp_list(first) if isinstance(first, (set, frozenset)) else None,
            took_ms=round(took_ms, 3),
            error=None if error is None else repr(error),
        )

    def transition(self, record: TransitionRecord) -> None:
        """A SpecMachine's observer: every state change of this consumer's machines."""
        self.write(
            "transition",
            machine=record.machine if not record.instance else f"{record.machine}/{record.instance}",
            source=record.source,
            trigger=record.trigger,
            dest=record.dest,
        )

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self._file.close()

"""One share session (KIP-932) with one broker, client side: the model of specs/share_session.yaml, sans-IO.

Kafka's ShareSessionHandler and ShareRequestMetadata in one: which epoch the next request to the broker
carries, which partitions it lists (every one to open a session, only those added since to go on, and
the ones dropped as ForgottenTopicsData), and whether acknowledgements may go with it (the spec's
``request`` and ``acks`` attributes). ``plan(partitions)`` says what the next request is, ``sent(plan, now)``
records it, and ``on_answer`` / ``on_disconnect`` move the session on once it completes. A session that ends
reports it through ``on_ended(node, generation, why, now)``: the batches acquired under that generation are
lost (their locks release on the broker).

The types here (``TopicIdPartition``, ``SessionPlan``) are plain data: the wiring layer turns them into
ShareFetch and ShareAcknowledge requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import attrs

from ..machines import SpecMachine, shipped_spec
from ..policy import Backoffs

log = logging.getLogger("fsm_consumer.share")

INITIAL_EPOCH = 0  # opens a session (ShareRequestMetadata.INITIAL_EPOCH)
FINAL_EPOCH = -1  # closes it
_MAX_EPOCH = 2**31 - 1
INVALID_RECORD_STATE = 121
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133
SESSION_ERRORS = frozenset({SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED})
_ERROR_NAMES = {
    SHARE_SESSION_NOT_FOUND: "SHARE_SESSION_NOT_FOUND",
    INVALID_SHARE_SESSION_EPOCH: "INVALID_SHARE_SESSION_EPOCH",
    SHARE_SESSION_LIMIT_REACHED: "SHARE_SESSION_LIMIT_REACHED",
}

NO_SHARE_GROUPS = (
    "this broker does not support share groups (KIP-932): Apache Kafka 4.2+ with share groups enabled is needed; "
    "Tansu has none"
)

OnEnded = Callable[[int, int, str, float], Any]  # (node, generation, why, now)


class TopicIdPartition(NamedTuple):
    """A partition as share requests name it: by topic id (KIP-516), not by name."""

    topic_id: str
    partition: int


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``, as ShareRequestMetadata.nextEpoch: -1 stays -1, INT32_MAX wraps to 1 (0 would
    mean "open a new session")."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@attrs.frozen
class SessionPlan:
    """What the next request to the session's broker is; ``kind`` is the spec's ``request`` attribute."""

    node: int
    kind: str  # open_session, in_session, close_session
    epoch: int
    generation: int  # the session the request belongs to: batches acquired by its answer carry it
    to_add: tuple[TopicIdPartition, ...] = ()  # listed in the request (all of them when opening)
    to_forget: tuple[TopicIdPartition, ...] = ()  # ForgottenTopicsData
    acks_allowed: bool = False

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def _setting(config: Any, key: str, default: float) -> float:
    if config is None:
        return default
    got = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
    return default if got is None else got


class ShareSession:
    """The session with one broker node; one request to it in flight at a time."""

    SPEC = "share_session"

    def __init__(
        self,
        node: int,
        *,
        config: Any = None,
        now: float = 0.0,
        on_ended: OnEnded | None = None,
        backoffs: Backoffs | None = None,
    ) -> None:
        self.node = node
        self.epoch = INITIAL_EPOCH
        self.generation = 0  # counts the sessions tried with this broker
        self.partitions: dict[TopicIdPartition, None] = {}  # the broker's view of the session, in order
        self.ended_why: str | None = None  # why the last session ended
        self.error = 0  # the top-level error of the last answer
        self._on_ended = on_ended
        self._why = ""
        self._backoff = backoffs or Backoffs(
            _setting(config, "retry_backoff_ms", 100), _setting(config, "retry_backoff_max_ms", 1000)
        )
        self.machine = SpecMachine(shipped_spec(self.SPEC), self, config=config, now=now, instance=str(node))

    @property
    def state(self) -> str:
        return self.machine.state

    @property
    def acks_allowed(self) -> bool:
        return self.machine.attribute("acks") == "allowed"

    @property
    def ended(self) -> bool:
        return self.machine.is_terminal

    # -- what the next request is ----------------------------------------------------------------------
    def plan(self, partitions: Iterable[TopicIdPartition]) -> SessionPlan | None:
        """The next request if the session allows one now, for these partitions to fetch (in order); None when
        one is in flight, the session backs off, or it ended. As Java's newShareFetchBuilder: a session
        partition no longer wanted is forgotten, a wanted one not in the session added."""
        kind = self.machine.attribute("request")
        wanted = list(dict.fromkeys(partitions))
        if kind == "none":
            return None
        if kind == "open_session":
            return SessionPlan(self.node, kind, INITIAL_EPOCH, self.generation + 1, tuple(wanted))
        if kind == "close_session":
            return SessionPlan(self.node, kind, FINAL_EPOCH, self.generation, acks_allowed=self.acks_allowed)
        added = tuple(tp for tp in wanted if tp not in self.partitions)
        forgotten = tuple(tp for tp in self.partitions if tp not in set(wanted))
        return SessionPlan(self.node, kind, self.epoch, self.generation, added, forgotten, self.acks_allowed)

    def sent(self, plan: SessionPlan, now: float) -> None:
        """The request of ``plan`` went out: the broker's view of the session is what it listed."""
        if plan.kind == "open_session":
            self.partitions = dict.fromkeys(plan.to_add)
        elif plan.kind == "in_session":
            for tp in plan.to_forget:
                self.partitions.pop(tp, None)
            self.partitions.update(dict.fromkeys(plan.to_add))
        self.machine.fire("sent", now)

    # -- answers ---------------------------------------------------------------------------------------
    def on_answer(self, error: int, now: float) -> str:
        """The request in flight was answered with top-level ``error``: ``answered`` (none), ``session_error``
        (the session ended, maybe after a backoff) or ``refused`` (another error; the session goes on)."""
        self.error = error
        if not error:
            trigger = "answered"
        elif error in SESSION_ERRORS:
            trigger = "session_error"
            self._why = _ERROR_NAMES[error]
        else:
            trigger = "refused"
            self._why = f"top-level error {error}"
        self.machine.fire(trigger, now)
        return trigger

    def on_disconnect(self, why: str, now: float) -> None:
        """No answer will come (connection lost, request timed out), or the connection went while idle."""
        self._why = why
        self.machine.fire("disconnected", now)

    def close(self, now: float) -> None:
        """close() or leaving: the next request closes the session, once the one in flight is answered."""
        self._why = "closed by the member"
        self.machine.fire("close_requested", now)

    def tick(self, now: float) -> None:
        self.machine.tick(now)

    # -- hooks named in the spec -------------------------------------------------------------------------
    def begin_session(self) -> None:
        self.generation += 1
        self.epoch = INITIAL_EPOCH

    def advance_epoch(self) -> None:
        self.epoch = next_epoch(self.epoch)
        self._backoff.succeeded("open")

    def end_session(self) -> None:
        why = self._why or "ended"
        log.info("share session %d with node %d ended at epoch %d: %s", self.generation, self.node, self.epoch, why)
        self.ended_why = why
        self.epoch = INITIAL_EPOCH
        self.partitions = {}
        if self._on_ended is not None:
            self._on_ended(self.node, self.generation, why, self.machine.now)

    def must_wait(self) -> bool:
        return self.error == SHARE_SESSION_LIMIT_REACHED

    def next_backoff_ms(self, configured: float) -> float:
        now = self.machine.now
        return self._backoff.failed("open", now) - now

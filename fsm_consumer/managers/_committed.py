"""The group's committed offsets (OffsetFetch): as the starting positions of newly assigned partitions, and
for the user's ``committed()`` lookups.

A partition waiting for its committed offset is asked for with backoff per partition; an answer the user
must act on (GROUP/TOPIC_AUTHORIZATION_FAILED) is held (raised by poll()) and the partitions under it are
not asked again while it is held; it is released once no partition waits under it. A lookup is retried
after a backoff until its event's deadline, unless its error is the user's to fix.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

from kafka.protocol.consumer import OffsetFetchRequest

from ..events import FetchCommittedEvent
from ..policy import Action, Backoffs, classify, public_error
from ..structs import OffsetAndMetadata, TopicPartition
from ._base import FOREVER, Outgoing, error_of

log = logging.getLogger("fsm_consumer.commit")

_LOADING = 14  # COORDINATOR_LOAD_IN_PROGRESS: the same coordinator, later
_GROUP_AUTHORIZATION_FAILED = 30
_TOPIC_AUTHORIZATION_FAILED = 29


def _name(error: BaseException) -> str:
    return type(error).__name__


class CommittedOffsets:
    """What the commit manager sends as OffsetFetch, and what it does with the answers."""

    def __init__(self, config: Any, subscription: Any, coordinator: Any, held: Any, membership: Callable[[], Any]):
        self._config = config
        self._subs = subscription
        self._coordinator = coordinator
        self._held = held
        self._membership = membership  # the MembershipManager in group mode, else None
        self._lookups: list[FetchCommittedEvent] = []
        self._fetching: set[TopicPartition] = set()
        # a failing lookup or partition is retried a few times a second at most (the error policy)
        self._retries = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)  # per lookup
        self._positions = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)  # per partition
        self._holding: set = set()  # held-error keys this manager holds
        self._needed: set[TopicPartition] = set()

    def on_fetch_committed(self, event: FetchCommittedEvent) -> None:
        self._lookups.append(event)

    def has_work(self) -> bool:
        """Whether an OffsetFetch is wanted (releasing the held errors no partition waits under first)."""
        awaiting = self._subs.awaiting_committed()
        self._release_unneeded(awaiting)
        # held (GROUP/TOPIC_AUTHORIZATION_FAILED): not asked again while the user has not acted
        self._needed = {tp for tp in awaiting - self._fetching if not self._denied(tp)}
        self._lookups = [e for e in self._lookups if not self._dropped(e)]
        return bool(self._lookups or self._needed)

    def requests(self, now: float, node: int) -> tuple[float, list[Outgoing]]:
        """The OffsetFetch requests due now (after ``has_work()``), and how long until the next is."""
        wait = FOREVER
        out: list[Outgoing] = []
        ready = set()
        for tp in self._needed:
            later = self._positions.wait(tp, now)
            if later:
                wait = min(wait, later)
            else:
                ready.add(tp)
        self._needed = set()
        if ready:
            self._fetching |= ready
            out.append(self._fetch(ready, node, partial(self._on_positions, partitions=frozenset(ready))))
        for event in list(self._lookups):
            later = self._retries.wait(event, now)
            if later:
                wait = min(wait, later)
                continue
            self._lookups.remove(event)
            out.append(self._fetch(event.partitions, node, partial(self._on_lookup, event=event)))
        return wait, out

    def _fetch(self, partitions, node: int, on_answer) -> Outgoing:
        """An OffsetFetch of ``partitions``. Under the consumer protocol it carries the member id and epoch
        (v9, KIP-848) where the spec's ``offset_fetch`` attribute says so, read now; a broker that speaks that
        protocol (Kafka 3.7+) speaks v9. Otherwise a plain group lookup, v7, which every broker here speaks."""
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            topics[tp.topic].append(tp.partition)
        m = self._membership()
        member = None if m is None else m.fetch_member()
        if member is None:
            plain = OffsetFetchRequest(
                group_id=self._config.group_id,
                require_stable=True,
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=sorted(ps))
                    for t, ps in topics.items()
                ],
            )
            return Outgoing(plain, node, on_answer, max_version=7)
        group = OffsetFetchRequest.OffsetFetchRequestGroup
        request = OffsetFetchRequest(
            require_stable=True,
            groups=[
                group(
                    group_id=self._config.group_id,
                    member_id=member[0],
                    member_epoch=member[1],
                    topics=[
                        group.OffsetFetchRequestTopics(name=t, partition_indexes=sorted(ps)) for t, ps in topics.items()
                    ],
                )
            ],
        )
        return Outgoing(request, node, on_answer, min_version=9, max_version=9)

    @staticmethod
    def _committed(response, partitions) -> tuple[dict, dict]:
        """(tp -> OffsetAndMetadata or None, tp -> error code); a group-level code applies to all."""
        found: dict = {}
        errors: dict = {}
        answer = response.groups[0] if getattr(response, "groups", None) else response  # v8+: one group asked
        top = getattr(answer, "error_code", 0)
        for t in answer.topics or ():
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code or top:
                    errors[tp] = p.error_code or top
                    continue
                found[tp] = (
                    None
                    if p.committed_offset < 0
                    else OffsetAndMetadata(
                        p.committed_offset, p.metadata or "", getattr(p, "committed_leader_epoch", -1)
                    )
                )
        if top:
            errors.update({tp: top for tp in partitions if tp not in errors})
        return found, errors

    # -- committed offsets as starting positions ----------------------------------------------------------
    def _on_positions(self, pending, now: float, partitions) -> None:
        self._fetching -= partitions
        if pending.error is not None:
            self._coordinator.mark_unknown()
            for tp in partitions:
                self._positions.failed(tp, now)
            return
        found, errors = self._committed(pending.response, partitions)
        for tp in partitions:
            if tp in found:
                self._positions.succeeded(tp)
                om = found[tp]
                self._subs.set_committed_position(
                    tp, None if om is None else om.offset, -1 if om is None else om.leader_epoch
                )
            else:  # in errors, or left out of the answer: asked again after a backoff
                self._positions.failed(tp, now)
        by_code: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp, code in errors.items():
            if tp in partitions:
                by_code[code].append(tp)
        for code, tps in by_code.items():
            action = classify(code)
            if action is Action.REDISCOVER and code != _LOADING:
                self._coordinator.mark_unknown()
            elif action is Action.FATAL:
                self._deny(code, tps)

    def _deny(self, code: int, tps) -> None:
        """Hold what the user must fix; the partitions are not asked for again while it is held."""
        group = self._config.group_id
        held: list[tuple[tuple[object, ...], BaseException]]  # (held-error key, error)
        if code == _GROUP_AUTHORIZATION_FAILED:
            held = [(("group",), public_error(code, f"OffsetFetch of the committed offsets of group {group!r}"))]
        elif code == _TOPIC_AUTHORIZATION_FAILED:
            held = [
                (
                    ("topic", t),
                    public_error(code, f"OffsetFetch of the committed offsets of topic {t!r} (group {group!r})"),
                )
                for t in sorted({tp.topic for tp in tps})
            ]
        else:
            held = [
                (
                    ("partition", tp),
                    public_error(code, f"OffsetFetch of the committed offset (group {group!r})", partitions=[tp]),
                )
                for tp in tps
            ]
        for key, error in held:
            if self._held.holds(key):
                continue  # another manager's error for the same thing (membership's fatal error): kept
            self._held.hold(key, error)
            self._holding.add(key)
            log.warning("%s", error)

    def _denied(self, tp: TopicPartition) -> bool:
        held = self._held
        return held.holds(("group",)) or held.holds(("topic", tp.topic)) or held.holds(("partition", tp))

    def _release_unneeded(self, awaiting) -> None:
        """Release this manager's held errors once no partition waits for its committed offset under
        them (the user sought or gave them up); the membership's own fatal error is never touched."""
        for key in list(self._holding):
            if not self._held.holds(key):
                self._holding.discard(key)  # released by someone else (a seek, a Metadata answer)
            elif not any(_covers(key, tp) for tp in awaiting):
                m = self._membership()
                if key == ("group",) and m is not None and m.machine.attribute("commit") == "fatal":
                    self._holding.discard(key)  # now the membership's: raised until close()
                    continue
                self._held.release(key)
                self._holding.discard(key)

    # -- committed() -----------------------------------------------------------------------------------
    def _dropped(self, event: FetchCommittedEvent) -> bool:
        if event.future is not None and event.future.done:  # timed out meanwhile
            self._retries.succeeded(event)
            return True
        return False

    def _on_lookup(self, pending, now: float, event: FetchCommittedEvent) -> None:
        assert event.future is not None  # committed() waits on it
        if event.future.done:
            self._retries.succeeded(event)
            return
        if pending.error is not None:
            self._coordinator.mark_unknown()
            self._retry_lookup(event, now, pending.error)
            return
        found, errors = self._committed(pending.response, event.partitions)
        errors = {tp: code for tp, code in errors.items() if tp in event.partitions}
        if not errors:
            self._retries.succeeded(event)
            event.complete({tp: found.get(tp) for tp in event.partitions})
            return
        code = next(
            (c for c in errors.values() if classify(c) in (Action.FATAL, Action.RESET)),
            next(iter(errors.values())),
        )
        action = classify(code)
        # FENCED: the member epoch it carried is gone; asked again with what the member holds then
        if action in (Action.FATAL, Action.RESET):  # the user's to fix: never retried
            self._retries.succeeded(event)
            tps = None if code == _GROUP_AUTHORIZATION_FAILED else [tp for tp, c in errors.items() if c == code]
            event.fail(public_error(code, f"OffsetFetch for group {self._config.group_id!r}", partitions=tps))
            return
        if action is Action.REDISCOVER and code != _LOADING:
            self._coordinator.mark_unknown()
        self._retry_lookup(event, now, error_of(code)("OffsetFetch"))

    def _retry_lookup(self, event: FetchCommittedEvent, now: float, error: BaseException) -> None:
        event.cause = f"last error {_name(error)}"
        self._retries.failed(event, now)
        self._lookups.append(event)  # asked again after its backoff, until the event's deadline


def _covers(key, tp: TopicPartition) -> bool:
    kind = key[0]
    return kind == "group" or (kind == "topic" and key[1] == tp.topic) or (kind == "partition" and key[1] == tp)

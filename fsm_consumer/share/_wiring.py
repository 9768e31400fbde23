"""What one ``ShareConsumer`` is made of, wired together: the transport, metadata and coordinator discovery the
consumer has too, the share membership, heartbeat and fetching (sans-IO, fsm_consumer.managers._share_*), the
request manager that turns their plain data into requests (_requests.py), the background machine and the
network thread that runs them all (not yet started).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from .._config import ConsumerConfig
from .._history_writer import HistoryWriter
from .._metrics import Metrics
from ..engine import ApplicationEventProcessor, BackgroundLifecycle, NetworkThread
from ..events import ApplicationEventQueue, BackgroundEventQueue, Signal
from ..fetch._decode import decode_partition
from ..fetch._errors import RecordError
from ..machines import Linker, MonotonicClock, SpecMachine, shipped_composition, shipped_spec
from ..managers import CoordinatorManager, MetadataManager
from ..managers._share_buffer import ShareBuffer
from ..managers._share_fetch import ShareFetchManager
from ..managers._share_heartbeat import ShareHeartbeatManager
from ..managers._share_membership import ShareMembershipManager
from ..managers._share_session import TopicIdPartition
from ..protocol import ShareAcknowledgeRequest
from ..state import HeldErrors
from ..structs import TopicPartition
from ..transport._kafka import KafkaTransport
from ._config import ShareSettings
from ._events import ShareSubscribeEvent, ShareUnsubscribeEvent
from ._history import ShareHistory
from ._requests import ShareRequests

if TYPE_CHECKING:
    from ..transport import Transport

log = logging.getLogger("fsm_consumer.share")


@attrs.define
class ShareParts:
    config: ConsumerConfig
    settings: ShareSettings
    lock: threading.Lock  # the share state: taken by the background thread and by poll()/acknowledge()
    held: HeldErrors
    app_queue: ApplicationEventQueue
    bg_queue: BackgroundEventQueue
    transport: Transport
    metadata: MetadataManager
    lifecycle: BackgroundLifecycle
    background_machine: SpecMachine
    membership: ShareMembershipManager
    fetch: ShareFetchManager
    requests: ShareRequests
    thread: NetworkThread
    decode_errors: list[RecordError]  # a corrupt batch: raised once by the next poll(), that partition only
    metrics: Metrics
    clock: MonotonicClock  # only the consumer's now: the background loop owns its own reading of it
    topics: list[str] = attrs.field(factory=list)  # the subscription (read by the metadata manager)
    history: ShareHistory | None = None  # the history_path file's lines, or None

    def topic_id(self, name: str) -> str | None:
        """The id of topic ``name``, as the metadata knows it (None: not known)."""
        info = self.metadata.topics.get(name)
        return info.topic_id if info is not None and info.topic_id else None

    def topic_ids(self) -> dict[str, str]:
        """topic name -> topic id, as the metadata knows them."""
        return {name: info.topic_id for name, info in self.metadata.topics.items() if info.topic_id}


class _Closer:
    """The background machine's closer: leave the group (its sessions close first, with the last
    acknowledgements), done once the member is out of it."""

    def __init__(self, parts: ShareParts) -> None:
        self._parts = parts

    def begin_close(self, autocommit: bool) -> None:
        parts = self._parts
        with parts.lock:
            parts.membership.leave(parts.membership.machine.now)

    @property
    def close_done(self) -> bool:
        m = self._parts.membership
        return m.state in ("unsubscribed", "fatal") and self._parts.fetch.all_closed


def wire(config: ConsumerConfig, settings: ShareSettings, transport: Transport | None, signal: Signal) -> ShareParts:
    clock = MonotonicClock()
    metrics = Metrics()
    held = HeldErrors()
    app_queue = ApplicationEventQueue()
    bg = BackgroundEventQueue(signal)
    transport = transport or KafkaTransport(config, clock=clock)
    # its first ShareAcknowledge (a commit's, or every one in explicit mode) comes in the middle of the records
    transport.will_send([ShareAcknowledgeRequest])
    app_queue.bind_waker(transport.wakeup)
    topics: list[str] = []
    metadata = MetadataManager(config, lambda: set(topics), held, getattr(transport, "node_states", None))
    lifecycle = BackgroundLifecycle()
    machine = SpecMachine(
        shipped_spec("background"), lifecycle, config=config, instance=config.client_id, now=clock.now_ms()
    )
    lifecycle.machine = machine
    coordinator = CoordinatorManager(config, machine, held)
    lifecycle.coordinator = coordinator
    lock = threading.Lock()
    decode_errors: list[RecordError] = []

    # topic id -> name (share requests name topics by id), replaced whole: both threads read it
    id_names: list[dict[str, str]] = [{}]

    def name_of(topic_id: str) -> str | None:
        name = id_names[0].get(topic_id)
        info = metadata.topics.get(name) if name is not None else None
        if info is None or info.topic_id != topic_id:  # not known yet, or the metadata changed: built again
            id_names[0] = {i.topic_id: n for n, i in list(metadata.topics.items()) if i.topic_id}
            name = id_names[0].get(topic_id)
        return name

    def known(topic_id: str) -> bool:
        return name_of(topic_id) is not None

    def leader_of(tp: TopicIdPartition) -> int | None:
        name = name_of(tp.topic_id)
        return None if name is None else metadata.leader(TopicPartition(name, tp.partition))

    def decode(records: Any) -> Iterable[Any]:
        name, partition, data, first = records
        if data is None or name is None:
            return ()
        got = decode_partition(name, partition, data, fetch_offset=first, check_crcs=config.check_crcs)
        if got.error is not None:
            # what decoded before it is handed out; the acquired records past it are acknowledged as gaps (the
            # broker archives them, as Java's consumer rejects a corrupt batch): that partition only
            decode_errors.append(got.error)
            signal.set()
        return got.records

    buffer = ShareBuffer(decode=decode)  # loads the share_batch spec now, not when the first records come
    membership = ShareMembershipManager(
        config.group_id or "",
        config=config,
        rack_id=config.client_rack or None,
        topic_known=known,
        now=clock.now_ms(),
    )
    heartbeat = ShareHeartbeatManager(
        membership,
        coordinator=coordinator,
        retry_backoff_ms=config.retry_backoff_ms,
        retry_backoff_max_ms=config.retry_backoff_max_ms,
    )
    fetch = ShareFetchManager(
        assignment=membership.fetch_assignment,
        leader_of=leader_of,
        buffer=buffer,
        config=config,
        member_id=membership.member_id,
    )
    requests = ShareRequests(
        group_id=config.group_id or "",
        membership=membership,
        heartbeat=heartbeat,
        fetch=fetch,
        metadata=metadata,
        lock=lock,
        notify=signal.set,
        acquire_mode=settings.acquire_mode,
        request_timeout_ms=config.request_timeout_ms,
        connected=transport.ready,
        clock=clock.now_ms,
    )
    membership._close_sessions = requests.close_sessions  # the spec's start_leaving closes every session first
    history = _history(config, settings, membership, fetch, transport, machine, held, name_of)
    processor = ApplicationEventProcessor(
        metadata=metadata, offsets=None, lifecycle=lifecycle, machine=machine, subscription=None
    )

    def subscribe(event: ShareSubscribeEvent, now: float) -> None:
        topics[:] = sorted(event.topics)
        metadata.request_update(set(topics))
        with lock:
            fetch.reopen()  # after an unsubscribe(): new sessions
            membership.subscribe(topics, now)
        event.complete(None)

    def unsubscribe(event: ShareUnsubscribeEvent, now: float) -> None:
        with lock:
            membership.leave(now)
        topics.clear()
        event.complete(None)

    processor.register(ShareSubscribeEvent, subscribe)
    processor.register(ShareUnsubscribeEvent, unsubscribe)
    thread = NetworkThread(
        name=f"fsm-share-consumer-network-{config.client_id}",
        clock=clock,
        transport=transport,
        managers=[metadata, coordinator, requests],
        processor=processor,
        machine=machine,
        lifecycle=lifecycle,
        app_queue=app_queue,
        background_queue=bg,
        metadata=metadata,
        metrics=metrics,
        held=held,
        broker_sources=[coordinator],
        linker=_linker(machine, membership, fetch),
    )
    parts = ShareParts(
        config=config,
        settings=settings,
        lock=lock,
        held=held,
        app_queue=app_queue,
        bg_queue=bg,
        transport=transport,
        metadata=metadata,
        lifecycle=lifecycle,
        background_machine=machine,
        membership=membership,
        fetch=fetch,
        requests=requests,
        thread=thread,
        decode_errors=decode_errors,
        metrics=metrics,
        clock=clock,
        topics=topics,
        history=history,
    )
    lifecycle.closers.append(_Closer(parts))
    return parts


def _linker(background: SpecMachine, membership: ShareMembershipManager, fetch: ShareFetchManager) -> Linker:
    """The links of specs/compositions/share_consumer.yaml, checked as the consumer runs (sessions as they come)."""
    linker = Linker(
        shipped_composition("share_consumer"),
        {
            "background": lambda: [background],
            "member": lambda: [membership.machine],
            "session": lambda: [s.machine for s in fetch.sessions.values()],
        },
    )
    linker.attach("background", background)
    linker.attach("member", membership.machine)
    fetch.on_session = lambda session: linker.attach("session", session.machine)
    return linker


def _history(
    config: ConsumerConfig,
    settings: ShareSettings,
    membership: ShareMembershipManager,
    fetch: ShareFetchManager,
    transport: Transport,
    machine: SpecMachine,
    held: HeldErrors,
    name_of: Callable[[str], str | None],
) -> ShareHistory | None:
    """history_path given: every machine's transitions, the buffer's outcomes and losses, as history lines."""
    if not config.history_path:
        return None
    writer = HistoryWriter(config.history_path, config.client_id)
    history = ShareHistory(writer, membership, name_of)
    history.started(config, settings)
    held.on_new = lambda key, error: writer.write("held", key=repr(key), error=repr(error))
    for m in (machine, membership.machine):
        m.observer = writer.transition
    fetch.machine_observer = fetch.buffer.machine_observer = writer.transition
    if hasattr(transport, "machine_observer"):
        transport.machine_observer = writer.transition  # every connection's machine
    fetch.buffer.observer = history
    return history

"""What one ``Consumer`` is made of, wired together: the state both threads share (subscription, held
errors, metrics), the two event queues, the fetch buffer and collector, the request managers (the group's
when there is a ``group_id``, else the self-assignment of a group-less subscription), the background
machine and the network thread that runs them (not yet started). The consumer keeps the parts it uses.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
from kafka.protocol.consumer import HeartbeatRequest, OffsetCommitRequest

from .._config import ConsumerConfig
from .._history_writer import HistoryWriter
from .._metrics import Metrics
from ..engine import ApplicationEventProcessor, BackgroundLifecycle, NetworkThread
from ..events import ApplicationEventQueue, BackgroundEventQueue, Signal
from ..fetch._buffer import FetchBuffer
from ..fetch._collector import FetchCollector
from ..machines import Linker, MonotonicClock, SpecMachine, shipped_composition, shipped_spec
from ..managers import FetchManager, MetadataManager, OffsetsManager, SelfAssignManager
from ..state import HeldErrors, SubscriptionState
from ..transport._kafka import KafkaTransport
from ._group import GroupParts

_log = logging.getLogger("fsm_consumer.metadata")

if TYPE_CHECKING:
    from ..transport import Transport


@attrs.frozen
class Parts:
    metrics: Metrics
    subs: SubscriptionState
    held: HeldErrors  # what the user must act on: raised by poll() and blocking calls
    app_queue: ApplicationEventQueue
    bg_queue: BackgroundEventQueue
    buffer: FetchBuffer
    transport: Transport
    metadata: MetadataManager
    collector: FetchCollector
    lifecycle: BackgroundLifecycle
    background_machine: SpecMachine
    group: GroupParts | None
    thread: NetworkThread
    history: HistoryWriter | None  # the history_path file's writer


def wire(config: ConsumerConfig, transport: Transport | None, clock: MonotonicClock, signal: Signal) -> Parts:
    """The parts of a consumer with ``config``; ``transport`` None: a ``KafkaTransport``. ``signal`` wakes
    the application thread (new data, a background event, a position change)."""
    metrics = Metrics()
    subs = SubscriptionState(config.auto_offset_reset, notify=signal.set, fetch_ahead=config.fetch_ahead)
    held = HeldErrors()  # what the user must act on: raised by poll() and blocking calls
    app_queue = ApplicationEventQueue()
    bg = BackgroundEventQueue(signal)
    buffer = FetchBuffer(config.fetch_buffer_max_bytes, on_data=signal.set)
    transport = transport or KafkaTransport(config, clock=clock)
    if config.group_id:  # a group's first commit and (classic protocol) heartbeat come in the middle of the records
        transport.will_send([OffsetCommitRequest, *([HeartbeatRequest] if config.group_protocol == "classic" else [])])
    history = HistoryWriter(config.history_path, config.client_id) if config.history_path else None
    if history is not None:
        held.on_new = lambda key, error: history.write("held", key=repr(key), error=repr(error))
        subs.on_position = lambda tp, offset, why: history.write(
            "reset", tp=[tp.topic, tp.partition], to=offset, why=why
        )
        subs.on_assignment = history.ownership
        if hasattr(transport, "machine_observer"):
            transport.machine_observer = history.transition  # every connection's machine
    app_queue.bind_waker(transport.wakeup)
    metadata = MetadataManager(config, subs.topics_needed, held, getattr(transport, "node_states", None))
    metadata.on_recreated = lambda topic, old, new: _recreated(subs, config, topic, old, new)
    offsets = OffsetsManager(config, subs, metadata, bg, held)
    fetch = FetchManager(config, subs, metadata, buffer, held, metrics)
    lifecycle = BackgroundLifecycle()
    # no clock: the loop ticks it with its `now` before anything fires (only the engine reads time)
    machine = SpecMachine(
        shipped_spec("background"), lifecycle, config=config, instance=config.client_id, now=clock.now_ms()
    )
    lifecycle.machine = machine
    machine.observer = history.transition if history is not None else None
    processor = ApplicationEventProcessor(
        metadata=metadata, offsets=offsets, lifecycle=lifecycle, machine=machine, subscription=subs
    )
    collector = FetchCollector(config, subs, buffer, transport.wakeup, metrics, clock, history=history)
    group = (
        GroupParts(
            config,
            subscription=subs,
            metadata=metadata,
            lifecycle=lifecycle,
            background_machine=machine,
            background_events=bg,
            app_queue=app_queue,
            processor=processor,
            metrics=metrics,
            held=held,
            history=history,
        )
        if config.group_id
        else None
    )
    own = [SelfAssignManager(config, subs, metadata)] if group is None else []
    thread = NetworkThread(
        name=f"fsm-consumer-network-{config.client_id}",
        clock=clock,
        transport=transport,
        managers=[metadata, *own, *(group.managers if group else ()), offsets, fetch],
        processor=processor,
        machine=machine,
        lifecycle=lifecycle,
        app_queue=app_queue,
        background_queue=bg,
        metadata=metadata,
        metrics=metrics,
        held=held,
        extra_machines=[group.membership.machine] if group else (),
        broker_sources=[group.coordinator] if group else (),
        linker=_linker(config, machine, group, transport) if group else None,
    )
    return Parts(
        metrics=metrics,
        subs=subs,
        held=held,
        app_queue=app_queue,
        bg_queue=bg,
        buffer=buffer,
        transport=transport,
        metadata=metadata,
        collector=collector,
        lifecycle=lifecycle,
        background_machine=machine,
        group=group,
        thread=thread,
        history=history,
    )


def _recreated(subs: SubscriptionState, config: ConsumerConfig, topic: str, old: str, new: str) -> None:
    """A topic deleted and created again under its name: the positions in the old log mean nothing in the new
    one (kept, they skipped its first records), so they are reset by the reset policy, said once."""
    tps = [tp for tp in subs.assignment() if tp.topic == topic]
    if not tps:
        return
    _log.warning(
        "topic %r was deleted and created again (topic id %s -> %s): the positions of its %d assigned "
        "partition(s) are reset by auto_offset_reset=%r; offsets committed for the old topic do not apply to it",
        topic,
        old,
        new,
        len(tps),
        config.auto_offset_reset,
    )
    subs.request_reset(tps, config.auto_offset_reset)


def _linker(config: ConsumerConfig, background: SpecMachine, group: GroupParts, transport: Transport) -> Linker:
    """The links of specs/compositions/consumer.yaml (classic_consumer.yaml), checked as the consumer runs; the
    connections as the transport makes them (one of another kind shows none)."""
    name = "classic_consumer" if config.group_protocol == "classic" else "consumer"
    member = group.membership.machine
    conns = getattr(transport, "_conns", {})
    linker = Linker(
        shipped_composition(name),
        {
            "background": lambda: [background],
            "member": lambda: [member],
            "connection": lambda: [c.machine for c in conns.values()],
        },
        {"coordinator_gone": lambda: group.coordinator.gone_for_close},
    )
    linker.attach("background", background)
    linker.attach("member", member)
    if hasattr(transport, "on_connection"):
        transport.on_connection = lambda conn: linker.attach("connection", conn.machine)
    return linker

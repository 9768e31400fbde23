"""KafkaTransport: non-blocking sockets to the brokers, one ``connection`` machine per node."""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import selectors
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage

from ..machines import Clock, MonotonicClock, Observer
from ._base import Pending, Transport
from ._codec import prepare as prepare_codec
from ._connection import SETTING_UP, Connection
from ._errors import AuthenticationError, ConnectionLost, NodeNotReady, RequestTimedOut, clone_error
from ._settings import KafkaSettings
from ._versions import ApiVersionTable
from ._waker import Waker

__all__ = ["KafkaTransport"]

logger = logging.getLogger("fsm_consumer.transport")


class KafkaTransport(Transport):
    """The real transport: a selector over one non-blocking socket per broker node.

    Bootstrap servers are nodes -1, -2, ... until ``update_brokers`` names the cluster's
    brokers; from then on requests without a node go to the brokers, and the bootstrap
    connections are closed as soon as they are idle.

    A request waits for its node's connection (connecting, backing off, reconnecting) until its
    deadline, then fails with RequestTimedOut; an authentication failure fails the waiting
    requests at once. A request that times out in flight also recycles its connection.

    ``broker_release`` is the Kafka release the last handshake's ApiVersions answer looks like,
    e.g. (3, 9), or None before any; a plain attribute, so any thread may read it.

    ``auth_failure`` and ``node_states()`` tell the layers above how the connections fare (see
    Transport); a failing node is logged as a WARNING at most every 30 s, its recovery as INFO.
    """

    def __init__(self, config: Any = None, *, clock: Clock | None = None, rng: random.Random | None = None) -> None:
        self.settings = KafkaSettings.from_config(config)
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self._rng = rng if rng is not None else random.Random()
        self._selector = selectors.DefaultSelector()
        self._waker = Waker()
        self._selector.register(self._waker, selectors.EVENT_READ, None)
        self._read_buffer = memoryview(bytearray(self.settings.sock_chunk_bytes))
        self.broker_release: tuple[int, ...] | None = None
        self._conns: dict[int, Connection] = {}
        self.machine_observer: Observer | None = None  # given to each connection's machine (a history)
        self.on_connection: Callable[[Connection], None] | None = None  # each connection made (a composition's linker)
        self._addresses: dict[int, tuple[str, int]] = {}
        self._bootstrap_ids: list[int] = []
        for index, address in enumerate(self.settings.bootstrap_servers):
            self._addresses[-(index + 1)] = address
            self._bootstrap_ids.append(-(index + 1))
        self._broker_ids: list[int] = []
        # node -> its latest authentication failure, oldest first; cleared when the node is ready
        self._auth_failures: dict[int, AuthenticationError] = {}
        self._auth_failure: AuthenticationError | None = None  # the newest of them
        self._unassigned: deque[Pending] = deque()
        self._deadlines: list[tuple[float, int, Pending]] = []
        self._seq = itertools.count()
        self._outstanding = 0
        self._completed: list[Pending] = []
        self._rotation = 0
        self._owner: int | None = None
        self._owner_name = ""
        self._closed = False
        self._will_send: tuple[type[ApiMessage], ...] = ()  # made ready at each connection's handshake

    # -- the interface ------------------------------------------------------------------------
    def send(
        self,
        request: ApiMessage,
        node: int | None = None,
        *,
        timeout_ms: float | None = None,
        tag: Any = None,
        min_version: int = 0,
        max_version: int | None = None,
    ) -> Pending:
        self._check_thread("send")
        if not isinstance(request, ApiMessage) or not request.is_request():
            raise TypeError(f"not a kafka-python request: {request!r}")
        now = self.clock.now_ms()
        timeout = self.settings.request_timeout_ms if timeout_ms is None else timeout_ms
        pending = Pending(request, node, now + timeout, tag, min_version, max_version)
        self._outstanding += 1
        if self._closed:
            self._fail(pending, ConnectionLost("the transport is closed", node_id=node))
            return pending
        if node is not None and node not in self._addresses:
            self._fail(
                pending,
                NodeNotReady(
                    f"unknown node {node}: neither a bootstrap server nor a broker from update_brokers", node_id=node
                ),
            )
            return pending
        heapq.heappush(self._deadlines, (pending.deadline_ms, next(self._seq), pending))
        if node is None:
            self._unassigned.append(pending)
            self._assign_unassigned()  # to a ready node, or start connecting one now
        else:
            self._connection(node).submit(pending)
        return pending

    def poll(self, timeout_ms: float) -> list[Pending]:
        self._check_thread("poll")
        if self._closed:
            return self._take_completed()
        now = self.clock.now_ms()
        self._service(now)
        wait = max(0.0, timeout_ms)
        if self._completed:
            wait = 0.0
        else:
            deadline = self.next_wakeup_ms()
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - now))
        for key, mask in self._selector.select(wait / 1000.0):
            conn = key.data
            if conn is None:
                self._waker.drain()
            elif key.fileobj is conn.sock:  # not closed by an earlier event of this batch
                conn.on_io(mask)
        self._service(self.clock.now_ms())
        return self._take_completed()

    def wakeup(self) -> None:
        self._waker.wake()

    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        if self._owner is not None:
            self._check_thread("update_brokers")
        fresh = {int(node): (str(host), int(port)) for node, (host, port) in brokers.items()}
        if any(node < 0 for node in fresh):  # negative ids are the bootstrap servers'
            raise ValueError(f"broker node ids are >= 0, got {sorted(fresh)}")
        for node, address in fresh.items():
            old = self._addresses.get(node)
            if old is not None and old != address and node in self._conns:
                self._conns[node].relocate(*address)
            self._addresses[node] = address
        for node in [n for n in self._broker_ids if n not in fresh]:
            conn = self._conns.pop(node, None)
            if conn is not None:
                conn.close(f"node {node} is no longer in the cluster metadata")
            del self._addresses[node]
            self._auth_verdict(node, None)  # a node that is gone fails nobody's requests
        self._broker_ids = sorted(fresh)
        self._retire_bootstrap()

    def ready(self, node: int) -> bool:
        conn = self._conns.get(node)
        return conn is not None and conn.state == "ready"

    def will_send(self, request_classes: Iterable[type[ApiMessage]]) -> None:
        # told by the client as it is built, before its I/O thread runs: each handshake from then on makes them
        self._will_send = (*self._will_send, *request_classes)

    def least_loaded_node(self) -> int | None:
        candidates = self._broker_ids or self._bootstrap_ids
        if not candidates:
            return None
        # Start at a rotating offset so that ties do not always land on the same node.
        self._rotation = (self._rotation + 1) % len(candidates)
        best, best_load, connecting, idle = None, None, None, None
        for node in candidates[self._rotation :] + candidates[: self._rotation]:
            conn = self._conns.get(node)
            if conn is None:
                idle = node if idle is None else idle
                continue
            phase = conn.machine.attribute("phase")  # connection.yaml says what each state is good for
            if phase == "ready":
                load = conn.outstanding
                if best_load is None or load < best_load:
                    best, best_load = node, load
            elif phase in SETTING_UP:
                connecting = node if connecting is None else connecting
            elif conn.state == "disconnected":
                idle = node if idle is None else idle
        for choice in (best, connecting, idle):
            if choice is not None:
                return choice
        return None

    def disconnect(self, node: int) -> None:
        conn = self._conns.get(node)
        if conn is not None:
            conn.disconnect()

    def next_wakeup_ms(self) -> float | None:
        earliest = None
        for conn in self._conns.values():
            d = conn.machine.next_deadline
            if d is not None and (earliest is None or d < earliest):
                earliest = d
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        if heap and (earliest is None or heap[0][0] < earliest):
            earliest = heap[0][0]
        return earliest

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns.values()):
            conn.close()
        unassigned, self._unassigned = self._unassigned, deque()
        for pending in unassigned:
            self._fail(pending, ConnectionLost("the transport is closed"))
        self._selector.close()
        self._waker.close()

    @property
    def auth_failure(self) -> AuthenticationError | None:
        """See Transport.auth_failure; any thread may read it."""
        return self._auth_failure

    def node_states(self) -> dict[int, dict[str, Any]]:
        """See Transport.node_states: the nodes requests may go to (the brokers once known, else
        the bootstrap servers, negative ids) and any other node that has a connection."""
        nodes = dict.fromkeys(self._broker_ids or self._bootstrap_ids)
        # Other threads call this: dict.copy() of int keys is one C call that runs no Python code, so
        # the I/O thread cannot change the dict midway (list(items()) allocates per entry, which can
        # run a collection, finalizers, and so a thread switch: "dictionary changed size").
        conns = self._conns.copy()
        nodes.update(dict.fromkeys(conns))
        states = {}
        for node in sorted(nodes):
            conn = conns.get(node)
            address = self._addresses.get(node)
            if conn is not None:
                host, port = conn.host, conn.port
                state, failures, last_error = conn.state, conn.health.failures, conn.health.last_error
            elif address is not None:
                (host, port), state, failures, last_error = address, "disconnected", 0, None
            else:
                continue
            states[node] = {"address": f"{host}:{port}", "state": state, "failures": failures, "last_error": last_error}
        return states

    # -- extras ---------------------------------------------------------------------------------
    @property
    def io_thread(self) -> int | None:
        """Ident of the thread that drives this transport (first to call send or poll)."""
        return self._owner

    @property
    def closed(self) -> bool:
        return self._closed

    def connection_state(self, node: int) -> str | None:
        conn = self._conns.get(node)
        return conn.state if conn is not None else None

    def connection(self, node: int) -> Connection | None:
        """The connection to ``node`` if one was made (tests and diagnostics)."""
        return self._conns.get(node)

    def __repr__(self) -> str:
        states = ", ".join(f"{n}:{c.state}" for n, c in sorted(self._conns.items()))
        return f"<KafkaTransport {self.settings.security_protocol} [{states}]{' closed' if self._closed else ''}>"

    # -- internals ------------------------------------------------------------------------------
    def _check_thread(self, call: str) -> None:
        me = threading.get_ident()
        if self._owner is None:
            self._owner, self._owner_name = me, threading.current_thread().name
        elif me != self._owner:
            raise RuntimeError(
                f"KafkaTransport.{call}() called from thread {threading.current_thread().name!r}; "
                f"only its I/O thread {self._owner_name!r} may call it"
            )

    def _connection(self, node: int) -> Connection:
        conn = self._conns.get(node)
        if conn is None:
            host, port = self._addresses[node]
            conn = Connection(
                node,
                host,
                port,
                settings=self.settings,
                clock=self.clock,
                selector=self._selector,
                read_buffer=self._read_buffer,
                rng=self._rng,
                complete=self._completed_one,
                versions_known=self._versions_known,
                auth_verdict=self._auth_verdict,
            )
            conn.machine.observer = self.machine_observer
            if self.on_connection is not None:
                self.on_connection(conn)
            self._conns[node] = conn
        return conn

    def _versions_known(self, release: tuple[int, ...], versions: ApiVersionTable) -> None:
        self.broker_release = release  # one assignment: readers on other threads see old or new
        self._prepare(versions)

    def _prepare(self, versions: ApiVersionTable) -> None:
        """The codecs of what the client will send, at the versions of a connection just set up (each made once
        per process and version: a connection after the first costs a lookup per request)."""
        for request_cls in self._will_send:
            try:
                version = versions.pick_version(request_cls)
                prepare_codec(request_cls, version)
            except Exception:  # noqa: BLE001 - only a head start: the request's own sending raises what is wrong
                logger.debug("could not make %s's codecs ahead", request_cls.__name__, exc_info=True)

    def _auth_verdict(self, node: int, error: AuthenticationError | None) -> None:
        """``node`` failed authentication (``error``) or got ready (None)."""
        self._auth_failures.pop(node, None)
        if error is not None:
            self._auth_failures[node] = error  # the newest goes last
        # One assignment, as broker_release: auth_failure is read from other threads.
        self._auth_failure = next(reversed(self._auth_failures.values()), None)

    def _completed_one(self, pending: Pending) -> None:
        self._outstanding -= 1
        self._completed.append(pending)

    def _fail(self, pending: Pending, error: Exception) -> None:
        if not pending.done:
            pending.error = error
            pending.done = True
            self._completed_one(pending)

    def _take_completed(self) -> list[Pending]:
        done, self._completed = self._completed, []
        return done

    def _service(self, now: float) -> None:
        """Timers, request deadlines, connecting where requests wait, and writing."""
        for conn in list(self._conns.values()):
            conn.machine.tick(now)
        self._expire(now)
        self._assign_unassigned()
        for conn in list(self._conns.values()):
            conn.maybe_reconnect()
            if conn.has_output:
                conn.flush()
        if self._broker_ids:
            self._retire_bootstrap()

    def _expire(self, now: float) -> None:
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, pending = heapq.heappop(heap)
            if pending.done:
                continue
            conn = self._conns.get(pending.sent_to) if pending.sent_to is not None else None
            if conn is not None:
                conn.request_timed_out(pending)
            else:
                where = f"node {pending.node}" if pending.node is not None else "any node"
                state = self.connection_state(pending.node) if pending.node is not None else None
                self._fail(
                    pending,
                    RequestTimedOut(
                        f"{type(pending.request).__name__} timed out waiting for a connection to {where}"
                        + (f" (connection {state})" if state else ""),
                        node_id=pending.node,
                    ),
                )
        # Completed requests leave their heap entries behind; drop them when they pile up.
        if len(heap) > 1024 and len(heap) > 4 * self._outstanding:
            self._deadlines = [entry for entry in heap if not entry[2].done]
            heapq.heapify(self._deadlines)

    def _assign_unassigned(self) -> None:
        waiting = deque(p for p in self._unassigned if not p.done)
        self._unassigned = waiting
        while waiting:
            node = self.least_loaded_node()
            if node is None or not self.ready(node):
                break
            self._conns[node].submit(waiting.popleft())
        if not waiting:
            return
        node = self.least_loaded_node()
        if node is not None:
            self._connection(node).connect()
            return
        # Every candidate is backing off; if all failed authentication, waiting cannot help.
        candidates = self._broker_ids or self._bootstrap_ids
        errors = [c.auth_error for n in candidates if (c := self._conns.get(n)) is not None]
        if errors and len(errors) == len(candidates) and all(isinstance(e, AuthenticationError) for e in errors):
            first = errors[0]
            assert first is not None  # every one is an AuthenticationError (checked just above)
            for pending in waiting:
                self._fail(pending, clone_error(first))
            waiting.clear()

    def _retire_bootstrap(self) -> None:
        """Once the brokers are known, close bootstrap connections that have nothing to do."""
        if not self._broker_ids:
            return
        for node in self._bootstrap_ids:
            conn = self._conns.get(node)
            if conn is not None and conn.idle:
                conn.close("bootstrap connection retired: the brokers are known")
                del self._conns[node]
                self._auth_verdict(node, None)

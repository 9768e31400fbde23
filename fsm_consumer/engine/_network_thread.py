"""The background thread: one per consumer, the only owner of the transport and of time.

Each pass of the loop (Kafka's ConsumerNetworkThread.runOnce): tick the machines (timers due
after a stall fire before anything is judged by the state); drain application events into the
processor; let every request manager poll(now) for requests and how long it may wait; hand the
requests to the transport; tick the machines; let the transport do I/O for at most the shortest
wait; route completions to the managers; expire events whose deadline passed.
"""

from __future__ import annotations

import logging
import math
import threading

from ..errors import AuthenticationFailedError, BackgroundThreadError
from ..events import ApplicationEvent, ErrorEvent
from ..machines import SpecError

log = logging.getLogger("fsm_consumer.engine")

_MAX_WAIT_MS = 5000.0  # even an idle loop wakes now and then (metadata age, deadlines of late events)
# A pass that takes this much longer than it asked to wait was stalled (the process stopped, starved):
# answers read after it may have waited unread since the pass before (see Pending.heard_after). While a
# lease runs no pass waits longer than this, so a freeze cannot hide inside a long wait.
_STALL_MS = 100.0


class NetworkThread:
    def __init__(
        self,
        *,
        name: str,
        clock,
        transport,
        managers,
        processor,
        machine,
        lifecycle,
        app_queue,
        background_queue,
        metadata,
        metrics,
        held=None,
        extra_machines=(),
        broker_sources=(),
        linker=None,
    ) -> None:
        self._clock = clock
        self._transport = transport
        self._managers = list(managers)
        self._processor = processor
        self._machine = machine
        self._machines = [machine, *extra_machines]
        self._linker = linker  # the composition's links (specs/compositions/), checked at the end of each pass
        self._lifecycle = lifecycle
        self._app_queue = app_queue
        self._bg = background_queue
        self._metadata = metadata
        self._metrics = metrics
        self._held = held
        self._auth_failure = None
        self._waiting: list[ApplicationEvent] = []  # processed events with a future not yet done
        self._broker_sources = [metadata, *broker_sources]  # each has .brokers and .version
        self._brokers_version: tuple = ()
        self._last_read: float | None = None  # when the previous pass's transport.poll returned
        self._stall_bound: float | None = None  # the bound of a stalled pass, for the pass after it
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- application thread ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float | None) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    # -- background thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._machine.fire("start")
            while not self._lifecycle.stopped:
                self.run_once()
        except BaseException as exc:  # never a raw traceback from a thread: hand it to the app
            log.exception("background thread failed")
            error = BackgroundThreadError(f"the consumer's background thread failed: {exc!r}")
            error.__cause__ = exc
            self._lifecycle.failure = error
            self._machine.fire("crash")  # a no-op once closed or failed (see background.yaml)
            self._bg.put(ErrorEvent(error))
            self._app_queue.close(error)  # events put from now on fail at once, not at their deadline
            for ev in self._app_queue.drain() + self._waiting:
                ev.fail(error)
        finally:
            try:
                self._transport.close()
                self._final_links()
            finally:
                close_event = getattr(self._lifecycle, "close_event", None)
                if close_event is not None:
                    close_event.complete(None)

    def _final_links(self) -> None:
        """The loop has ended and the transport closed: what the composition's links asked by the loop's end is
        done (every connection closed). A link broken here is logged: nobody calls the consumer any more, and the
        test suite's plugin fails the session on it (machines.pytest_plugin)."""
        if self._linker is None:
            return
        try:
            self._linker.check(final=True)
        except SpecError as exc:
            log.error("%s", exc)

    def run_once(self) -> None:
        clock, machine = self._clock, self._machine
        now = clock.now_ms()
        self._metrics.loop_iterations += 1
        # timers first: after a stall (a frozen process) an expired session must be seen before any
        # application event is judged by the state (a commit must not pass as "stable" and then go out)
        for m in self._machines:
            m.tick(now)
        events = self._app_queue.drain()
        if events:
            # made after this pass began (a commit of what poll() just handed out): what they cause is
            # stamped no earlier than they were made, as Java's runOnce reads the time after them
            now = clock.now_ms()
            for m in self._machines:
                m.tick(now)
        for event in events:
            self._processor.process(event, now)
            if event.future is not None and not event.future.done:
                self._waiting.append(event)
        for m in self._machines:
            m.tick(now)
        if machine.state == "closing" and self._lifecycle.closers_done:
            machine.fire("close_completed")
        if self._linker is not None:
            self._linker.check()  # what a state entered or a trigger fired in this pass asked of the others: done
        if self._lifecycle.stopped:
            return
        # brokers first: a manager may address a leader that the last Metadata answer just named
        versions = tuple(src.version for src in self._broker_sources)
        if versions != self._brokers_version:
            self._brokers_version = versions
            merged = {}
            for src in self._broker_sources:
                merged.update(src.brokers)
            self._transport.update_brokers(merged)
        wait = _MAX_WAIT_MS
        send = self._transport.send
        for manager in self._managers:
            w, requests = manager.poll(now)
            if w < wait:
                wait = w
            for out in requests:
                send(
                    out.request,
                    out.node,
                    timeout_ms=out.timeout_ms,
                    tag=out.handler,
                    min_version=out.min_version,
                    max_version=out.max_version,
                )
        for m in self._machines:
            if m.next_deadline is not None:
                wait = min(wait, m.next_deadline - now)
            if m.timers_running:
                # a lease runs: wake often enough that a stall of this process (frozen inside a long wait)
                # is always seen, or an answer read on waking would count as just heard (_heard_after)
                wait = min(wait, _STALL_MS)
        wait = max(0.0, min(wait, self._expire(now)))
        polled = clock.now_ms()
        done = self._transport.poll(wait)
        read = clock.now_ms()
        heard_after = self._heard_after(now, polled, read, wait)
        for pending in done:
            pending.heard_after = heard_after
            pending.tag(pending, clock.now_ms())
        self._watch_authentication()

    def _heard_after(self, started: float, polled: float, read: float, wait: float) -> float:
        """The earliest time an answer read at ``read`` can have been sent by its broker. A pass that ran
        as asked read it within _STALL_MS of its arrival; after a stall (this process stopped between
        passes or inside the wait) it may have arrived any time since the previous pass read. The pass after
        a stalled one is bounded by it too: a request queued before the stall went out, and its answer came
        back, only as the stalled pass ended (found by the history checker: a SyncGroup queued before a
        freeze, answered after it, renewed the lease as if just heard)."""
        last, self._last_read = self._last_read, read
        stalled = (
            last is None
            or started - last > _STALL_MS
            or polled - started > _STALL_MS
            or read - polled > wait + _STALL_MS
        )
        bound = (last if last is not None else started) if stalled else read - 2 * _STALL_MS
        if self._stall_bound is not None:
            bound = min(bound, self._stall_bound)
        self._stall_bound = bound if stalled and last is not None else None
        return bound

    def _watch_authentication(self) -> None:
        """A TLS or SASL failure is the user's to fix: held (raised by poll() and blocking calls) while
        the transport reports it, released once a connection authenticates again."""
        failure = getattr(self._transport, "auth_failure", None)
        if failure is self._auth_failure or self._held is None:
            return
        self._auth_failure = failure
        if failure is None:
            self._held.release(("auth",))
        else:
            error = AuthenticationFailedError(str(failure))
            error.__cause__ = failure
            self._held.hold(("auth",), error)

    def _expire(self, now: float) -> float:
        """Fail events past their deadline; return ms until the next deadline."""
        nearest = math.inf
        still = []
        for event in self._waiting:
            assert event.future is not None  # run_once keeps only events that have one
            if event.future.done:
                continue
            if now >= event.deadline_ms:
                event.fail(event.timeout_error())
            else:
                nearest = min(nearest, event.deadline_ms - now)
                still.append(event)
        self._waiting = still
        return nearest

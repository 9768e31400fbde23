"""FaultyTransport: any Transport with network faults switched on and off at runtime (tests).

Faults act on what the caller sees, above the wrapped transport: latency delays completions,
a blackhole holds requests until they time out, ``fail`` patches error codes into real
responses, ``corrupt`` mangles a response's bytes, ``cut`` really closes a connection.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs
from kafka.protocol.api_message import ApiMessage

from ..machines import Clock, MonotonicClock
from ._base import Pending, Transport
from ._codec import _decoders
from ._errors import AuthenticationError, ConnectionLost, ProtocolDecodeError, RequestTimedOut

__all__ = ["FaultyTransport"]

_ALL = None  # the node key meaning "every node"
_DEFAULT_TIMEOUT_MS = 30_000.0


def _api_name(api: str | type[ApiMessage]) -> str:
    name = api if isinstance(api, str) else api.name
    return name.removesuffix("Request").removesuffix("Response")


def _request_api(pending: Pending) -> str:
    return type(pending.request).name.removesuffix("Request")


def set_error_codes(obj: Any, code: int) -> int:
    """Set every ``error_code`` field in a kafka-python message, nested ones included; return
    how many were set."""
    count = 0
    fields = getattr(obj, "fields", None)
    if not isinstance(fields, Mapping):
        return 0
    for name in fields:
        value = getattr(obj, name, None)
        if name == "error_code":
            setattr(obj, name, code)
            count += 1
        elif isinstance(value, list):
            count += sum(set_error_codes(item, code) for item in value)
        elif value is not None and isinstance(getattr(value, "fields", None), Mapping):
            count += set_error_codes(value, code)
    return count


@attrs.define
class _Rule:
    api: str
    times: int
    node: int | None
    error_code: int = 0
    mutate: Callable[[bytes], bytes] | None = None
    target: str = "frame"
    delay_ms: float = 0.0

    def matches(self, pending: Pending) -> bool:
        node = pending.sent_to if pending.sent_to is not None else pending.node
        return self.times > 0 and _request_api(pending) == self.api and self.node in (None, node)


@attrs.define(eq=False)
class _Held:
    pending: Pending
    timeout: bool  # True: fail with RequestTimedOut at release, else deliver the saved outcome
    response: ApiMessage | None = None
    error: Exception | None = None


class FaultyTransport(Transport):
    """Wraps ``inner``; every fault is off until switched on. ``injected`` counts what was done."""

    def __init__(
        self, inner: Transport, *, clock: Clock | None = None, request_timeout_ms: float | None = None
    ) -> None:
        self.inner = inner
        self.clock: Clock = clock or getattr(inner, "clock", None) or MonotonicClock()
        settings = getattr(inner, "settings", None)
        self._request_timeout_ms = float(
            request_timeout_ms
            if request_timeout_ms is not None
            else getattr(settings, "request_timeout_ms", _DEFAULT_TIMEOUT_MS)
        )
        self._latency: dict[int | None, float] = {}
        self._blackholed: set[int | None] = set()
        self._fail_rules: list[_Rule] = []
        self._corrupt_rules: list[_Rule] = []
        self._delay_rules: list[_Rule] = []
        self._held: list[tuple[float, int, _Held]] = []
        self._live: dict[Pending, Pending] = {}  # the inner transport's Pending -> the caller's
        self._seq = itertools.count()
        self._ready: list[Pending] = []
        self.injected: Counter[str] = Counter()

    # -- switches ---------------------------------------------------------------------------------
    def add_latency(self, node: int | None, ms: float) -> None:
        """Delay completions from ``node`` (None: every node) by ``ms``; past a request's
        deadline it fails with RequestTimedOut instead."""
        if ms < 0:
            raise ValueError("latency must be >= 0")
        self._latency[node] = float(ms)

    def cut(self, node: int) -> None:
        """Close the connection to ``node`` now: its in-flight requests fail with ConnectionLost."""
        self.injected["cut"] += 1
        self.inner.disconnect(node)

    def blackhole(self, node: int | None) -> None:
        """From now on requests to ``node`` (None: every node) are held, never sent, and fail
        with RequestTimedOut at their deadline; answers still on their way are swallowed."""
        self._blackholed.add(node)

    def fail(self, api_name: str | type[ApiMessage], error_code: int, times: int = 1, node: int | None = None) -> None:
        """Answer the next ``times`` successful ``api_name`` responses (from ``node``) with every
        error_code field set to ``error_code``; the rest of the real response is kept."""
        self._fail_rules.append(_Rule(_api_name(api_name), times, node, error_code=error_code))

    def delay(self, api_name: str | type[ApiMessage], ms: float, times: int = 1, node: int | None = None) -> None:
        """Hold back the next ``times`` answers to ``api_name`` (from ``node``) for ``ms`` after they
        arrive, as a coordinator holding that request would (a JoinGroup held for a whole rebalance);
        past a request's deadline it fails with RequestTimedOut instead."""
        if ms < 0:
            raise ValueError("delay must be >= 0")
        self._delay_rules.append(_Rule(_api_name(api_name), times, node, delay_ms=float(ms)))

    def corrupt(
        self,
        api_name: str | type[ApiMessage],
        mutate_fn: Callable[[bytes], bytes],
        times: int = 1,
        node: int | None = None,
        *,
        target: Literal["frame", "records"] = "frame",
    ) -> None:
        """Pass the next ``times`` ``api_name`` responses through ``mutate_fn``.

        ``target="frame"``: the response body as the broker framed it (after the response
        header) goes through ``mutate_fn`` and is decoded again; if that fails the request fails
        with ProtocolDecodeError and the connection is closed, as a real bad frame would do.
        ``target="records"`` (Fetch): each non-empty partition's records bytes go through it.
        """
        if target not in ("frame", "records"):
            raise ValueError(f"target must be 'frame' or 'records', not {target!r}")
        self._corrupt_rules.append(_Rule(_api_name(api_name), times, node, mutate=mutate_fn, target=target))

    def clear(self) -> None:
        """Switch every fault off. Requests already held still time out."""
        self._latency.clear()
        self._blackholed.clear()
        self._fail_rules.clear()
        self._corrupt_rules.clear()
        self._delay_rules.clear()

    # -- the interface ------------------------------------------------------------------------------
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
        target = node if node is not None or not self._blackholed else self.inner.least_loaded_node()
        if self._is_blackholed(target):
            now = self.clock.now_ms()
            timeout = self._request_timeout_ms if timeout_ms is None else timeout_ms
            pending = Pending(request, node, now + timeout, tag, min_version, max_version)
            self.injected["blackhole"] += 1
            self._hold(pending.deadline_ms, _Held(pending, timeout=True))
            return pending
        inner = self.inner.send(
            request, node, timeout_ms=timeout_ms, tag=tag, min_version=min_version, max_version=max_version
        )
        # The caller gets its own Pending: the inner transport keeps bookkeeping on its copy
        # (deadlines check ``done``), which holding an answer back must not disturb.
        outer = Pending(request, node, inner.deadline_ms, tag, min_version, max_version)
        self._live[inner] = outer
        return outer

    def poll(self, timeout_ms: float) -> list[Pending]:
        now = self.clock.now_ms()
        wait = 0.0 if self._ready else timeout_ms
        if self._held:
            wait = min(wait, max(0.0, self._held[0][0] - now))
        for inner in self.inner.poll(wait):
            outer = self._live.pop(inner, None)
            if outer is not None:
                outer.sent_to = inner.sent_to
                outer.response, outer.error = inner.response, inner.error
                self._arrived(outer)
        for inner, outer in self._live.items():
            outer.sent_to = inner.sent_to
        now = self.clock.now_ms()
        while self._held and self._held[0][0] <= now:
            self._release(heapq.heappop(self._held)[2])
        ready, self._ready = self._ready, []
        return ready

    def wakeup(self) -> None:
        self.inner.wakeup()

    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        self.inner.update_brokers(brokers)

    def ready(self, node: int) -> bool:
        return self.inner.ready(node)

    def will_send(self, request_classes: Iterable[type[ApiMessage]]) -> None:
        self.inner.will_send(request_classes)

    def least_loaded_node(self) -> int | None:
        return self.inner.least_loaded_node()

    def disconnect(self, node: int) -> None:
        self.inner.disconnect(node)

    def next_wakeup_ms(self) -> float | None:
        inner = self.inner.next_wakeup_ms()
        held = self._held[0][0] if self._held else None
        return min((t for t in (inner, held) if t is not None), default=None)

    def close(self) -> None:
        self.inner.close()
        held, self._held = self._held, []
        live, self._live = self._live, {}
        for pending in [entry.pending for _, _, entry in held] + list(live.values()):
            pending.response, pending.error = None, ConnectionLost("the transport is closed")
            pending.done = True

    # The wrapped transport's real connections: injected faults are not connection failures.
    @property
    def auth_failure(self) -> AuthenticationError | None:
        return self.inner.auth_failure

    def node_states(self) -> dict[int, dict[str, Any]]:
        return self.inner.node_states()

    def __getattr__(self, name: str) -> Any:
        # Extras of the wrapped transport (io_thread, connection_state...) stay reachable.
        if name.startswith("_") or name == "inner":  # not set yet (a subclass mid-__init__)
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- internals ---------------------------------------------------------------------------------
    def _is_blackholed(self, node: int | None) -> bool:
        return bool(self._blackholed) and (_ALL in self._blackholed or node in self._blackholed)

    def _hold(self, release_ms: float, entry: _Held) -> None:
        heapq.heappush(self._held, (release_ms, next(self._seq), entry))

    def _arrived(self, pending: Pending) -> None:
        """The inner transport completed ``pending`` (outcome copied, not yet done): apply the
        faults, then hand it out now or hold it."""
        node = pending.sent_to if pending.sent_to is not None else pending.node
        if pending.error is None:
            if self._is_blackholed(node):
                # The answer never comes back: the caller sees a timeout at the deadline.
                self.injected["blackhole"] += 1
                self._hold(pending.deadline_ms, _Held(pending, timeout=True))
                return
            self._apply_fail(pending)
            self._apply_corrupt(pending)
        latency = self._latency.get(node, self._latency.get(_ALL, 0.0))
        for rule in self._delay_rules:
            if rule.matches(pending):
                rule.times -= 1
                latency = max(latency, rule.delay_ms)
                break
        if not latency:
            pending.done = True
            self._ready.append(pending)
            return
        self.injected["latency"] += 1
        release = self.clock.now_ms() + latency
        entry = _Held(pending, timeout=release > pending.deadline_ms, response=pending.response, error=pending.error)
        pending.response, pending.error = None, None  # invisible until released
        self._hold(min(release, pending.deadline_ms), entry)

    def _release(self, entry: _Held) -> None:
        pending = entry.pending
        if entry.timeout:
            pending.response = None
            pending.error = RequestTimedOut(
                f"{type(pending.request).__name__} got no response by its deadline (injected)", node_id=pending.node
            )
        else:
            pending.response, pending.error = entry.response, entry.error
        pending.done = True
        self._ready.append(pending)

    def _apply_fail(self, pending: Pending) -> None:
        for rule in self._fail_rules:
            if rule.matches(pending) and pending.response is not None:
                if set_error_codes(pending.response, rule.error_code):
                    rule.times -= 1
                    self.injected["fail"] += 1
                return

    def _apply_corrupt(self, pending: Pending) -> None:
        for rule in self._corrupt_rules:
            if not rule.matches(pending) or pending.response is None:
                continue
            assert rule.mutate is not None
            rule.times -= 1
            self.injected["corrupt"] += 1
            if rule.target == "records":
                for topic in getattr(pending.response, "responses", None) or ():
                    for partition in getattr(topic, "partitions", None) or ():
                        if partition.records:
                            partition.records = rule.mutate(bytes(partition.records))
                return
            self._corrupt_frame(pending, rule.mutate)
            return

    def _corrupt_frame(self, pending: Pending, mutate: Callable[[bytes], bytes]) -> None:
        response = pending.response
        assert response is not None
        version = pending.request.API_VERSION
        body = bytes(mutate(bytes(response.encode())))  # its own version: the request's
        decode = _decoders(type(response)[version]).body
        try:
            decoded, end = decode(memoryview(body), 0)
            if end != len(body):
                raise ValueError(f"parsed {end} of {len(body)} bytes")
        except Exception as exc:  # whatever the decoder trips on, as the real codec reports it
            pending.response = None
            pending.error = ProtocolDecodeError(
                f"cannot decode the answer to {type(pending.request).__name__} v{version} (corrupted): "
                f"{type(exc).__name__}: {exc}",
                node_id=pending.sent_to,
            )
            if pending.sent_to is not None:
                self.inner.disconnect(pending.sent_to)  # a real bad frame closes the connection
            return
        decoded._header = response._header
        pending.response = decoded

"""Rebalance callbacks of a group member, run on the application thread and acknowledged back.

Both group protocols' members (classic: MembershipManager, consumer: ConsumerMembershipManager) ask the
application to run ``on_partitions_revoked``/``assigned``/``lost`` through this: the callback goes out as a
background event, and its acknowledgement comes back as a CallbackAckEvent carrying the request's token.
A late acknowledgement of an abandoned callback has a stale token and is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..events import CallbackAckEvent, CallbackEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..state import SubscriptionState
    from ..structs import TopicPartition

ACK_TRIGGER = {"revoke": "revoke_acked", "assign": "assign_acked", "lost": "lost_acked"}
_METHOD = {"revoke": "on_partitions_revoked", "assign": "on_partitions_assigned", "lost": "on_partitions_lost"}


class RebalanceCallbacks:
    """The callback last asked for (its token and kind), and how to ask for one."""

    def __init__(self, subscription: SubscriptionState, background_events: Any, post: Callable[[Any], object]) -> None:
        self._subs = subscription
        self._bg = background_events
        self._post = post
        self._token = 0  # identifies the callback request last posted
        self.kind: str | None = None  # and what it was (revoke, assign, lost); None once acknowledged

    def ask(self, kind: str, partitions: Iterable[TopicPartition], *, skip_if_empty: bool) -> bool:
        """Post the listener's callback of ``kind``; False when there is none to run (no listener, no such
        method, or nothing to tell): the caller then goes on at once."""
        listener = self._subs.listener
        fn = getattr(listener, _METHOD[kind], None) if listener is not None else None
        if fn is None and kind == "lost" and listener is not None:
            fn = getattr(listener, "on_partitions_revoked", None)  # Java's default for lost
        partitions = set(partitions)
        if fn is None or (skip_if_empty and not partitions):
            return False
        self._token += 1
        token, self.kind = self._token, kind
        post = self._post

        def ack(error: BaseException | None, token: int = token) -> None:
            post(CallbackAckEvent(future=None, token=token, error=error))

        self._bg.put(CallbackEvent(fn, (partitions,), ack))
        return True

    def take(self, event: CallbackAckEvent, awaits: str) -> str | None:
        """The kind of callback ``event`` acknowledges if the member (waiting for ``awaits``, the spec's
        attribute) still waits for it; None for a late acknowledgement (timed out, fenced, or another
        callback asked for since). Each request is acknowledged once."""
        kind = self.kind
        if event.token != self._token or kind is None or awaits != kind:
            return None
        self.kind = None
        return kind

"""Application events of a share consumer: what its application thread asks of the background thread."""

from __future__ import annotations

import attrs

from ..events import ApplicationEvent


@attrs.define(slots=True, eq=False)
class ShareSubscribeEvent(ApplicationEvent):
    """subscribe(): join the share group with these topics (or change them)."""

    topics: tuple[str, ...] = ()


@attrs.define(slots=True, eq=False)
class ShareUnsubscribeEvent(ApplicationEvent):
    """unsubscribe(): leave the share group (its sessions close first, releasing what was not acknowledged)."""

"""A ShareConsumer's settings: the consumer's own keys (connection, security, timing, fetch sizes, history)
plus the few a share group adds, checked once; keys that belong to consumer groups are refused naming what
takes their place (Java's KafkaShareConsumer refuses the same ones).

A share group keeps no positions of its members and assigns on the broker: where to start
(``share.auto.offset.reset``), what a read sees (``share.isolation.level``), how long a record stays
acquired (``share.record.lock.duration.ms``) and how often it may be delivered (``share.delivery.count.limit``)
are the group's settings, set with ``fsm_consumer.share.set_group_config`` or ``fsm-consumer share-group
config GROUP --set KEY=VALUE``, never per member.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._config import ConsumerConfig, _config_error

__all__ = ["REFUSED", "ShareSettings", "share_config"]

_GROUP_SETTING = (
    "the group's setting {name!r} (fsm_consumer.share.set_group_config, or fsm-consumer share-group config GROUP "
    "--set {name}=VALUE)"
)

#: consumer-group keys a share consumer refuses, and what replaces each
REFUSED: dict[str, str] = {
    "auto_offset_reset": _GROUP_SETTING.format(name="share.auto.offset.reset"),
    "isolation_level": _GROUP_SETTING.format(name="share.isolation.level"),
    "enable_auto_commit": "share_acknowledgement_mode ('implicit' accepts what poll() handed out at the next poll)",
    "auto_commit_interval_ms": "share_acknowledgement_mode: acknowledgements go with the next poll() or commit_sync()",
    "default_offset_commit_callback": "ShareConsumer.set_acknowledgement_commit_callback()",
    "partition_assignment_strategy": "nothing: the broker assigns a share group's partitions",
    "group_remote_assignor": "nothing: the broker assigns a share group's partitions (group.share.assignors)",
    "group_protocol": "nothing: a share group has one protocol",
    "group_instance_id": "nothing: a share group has no static members",
    "session_timeout_ms": "the broker's group.share.session.timeout.ms",
    "heartbeat_interval_ms": "the broker's group.share.heartbeat.interval.ms (sent back in every heartbeat)",
    "follower_sync_delay_ms": "nothing: a share group has no SyncGroup",
    "fetch_ahead": "nothing: a share fetch acquires records; one is in flight per broker",
    "enable_incremental_fetch_sessions": "nothing: share fetches always use a share session",
}

_MODES = ("implicit", "explicit")
_ACQUIRE = ("batch_optimized", "record_limit")


@attrs.frozen(kw_only=True)
class ShareSettings:
    """What a share consumer adds to the consumer's settings."""

    # implicit: every record poll() handed out is accepted by the next poll(), commit or close (Java's
    # default); explicit: each record is acknowledged with acknowledge(), and poll() refuses to hand out more
    # while records of the last poll are not
    acknowledgement_mode: str = "implicit"
    # batch_optimized: the broker may hand out whole batches past max_poll_records (fewer requests);
    # record_limit: at most max_poll_records records are acquired at a time (ShareFetch v2)
    acquire_mode: str = "batch_optimized"


def share_config(**kw: Any) -> tuple[ConsumerConfig, ShareSettings]:
    """Check ``kw`` (kafka-python-style keys, plus ``share_acknowledgement_mode`` and ``share_acquire_mode``):
    the consumer's settings and the share consumer's own. A refused key raises ConfigError naming it and what
    replaces it; a share group needs a ``group_id``."""
    given = dict(kw)
    mode = given.pop("share_acknowledgement_mode", "implicit")
    acquire = given.pop("share_acquire_mode", "batch_optimized")
    if mode not in _MODES:
        raise _config_error(
            f"config key 'share_acknowledgement_mode': {mode!r} is not one of {', '.join(map(repr, _MODES))}",
            key="share_acknowledgement_mode",
        )
    if acquire not in _ACQUIRE:
        raise _config_error(
            f"config key 'share_acquire_mode': {acquire!r} is not one of {', '.join(map(repr, _ACQUIRE))}",
            key="share_acquire_mode",
        )
    for key, instead in REFUSED.items():
        if key in given:
            raise _config_error(f"config key {key!r} does not apply to a share consumer: use {instead}", key=key)
    if not given.get("group_id"):
        raise _config_error("a share consumer needs a group_id (the share group it joins)", key="group_id")
    # the group's start and isolation are the broker's; the consumer machinery must never reset or commit
    given.update(enable_auto_commit=False, auto_offset_reset="none")
    config = ConsumerConfig.from_kwargs(**given)
    return config, ShareSettings(acknowledgement_mode=mode, acquire_mode=acquire)

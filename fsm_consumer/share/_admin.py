"""``ShareGroupAdmin``: describe a share group (KIP-932), read and change its settings and its start offsets.

A synchronous client over this library's own transport, so the consumer's connection settings apply as
they are (``security_protocol``, ``ssl_*``, ``sasl_*``, ``client_id``, ``request_timeout_ms``)::

    with ShareGroupAdmin("localhost:9092") as admin:
        admin.set_group_config("orders-share", {"share.auto.offset.reset": "earliest"})
        print(admin.describe_group("orders-share").members)
        for tp, offsets in admin.describe_offsets("orders-share").items():
            print(tp, offsets.start_offset, offsets.lag)

The one-liners ``group_config(bootstrap_servers, group_id)`` and ``set_group_config(bootstrap_servers,
group_id, settings)`` open and close one for a single call.

A broker error becomes kafka-python's typed error (``kafka.errors``: ``GroupIdNotFoundError``,
``NonEmptyGroupError``, ``InvalidConfigurationError``...) saying what failed, the broker's own message and
how to fix it; a broker without share groups (before Kafka 4.2, Tansu) raises ``UnsupportedVersionError``;
no answer within ``timeout_ms`` raises ``fsm_consumer.errors.KafkaTimeoutError`` naming the call.
"""

from __future__ import annotations

import difflib
import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import attrs
import kafka.errors as ke
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from .._config import ConsumerConfig
from ..errors import ConfigError
from ..protocol import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
)
from ..structs import TopicPartition
from ._admin_wire import AdminWire, broker_error

__all__ = [
    "SHARE_GROUP_CONFIG_KEYS",
    "GroupConfigEntry",
    "ShareGroupAdmin",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsets",
    "group_config",
    "set_group_config",
]

#: A share group's own settings in Apache Kafka 4.2 (GroupConfig): each overrides the broker's
#: ``group.share.*`` default for one group. (The delivery count limit is the broker's alone in 4.2.)
SHARE_GROUP_CONFIG_KEYS: tuple[str, ...] = (
    "share.auto.offset.reset",  # where the group starts in a partition: latest (default), earliest, by_duration:P...
    "share.heartbeat.interval.ms",
    "share.isolation.level",  # read_uncommitted (default) or read_committed
    "share.record.lock.duration.ms",  # how long an acquired record stays locked to its member
    "share.session.timeout.ms",
)

_GROUP = 32  # DescribeConfigs/IncrementalAlterConfigs resource type GROUP
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
_EARLIEST, _LATEST = -2, -1  # ListOffsets timestamps
# DescribeConfigs' ConfigSource, by value
_SOURCES = {
    0: "unknown",
    1: "topic",
    2: "dynamic_broker",
    3: "dynamic_default_broker",
    4: "static_broker",
    5: "default",
    6: "dynamic_broker_logger",
    7: "client_metrics",
    8: "group",
}


@attrs.frozen
class ShareMemberDescription:
    """One member of a share group as its coordinator sees it."""

    member_id: str
    client_id: str
    host: str  # the address its connection comes from, as the broker writes it ("/127.0.0.1")
    epoch: int
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]  # sorted


@attrs.frozen
class ShareGroupDescription:
    """A share group: its state (Empty, Stable, Dead...), epochs, the broker's assignor and its members."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]


@attrs.frozen
class SharePartitionOffsets:
    """Where a share group stands in one partition.

    ``start_offset``: the share-partition start offset (records before it are done with for the group);
    None while the broker has written no state for it: no member acknowledged a record there yet (Kafka
    writes the start offset with the first acknowledgement) and no offset was set.
    ``end_offset``: the partition's end (ListOffsets latest, read uncommitted), None if its leader did not say.
    ``lag``: the records from the start offset on that the group is not done with, as the broker counts them
    (DescribeShareGroupOffsets v1, Kafka 4.2: records accepted or rejected past the start offset are not
    counted); from a broker that does not count, ``end_offset - start_offset``; None when unknown.
    """

    topic: str
    partition: int
    start_offset: int | None
    end_offset: int | None
    lag: int | None
    leader_epoch: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@attrs.frozen
class GroupConfigEntry:
    """One group setting as the broker reports it; ``source`` is "group" for the group's own value,
    "default" (or a broker source) when the broker's default applies."""

    name: str
    value: str | None
    source: str
    read_only: bool = False

    @property
    def is_default(self) -> bool:
        return self.source != "group"


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _names(
    call: str,
) -> Callable[[Callable[Concatenate[ShareGroupAdmin, _P], _R]], Callable[Concatenate[ShareGroupAdmin, _P], _R]]:
    """A public method that names itself in a timeout's message: ``call`` formatted with its arguments."""

    def wrap(method: Callable[Concatenate[ShareGroupAdmin, _P], _R]) -> Callable[Concatenate[ShareGroupAdmin, _P], _R]:
        @functools.wraps(method)
        def named(self: ShareGroupAdmin, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            outer = self._wire.call
            if outer is None:
                self._wire.call = call.format(*args, **kwargs)
            try:
                return method(self, *args, **kwargs)
            finally:
                self._wire.call = outer

        return named

    return wrap


class ShareGroupAdmin:
    """A synchronous admin client for share groups (see the module's documentation).

    ``config``: the consumer's keys that concern connections (``security_protocol``, ``ssl_*``, ``sasl_*``,
    ``client_id``, ...); ``timeout_ms`` bounds each call (default: ``default_api_timeout_ms``, 60 s). Use it
    from one thread; close it (or use ``with``) to close its connections.
    """

    def __init__(
        self, bootstrap_servers: str | list[str] = "localhost:9092", *, timeout_ms: float | None = None, **config: Any
    ) -> None:
        settings = ConsumerConfig.from_kwargs(bootstrap_servers=bootstrap_servers, **config)
        self._wire = AdminWire(settings, settings.default_api_timeout_ms if timeout_ms is None else timeout_ms)

    def __enter__(self) -> ShareGroupAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (idempotent)."""
        self._wire.close()

    @property
    def closed(self) -> bool:
        return self._wire.closed

    # -- the group --------------------------------------------------------------------------------
    @_names("ShareGroupAdmin.describe_group({0!r})")
    def describe_group(self, group_id: str) -> ShareGroupDescription:
        """The group's state, epochs, assignor and members with their assignments (ShareGroupDescribe).
        Raises ``GroupIdNotFoundError`` for a group that does not exist or is not a share group."""
        what = f"describing share group {group_id!r}"
        response = self._wire.group_call(
            group_id,
            lambda: ShareGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False),
            what,
            self._wire.deadline(),
            lambda r: r.groups[0].error_code if r.groups else 0,
            min_version=1,
        )
        if not response.groups:
            raise broker_error(69, what, "the coordinator described no group")
        group = response.groups[0]
        if group.error_code:
            raise broker_error(group.error_code, what, group.error_message)
        members = []
        for m in group.members:
            assignment = sorted(
                TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions
            )
            members.append(
                ShareMemberDescription(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    host=m.client_host,
                    epoch=m.member_epoch,
                    rack_id=m.rack_id,
                    subscribed_topics=tuple(m.subscribed_topic_names or ()),
                    assignment=tuple(assignment),
                )
            )
        return ShareGroupDescription(
            group_id=group.group_id,
            state=group.group_state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor=group.assignor_name,
            members=tuple(sorted(members, key=lambda m: m.member_id)),
        )

    # -- offsets ----------------------------------------------------------------------------------
    @_names("ShareGroupAdmin.describe_offsets({0!r})")
    def describe_offsets(self, group_id: str) -> dict[TopicPartition, SharePartitionOffsets]:
        """Per partition, sorted: the group's start offset and lag (DescribeShareGroupOffsets) and the
        partition's end offset (ListOffsets latest, from its leader); see ``SharePartitionOffsets``. The
        partitions are those the group has state in and every partition of the topics its members subscribe
        to."""
        deadline = self._wire.deadline()
        what = f"describing the offsets of share group {group_id!r}"
        G = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
        response = self._wire.group_call(
            group_id,
            lambda: DescribeShareGroupOffsetsRequest(groups=[G(group_id=group_id, topics=None)]),
            what,
            deadline,
            lambda r: r.groups[0].error_code if r.groups else 0,
        )
        starts: dict[TopicPartition, tuple[int | None, int | None, int | None]] = {}  # start, epoch, lag
        for group in response.groups:
            if group.error_code:
                raise broker_error(group.error_code, what, group.error_message)
            for t in group.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.topic_name, p.partition_index)
                    if p.error_code:
                        raise broker_error(p.error_code, f"{what} ({tp.topic}-{tp.partition})", p.error_message)
                    starts[tp] = (_known(p.start_offset), _known(p.leader_epoch), _known(p.lag))
        try:
            subscribed = {t for m in self.describe_group(group_id).members for t in m.subscribed_topics}
        except ke.GroupIdNotFoundError:  # offsets set, nobody joined yet
            subscribed = set()
        topics = sorted(subscribed | {tp.topic for tp in starts})
        leaders = self._wire.leaders(topics, deadline)
        for tp in leaders:
            starts.setdefault(tp, (None, None, None))
        ends = self._wire.list_offsets(leaders, {tp: _LATEST for tp in starts}, deadline, what)
        out = {}
        for tp in sorted(starts):
            start, epoch, lag = starts[tp]
            end = ends.get(tp)
            if lag is None and start is not None and end is not None:
                lag = max(0, end - start)
            out[tp] = SharePartitionOffsets(tp.topic, tp.partition, start, end, lag, epoch)
        return out

    @_names("ShareGroupAdmin.alter_offsets({0!r})")
    def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set the group's start offset in each partition (AlterShareGroupOffsets): the group must be
        empty (``NonEmptyGroupError`` otherwise). Records before the new start are not delivered again to
        the group; records after it are delivered again, even those acknowledged already."""
        for tp, offset in offsets.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ValueError(f"the start offset of {tp.topic}-{tp.partition} must be an int >= 0, not {offset!r}")
        if not offsets:
            return
        what = f"altering the offsets of share group {group_id!r}"
        by_topic: dict[str, list[Any]] = defaultdict(list)
        T = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
        for tp, offset in sorted(offsets.items()):
            by_topic[tp.topic].append(
                T.AlterShareGroupOffsetsRequestPartition(partition_index=tp.partition, start_offset=offset)
            )
        response = self._wire.group_call(
            group_id,
            lambda: AlterShareGroupOffsetsRequest(
                group_id=group_id, topics=[T(topic_name=t, partitions=ps) for t, ps in by_topic.items()]
            ),
            what,
            self._wire.deadline(),
            lambda r: r.error_code,
        )
        if response.error_code:
            raise broker_error(response.error_code, what, response.error_message)
        for t in response.responses:
            for p in t.partitions:
                if p.error_code:
                    raise broker_error(p.error_code, f"{what} ({t.topic_name}-{p.partition_index})", p.error_message)

    @_names("ShareGroupAdmin.reset_offsets({0!r}, {1!r})")
    def reset_offsets(
        self, group_id: str, topic: str, to: Literal["earliest", "latest"] | int
    ) -> dict[TopicPartition, int]:
        """Set the group's start offset in every partition of ``topic`` to its earliest or latest offset, or
        to one offset; returns what was set. The group must be empty, as for ``alter_offsets``."""
        deadline = self._wire.deadline()
        leaders = self._wire.leaders([topic], deadline)
        if not leaders:
            raise broker_error(3, f"resetting the offsets of share group {group_id!r} in topic {topic!r}")
        if isinstance(to, int) and not isinstance(to, bool):
            offsets = dict.fromkeys(leaders, to)
        elif to in ("earliest", "latest"):
            offsets = self._wire.offsets_at(
                leaders, _EARLIEST if to == "earliest" else _LATEST, f"finding the {to} offsets"
            )
        else:
            raise ValueError(f"reset to 'earliest', 'latest' or an offset (an int), not {to!r}")
        self.alter_offsets(group_id, offsets)
        return dict(sorted(offsets.items()))

    @_names("ShareGroupAdmin.delete_offsets({0!r})")
    def delete_offsets(self, group_id: str, topics: Iterable[str]) -> None:
        """Forget the group's state in whole topics (DeleteShareGroupOffsets): its next member starts there
        afresh, at ``share.auto.offset.reset``. The group must be empty (``NonEmptyGroupError`` otherwise)."""
        names = sorted(set([topics] if isinstance(topics, str) else topics))
        if not names:
            return
        what = f"deleting the offsets of share group {group_id!r}"
        T = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
        response = self._wire.group_call(
            group_id,
            lambda: DeleteShareGroupOffsetsRequest(group_id=group_id, topics=[T(topic_name=t) for t in names]),
            what,
            self._wire.deadline(),
            lambda r: r.error_code,
        )
        if response.error_code:
            raise broker_error(response.error_code, what, response.error_message)
        for t in response.responses:
            if t.error_code:
                raise broker_error(t.error_code, f"{what} in topic {t.topic_name!r}", t.error_message)

    @_names("ShareGroupAdmin.beginning_offsets")
    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's earliest offset (ListOffsets to its leader)."""
        return self._wire.offsets_at(partitions, _EARLIEST, "finding the earliest offsets")

    @_names("ShareGroupAdmin.end_offsets")
    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end offset (ListOffsets latest, read uncommitted, to its leader)."""
        return self._wire.offsets_at(partitions, _LATEST, "finding the end offsets")

    # -- settings ---------------------------------------------------------------------------------
    @_names("ShareGroupAdmin.group_config_entries({0!r})")
    def group_config_entries(self, group_id: str) -> list[GroupConfigEntry]:
        """The group's share settings as the broker reports them, its defaults included (DescribeConfigs
        on the GROUP resource), sorted by name."""
        what = f"describing the settings of share group {group_id!r}"
        R = DescribeConfigsRequest.DescribeConfigsResource
        response = self._wire.roundtrip(
            lambda: DescribeConfigsRequest(
                resources=[R(resource_type=_GROUP, resource_name=group_id, configuration_keys=None)],
                include_synonyms=False,
                include_documentation=False,
            ),
            None,
            what,
            self._wire.deadline(),
            min_version=1,
        )
        entries = []
        for result in response.results:
            if result.error_code:
                raise broker_error(result.error_code, what, result.error_message)
            for c in result.configs:
                if c.name.startswith("share."):
                    source = _SOURCES.get(c.config_source, str(c.config_source))
                    entries.append(GroupConfigEntry(c.name, c.value, source, bool(c.read_only)))
        return sorted(entries, key=lambda e: e.name)

    @_names("ShareGroupAdmin.group_config({0!r})")
    def group_config(self, group_id: str) -> dict[str, str | None]:
        """The group's share settings (``share.*``), with the broker's defaults for those it does not set."""
        return {e.name: e.value for e in self.group_config_entries(group_id)}

    @_names("ShareGroupAdmin.set_group_config({0!r})")
    def set_group_config(self, group_id: str, settings: Mapping[str, str | int | bool | None]) -> None:
        """Set the group's own share settings (IncrementalAlterConfigs); None for a value removes the group's
        own, so the broker's default applies again. A group need not exist yet: set
        ``share.auto.offset.reset`` before its first member joins. A key that is not a share group setting
        raises ``fsm_consumer.errors.ConfigError`` naming it; a value the broker refuses,
        ``InvalidConfigurationError`` with the broker's reason."""
        if not settings:
            return
        known = set(SHARE_GROUP_CONFIG_KEYS)
        unknown = [k for k in settings if k not in known]
        for key in unknown:  # not even share.*, or a misspelling of one: no need to ask the broker
            if not key.startswith("share.") or difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8):
                raise _unknown_key(key, known)
        if unknown:  # a newer broker may have more: those it reports for the group are fine
            offered = {e.name for e in self.group_config_entries(group_id)}
            for key in unknown:
                if key not in offered:
                    raise _unknown_key(key, known | offered)
        what = f"setting {', '.join(sorted(settings))} of share group {group_id!r}"
        R = IncrementalAlterConfigsRequest.AlterConfigsResource
        configs = [
            R.AlterableConfig(
                name=key,
                config_operation=_DELETE if value is None else _SET,
                value=None if value is None else _config_text(value),
            )
            for key, value in sorted(settings.items())
        ]
        response = self._wire.roundtrip(
            lambda: IncrementalAlterConfigsRequest(
                resources=[R(resource_type=_GROUP, resource_name=group_id, configs=configs)], validate_only=False
            ),
            None,
            what,
            self._wire.deadline(),
        )
        for result in response.responses:
            if result.error_code:
                raise broker_error(result.error_code, what, result.error_message)


def _known(value: int) -> int | None:
    """Kafka's -1 (unknown, none) as None."""
    return value if value >= 0 else None


def _config_text(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _unknown_key(key: str, known: set[str]) -> ConfigError:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"{key!r} is not a share group setting{hint} (the share group settings: {', '.join(sorted(known))})",
        key=key,
    )


def group_config(bootstrap_servers: str | list[str], group_id: str, **config: Any) -> dict[str, str | None]:
    """``ShareGroupAdmin(bootstrap_servers, **config).group_config(group_id)``, closed after."""
    with ShareGroupAdmin(bootstrap_servers, **config) as admin:
        return admin.group_config(group_id)


def set_group_config(
    bootstrap_servers: str | list[str], group_id: str, settings: Mapping[str, str | int | bool | None], **config: Any
) -> None:
    """``ShareGroupAdmin(bootstrap_servers, **config).set_group_config(group_id, settings)``, closed after."""
    with ShareGroupAdmin(bootstrap_servers, **config) as admin:
        admin.set_group_config(group_id, settings)

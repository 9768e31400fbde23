"""The consumer's lookups that ask the brokers and change nothing: offsets by time or at either end of a
partition, topics and their partitions. Each is one event to the background thread, waited for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kafka.structs import OffsetAndTimestamp

from ..events import ListOffsetsEvent, TopicMetadataEvent
from ..fetch import TopicPartition
from ._arguments import checked_timestamps
from ._arguments import topic_partition as _tp

if TYPE_CHECKING:
    from .._config import ConsumerConfig
    from ..events import ApplicationEvent

_EARLIEST, _LATEST = -2, -1


class Lookups:
    """Consumer's lookups (a mixin: Consumer gives ``config`` and ``_call``)."""

    if TYPE_CHECKING:
        config: ConsumerConfig

        def _call(
            self, event: ApplicationEvent, timeout_ms: float | None, what: str, default_ms: float | None = None
        ) -> Any: ...

    # -- offsets lookups ---------------------------------------------------------------------------------
    def _list_offsets(
        self, timestamps: dict[TopicPartition, int], timeout_ms: float | None, what: str
    ) -> dict[TopicPartition, tuple[int, int, int] | None]:
        """partition -> (offset, timestamp, leader_epoch), None where no offset matches (ListOffsetsEvent)."""
        if not timestamps:
            return {}
        what = f"{what} for {', '.join(f'{tp.topic}-{tp.partition}' for tp in sorted(timestamps))}"
        # kafka-python waits request_timeout_ms for these when no timeout is given
        found: dict[TopicPartition, tuple[int, int, int] | None] = self._call(
            ListOffsetsEvent(timestamps=timestamps), timeout_ms, what, default_ms=self.config.request_timeout_ms
        )
        return found

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        found = self._list_offsets({_tp(p): _EARLIEST for p in partitions}, timeout_ms, "beginning_offsets")
        return {tp: v[0] for tp, v in found.items() if v is not None}

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
    ) -> dict[TopicPartition, int]:
        """The offset after the last record. Tansu 0.6 answers the last batch's base offset + 1 (short
        of a multi-record batch's end): the end is read from that batch's header (managers/_log_end)."""
        found = self._list_offsets({_tp(p): _LATEST for p in partitions}, timeout_ms, "end_offsets")
        return {tp: v[0] for tp, v in found.items() if v is not None}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        found = self._list_offsets(checked_timestamps(timestamps), timeout_ms, "offsets_for_times")
        return {tp: (None if v is None else OffsetAndTimestamp(*v)) for tp, v in found.items()}

    # -- metadata ------------------------------------------------------------------------------------------
    def topics(self, timeout_ms: float | None = None) -> set[str]:
        return set(self._call(TopicMetadataEvent(topics=None), timeout_ms, "topics()"))

    def partitions_for_topic(self, topic: str, timeout_ms: float | None = None) -> set[int]:
        """The partition ids of ``topic``, an empty set if it does not exist (kafka-python 3.0); never
        creates it."""
        found = self._call(
            TopicMetadataEvent(topics=frozenset([topic])), timeout_ms, f"partitions_for_topic({topic!r})"
        )
        return set(found.get(topic, ()))

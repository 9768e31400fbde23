"""Offsets read from batch headers: the log end (``batch_end``) and where a fetch's whole batches end
(``fetched_end``, where the next Fetch of a partition fetched ahead starts).

Tansu 0.6 answers ListOffsets ``latest`` with the last batch's base offset + 1, short of the log end
when that batch holds several records: seek_to_end() and end_offsets() would be wrong for the user
(kafka-python's own test of seek_to_end fails on it). So after a ``latest`` answer X > 0 one Fetch at
X - 1 reads the batch holding that offset, and its header says where the batch ends: the end is
max(X, base offset + last offset delta + 1). Against Apache Kafka X is already the end and the probe
confirms it, for one round trip per reset or lookup (never per record).
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.consumer import FetchRequest

from ..structs import TopicPartition

_BASE_AND_LENGTH = struct.Struct(">qi")
_MAGIC_AT = 16
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # v2: base offset 8, length 4, leader epoch 4, magic 1, crc 4, attributes 2
_LOG_OVERHEAD = 12

_batches_end: Any
try:  # fetch/_cwalk.c: _ends(whole=True)'s walk in one call (data in small batches: hundreds per answer)
    from ..fetch._cwalk import batches_end as _batches_end
except ImportError:  # installed without a C compiler
    _batches_end = None


def probe_request(tp: TopicPartition, offset: int, isolation_level: int) -> FetchRequest:
    """A Fetch of the batch holding ``offset`` (brokers return at least one whole batch). The record
    at ``offset`` exists, so min_bytes=1 is met at once; Tansu answers max_wait_ms=0 with nothing."""
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            FetchRequest.FetchTopic(
                topic=tp.topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=tp.partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1,
                    )
                ],
            )
        ],
    )


def _ends(records, *, whole: bool):
    """The offset after the last record of each batch in ``records``, from its header; with ``whole`` only
    batches wholly inside ``records`` (a Fetch answer cut at the fetch size), else any whose header is."""
    view = memoryview(records or b"")
    pos, size = 0, len(view)
    while pos + _MAGIC_AT < size:
        base, length = _BASE_AND_LENGTH.unpack_from(view, pos)
        after = pos + _LOG_OVERHEAD + length
        if length <= 0 or (whole and after > size):
            return  # cut at the fetch size (fetched again), or bad data (the decoder says what)
        if view[pos + _MAGIC_AT] >= 2:
            if pos + _LAST_DELTA_AT + 4 > size or length < _LAST_DELTA_AT + 4 - _LOG_OVERHEAD:
                return
            yield base + _LAST_DELTA.unpack_from(view, pos + _LAST_DELTA_AT)[0] + 1
        else:  # a legacy message (set): its offset is the last one it holds
            yield base + 1
        pos = after


def batch_end(records, reported: int) -> int:
    """The offset after the last record of the batches in ``records``, at least ``reported``."""
    return max([reported, *_ends(records, whole=False)])


def fetched_end(records, fetch_offset: int) -> int:
    """The offset after the last whole batch of a Fetch answer's ``records`` (what decoding them reaches,
    never below ``fetch_offset``); -1 without a whole batch (a batch larger than the fetch, or bad data).
    Headers only, no record: the background thread reads it per partition answer."""
    end = NotImplemented if _batches_end is None or records is None else _batches_end(records)
    if end is NotImplemented:
        end = max(_ends(records, whole=True), default=-1)
    return max(end, fetch_offset) if end >= 0 else -1


def log_end(response, tp: TopicPartition, reported: int) -> int:
    """The log end of ``tp`` from a probe's answer (``reported`` when it says nothing better)."""
    for topic in response.responses:
        if topic.topic != tp.topic:
            continue
        for p in topic.partitions:
            if p.partition_index == tp.partition and p.error_code == 0:
                return batch_end(p.records, reported)
    return reported

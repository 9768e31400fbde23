"""The fetch collector (seed 000's FetchHandler), on the application thread.

Takes completed fetches from the buffer, decodes each one whole, and hands out up to
``max_poll_records`` per poll, advancing positions as it goes. Data fetched under an older
partition epoch (the partition was unassigned, sought, reset or paused since) is dropped.
A decoding fault is raised for its partition only: records before it are returned first, the
error comes from the next poll (and again for as long as the partition is read from that offset).
"""

from __future__ import annotations

from collections.abc import Callable

from ._buffer import CompletedFetch, FetchBuffer
from ._decode import decode_partition
from ._records import TopicPartition


class _Draining:
    __slots__ = ("fetch", "records", "index", "next_offset", "error", "leader_epoch")

    def __init__(self, fetch: CompletedFetch, decoded) -> None:
        self.fetch = fetch
        self.records = decoded.records
        self.index = 0
        self.next_offset = decoded.next_offset
        self.error = decoded.error
        self.leader_epoch = decoded.leader_epoch


class FetchCollector:
    def __init__(self, config, subscription, buffer: FetchBuffer, wake_background: Callable[[], None],
                 metrics) -> None:
        self._subs = subscription
        self._buffer = buffer
        self._wake = wake_background
        self._metrics = metrics
        self._isolation = config.isolation_level
        self._check_crcs = config.check_crcs
        self._key_des = config.key_deserializer
        self._value_des = config.value_deserializer
        self._current: _Draining | None = None
        self._error: Exception | None = None

    def has_data(self) -> bool:
        return self._current is not None or len(self._buffer) > 0 or self._error is not None

    def collect(self, max_records: int) -> dict[TopicPartition, list]:
        """Up to ``max_records`` records by partition; raises a pending decoding error first."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        out: dict[TopicPartition, list] = {}
        taken = 0
        released = False
        subs = self._subs
        while taken < max_records:
            cur = self._current
            if cur is None:
                fetch = self._buffer.pop()
                if fetch is None:
                    break
                cur = self._start(fetch)
                if cur is None:
                    self._buffer.done(fetch)
                    released = True
                    continue
                self._current = cur
            fetch = cur.fetch
            tp = fetch.tp
            state = subs._parts.get(tp)  # one dict lookup: the lock is taken by advance() below
            if state is None or state.epoch != fetch.epoch:
                self._finish()  # unassigned, sought or paused meanwhile: drop
                released = True
                continue
            records = cur.records
            if cur.index < len(records):
                end = min(len(records), cur.index + (max_records - taken))
                chunk = records[cur.index:end]
                if tp in out:
                    out[tp].extend(chunk)
                else:
                    out[tp] = chunk  # a fresh slice: safe to hand out as is
                taken += end - cur.index
                cur.index = end
                if end < len(records):
                    subs.advance(tp, fetch.epoch, chunk[-1].offset + 1, cur.leader_epoch)
                    continue
            # this partition's fetch is used up: the next one starts at next_offset
            subs.advance(tp, fetch.epoch, cur.next_offset, cur.leader_epoch)
            subs.release_fetch(tp, fetch.epoch, to_back=True)
            released = True
            self._finish()
            if cur.error is not None:
                if out:
                    self._error = cur.error  # hand out what was good now, the error next time
                    break
                self._wake()
                raise cur.error
        if released:
            self._wake()
        if taken:
            self._metrics.records_consumed(taken, out)
        return out

    def _start(self, fetch: CompletedFetch) -> _Draining | None:
        state = self._subs._parts.get(fetch.tp)
        if state is None or state.epoch != fetch.epoch or state.position != fetch.fetch_offset:
            self._subs.release_fetch(fetch.tp, fetch.epoch)
            return None
        decoded = decode_partition(
            fetch.tp.topic, fetch.tp.partition, fetch.records, fetch_offset=fetch.fetch_offset,
            isolation_level=self._isolation, aborted_transactions=fetch.aborted_transactions,
            check_crcs=self._check_crcs, key_deserializer=self._key_des, value_deserializer=self._value_des)
        self._metrics.bytes_consumed(fetch.size)
        # the records now hold copies of keys and values: drop the raw bytes instead of keeping
        # a second copy of the partition's data alive until it is drained
        fetch.records = None
        return _Draining(fetch, decoded)

    def _finish(self) -> None:
        """The fetch being drained is used up or dropped: its bytes leave the buffer's count."""
        cur, self._current = self._current, None
        if cur is not None:
            self._buffer.done(cur.fetch)

    def drop_partitions(self, keep: Callable[[TopicPartition], bool]) -> None:
        """Forget buffered data of partitions ``keep`` rejects (revoked, unassigned)."""
        if self._current is not None and not keep(self._current.fetch.tp):
            self._finish()
        self._buffer.drop(lambda f: keep(f.tp))

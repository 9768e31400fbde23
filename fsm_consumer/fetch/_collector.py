"""The fetch collector (seed 000's FetchHandler), on the application thread.

Takes completed fetches from the buffer, decodes each one whole, and hands out up to
``max_poll_records`` per poll, advancing positions as it goes: as records (``collect``, for
``poll()``) or as Arrow columns (``collect_batch``, for ``poll_batch()``; see ``_columns``), with the
same bookkeeping (``_drain``); a fetch handed out partly in one form goes on in the other.

Every hand-out goes through ``SubscriptionState.take``, which checks the partition and moves its
position in one step under the subscription's lock: records reach the caller only if their partition
is still assigned under the epoch they were fetched with (not unassigned, revoked, sought, reset or
paused since), its position is where they start, and the member's lease holds. Data that fails this
is dropped and counted (``stale_fetches``, ``stale_records``); past the lease nothing is handed out and
the data is kept. The iterator (records lent by ``collect(advance=False)``) takes each record with
``take_record``.
A decoding fault is raised for its partition only: records before it are returned first, the
error comes from the next poll (and again for as long as the partition is read from that offset); a
failing deserializer's exception is raised as it is (kafka-python's behaviour), not wrapped.
"""

from __future__ import annotations

import bisect
import logging
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._gc_pause import gc_paused
from ..state._subscription import Take
from ..structs import TopicPartition
from ._buffer import CompletedFetch, FetchBuffer
from ._decode import decode_partition
from ._errors import DeserializationError

if TYPE_CHECKING:
    from .._history_writer import HistoryWriter

_OFFSET = operator.attrgetter("offset")
log = logging.getLogger("fsm_consumer.fetch")


class _Draining:
    """A fetch being handed out: its records (``poll``) or its columns (``poll_batch``), and how far.

    ``pos`` is where the partition's position stands once everything handed out so far is consumed;
    ``base`` the offset its ``data`` starts at (the fetch offset, or where a conversion began)."""

    __slots__ = ("fetch", "data", "columnar", "size", "index", "next_offset", "error", "leader_epoch", "pos", "base")

    def __init__(self, fetch: CompletedFetch, decoded, columnar: bool) -> None:
        self.fetch = fetch
        self.columnar = columnar
        self.data = decoded.columns if columnar else decoded.records
        self.size = self.data.num_rows if columnar else len(self.data)
        self.index = 0
        self.next_offset = decoded.next_offset
        self.error = decoded.error
        self.leader_epoch = decoded.leader_epoch
        self.pos = self.base = fetch.fetch_offset

    def take(self, start: int, end: int):
        """Records or columns ``start:end``: a fresh list, or a zero-copy slice."""
        return self.data.slice(start, end - start) if self.columnar else self.data[start:end]

    def offset_at(self, i: int) -> int:
        return self.data.offset_at(i) if self.columnar else self.data[i].offset

    def index_of(self, offset: int) -> int:
        """Index of the first record at or after ``offset``."""
        if self.columnar:
            return self.data.index_of(offset)
        return bisect.bisect_left(self.data, offset, key=_OFFSET)


class FetchCollector:
    def __init__(
        self,
        config,
        subscription,
        buffer: FetchBuffer,
        wake_background: Callable[[], None],
        metrics,
        clock=None,
        history: HistoryWriter | None = None,
    ) -> None:
        self._subs = subscription
        self._history = history  # history_path: a "read" line per hand-out, a "skip" per position moved past
        self.call_started = 0.0  # when the poll() or next() handing out began (set only for a history)
        self._clock = clock
        self._buffer = buffer
        self._wake = wake_background
        self._metrics = metrics
        self._isolation = config.isolation_level
        self._check_crcs = config.check_crcs
        # a compressed batch decompresses to at most the largest answer the consumer accepts
        self._max_batch_bytes = config.receive_buffer_max
        self._key_des = config.key_deserializer
        self._value_des = config.value_deserializer
        self._typed = hasattr(self._key_des, "to_arrow") or hasattr(self._value_des, "to_arrow")
        self._current: _Draining | None = None
        self._error: Exception | None = None
        # what collect(advance=False) lent last, for take_record: [tp, epoch, next position, records left]
        self._lent: list | None = None
        # dropped because their partition changed after they were fetched (application thread only)
        self.stale_fetches = 0  # fetches, or what was left of them
        self.stale_records = 0  # decoded records among them never handed out

    def _now(self) -> float | None:
        return self._clock.now_ms() if self._clock is not None else None

    def _note_read(
        self,
        tp: TopicPartition,
        cur: _Draining,
        lo: int,
        hi: int,
        start: int,
        end: int,
        now: float | None,
        max_records: int,
    ) -> None:
        """A "read" line of records ``lo:hi`` of the fetch being handed out; its time is ``now``, the one the
        hand-out checked the member's lease at. Offsets inside the range that hold no record for the user
        (transaction markers, aborted or compacted records) are named as ``gaps``, so the line says exactly
        which offsets were handed out. ``end == start``: handed out without moving the position."""
        assert self._history is not None
        first, last, count = cur.offset_at(lo), cur.offset_at(hi - 1), hi - lo
        fields: dict[str, Any] = {"from": start, "to": end}  # "from" is a keyword: no keyword argument
        if count != last - first + 1:
            fields["gaps"] = _gaps(cur, lo, hi)
        self._history.write(
            "read",
            t=now,
            tp=[tp.topic, tp.partition],
            offsets=[first, last],
            count=count,
            t_poll_start=self.call_started,
            max_records=max_records,
            **fields,
        )

    def has_data(self) -> bool:
        return self._current is not None or len(self._buffer) > 0 or self._error is not None

    def collect(self, max_records: int, *, advance: bool = True, lend: bool = False) -> dict[TopicPartition, list]:
        """Up to ``max_records`` records by partition; raises a pending decoding error first.

        ``advance=False`` (kafka-python's ``poll(update_offsets=False)``, and the iterator): the
        records of one fetch at most, checked like any hand-out but positions left where they are
        for the caller to move (the iterator: ``take_record``); a later call goes back to the
        position if the caller did not move it past them. ``lend``: only lent to the iterator, which
        hands each record out itself (its history line is ``take_record``'s)."""
        out: dict[TopicPartition, list] = {}
        taken = self._drain(max_records, False, out, advance, lend)
        if taken:
            self._metrics.records_consumed(taken, out)
        return out

    def collect_batch(self, max_records: int):
        """Up to ``max_records`` records as one pyarrow RecordBatch (``_columns.SCHEMA``), partition
        slices in the order they were handed out; raises a pending decoding error first.

        Keys and values are the raw bytes: configured deserializers do not apply.
        """
        from . import _columns  # pyarrow: only when columns are asked for

        out: dict[TopicPartition, list] = {}
        taken = self._drain(max_records, True, out, True, False)
        if taken:
            self._metrics.records_consumed(taken, out)
        return _columns.assemble([(tp, piece) for tp, pieces in out.items() for piece in pieces])

    def epoch_of(self, tp: TopicPartition) -> int | None:
        """The partition epoch of the fetch being handed out, for a caller that advances itself."""
        cur = self._current
        return cur.fetch.epoch if cur is not None and cur.fetch.tp == tp else None

    def take_record(self, tp: TopicPartition, record) -> bool:
        """The iterator hands out ``record``, one of those the last ``collect(advance=False)`` lent,
        in order: the position moves past it atomically (``SubscriptionState.take``). False: do not
        hand it out (nor the rest of what was lent); stale records are counted, and the next collect
        goes on from the position."""
        lent = self._lent
        if lent is None or lent[0] != tp:
            return False  # collected again since, or not lent at all
        _, epoch, start, left = lent
        now = self._now()
        outcome = self._subs.take(tp, epoch, start, record.offset + 1, record.leader_epoch, now)
        if outcome:
            lent[2], lent[3] = record.offset + 1, left - 1
            if self._history is not None:
                assert self._current is not None  # what was lent is the fetch being handed out
                i = self._current.index_of(record.offset)
                self._note_read(tp, self._current, i, i + 1, start, record.offset + 1, now, 1)
            return True
        self._lent = None
        if outcome is Take.STALE:
            self.stale_records += left
            log.debug("%s: %d lent records not handed out: the partition changed", tp, left)
        self._wake()
        return False

    def settle(self) -> None:
        """A caller that moves positions itself reached the end of what it was handed: finish the fetch
        now (position to its end, fetch released) so the next one is fetched meanwhile."""
        if self._current is not None and not self._settle():
            self._wake()

    def _drain(self, max_records: int, columnar: bool, out: dict, advance: bool, lend: bool) -> int:
        """Hand out up to ``max_records`` into ``out`` (records: a list per partition; columns: a
        list of slices per partition), advancing positions unless ``advance`` is False; the
        bookkeeping of collect and collect_batch. Returns how many were taken."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        taken = 0
        released = expired = False
        subs = self._subs
        self._lent = None  # what was lent before is superseded by this call
        if subs.lease_expired(self._now()):
            # the member's session ran out (frozen, cut off): the group may have given these partitions
            # to another member; nothing is handed out until the background thread has settled it
            self._wake()
            return 0
        while taken < max_records:
            if self._current is None:
                fetch = self._buffer.pop()
                if fetch is None:
                    break
                cur = self._start(fetch, columnar)
                if cur is None:
                    self._buffer.done(fetch)
                    released = True
                    continue
                self._current = cur
            if not self._settle():
                released = True
                if self._error is not None:
                    if out:
                        break  # hand out what was good now, the error next time
                    error, self._error = self._error, None
                    self._wake()
                    raise error
                continue
            cur = self._current
            fetch = cur.fetch
            tp = fetch.tp
            if cur.columnar != columnar:
                self._convert(cur)  # poll() and poll_batch() mixed within one fetch
                continue  # settled again: what is left may be nothing (control records only)
            if columnar and self._typed and out and not _same_types(out, cur.data):
                break  # typed by another schema (another topic's): a RecordBatch has one type per column
            end = min(cur.size, cur.index + (max_records - taken))
            pos = cur.offset_at(end - 1) + 1
            # the check and the position move are one step under the subscription's lock: if the
            # partition changed since it was fetched (revoked, sought, reassigned) none of these
            # records are handed out; without ``advance`` the same check, the position left as it is
            now = self._now()  # decoding took time: the lease is checked as of now
            outcome = subs.take(tp, fetch.epoch, cur.pos, pos if advance else None, cur.leader_epoch, now)
            if outcome is Take.EXPIRED:
                expired = True
                break
            if not outcome:
                self._drop_stale()
                released = True
                continue
            if not advance:
                self._lent = [tp, fetch.epoch, cur.pos, end - cur.index]
            if self._history is not None and not lend:  # every hand-out has its line, moved or not
                self._note_read(tp, cur, cur.index, end, cur.pos, pos if advance else cur.pos, now, max_records)
            chunk = cur.take(cur.index, end)
            if columnar:
                out.setdefault(tp, []).append(chunk)
            elif tp in out:
                out[tp].extend(chunk)
            else:
                out[tp] = chunk  # a fresh slice: safe to hand out as is
            taken += end - cur.index
            cur.index, cur.pos = end, pos
            if not advance:
                break  # one fetch at most: the caller moves its position
        cur = self._current
        if advance and not expired and cur is not None and cur.index == cur.size and not self._settle():
            released = True  # used up by the last chunk: fetched again now, a fault raised next time
        if released or expired:
            self._wake()
        return taken

    def _settle(self) -> bool:
        """Bring the fetch being handed out in line with its partition; True if it has records left.

        Dropped when the partition changed (unassigned, sought, reset, paused); moved back to the
        position when records were handed out without the position following them (an abandoned
        iterator, poll(update_offsets=False)); finished when used up: the position goes to the
        fetch's end (past trailing control records), the fetch is released, and a fault found at
        its end becomes the pending error."""
        cur = self._current
        assert cur is not None  # called only while a fetch is being handed out
        fetch = cur.fetch
        subs = self._subs
        position = subs.position_at(fetch.tp, fetch.epoch)  # unlocked: take() checks again
        if position is None:
            self._drop_stale()
            return False
        if position != cur.pos:
            if position < cur.base:
                subs.release_fetch(fetch.tp, fetch.epoch)
                self._finish()  # before what is held: fetched again from the position
                return False
            cur.index, cur.pos = cur.index_of(position), position
        if cur.index < cur.size:
            return True
        # past what follows the last record (control records, aborted data): no record handed out,
        # so no lease needed; the position must still be where the last one left it
        if not subs.take(fetch.tp, fetch.epoch, cur.pos, cur.next_offset, cur.leader_epoch):
            self._drop_stale()
            return False
        if self._history is not None and cur.next_offset != cur.pos:
            self._history.write(
                "skip", tp=[fetch.tp.topic, fetch.tp.partition], **{"from": cur.pos, "to": cur.next_offset}
            )
        subs.release_fetch(fetch.tp, fetch.epoch, to_back=True)
        self._finish()
        error = cur.error
        if error is not None:
            # a deserializer's own exception is raised as itself, as kafka-python does (it carries a
            # note saying where); the position stays at its record either way
            self._error = error.__cause__ if isinstance(error, DeserializationError) else error
        return False

    def _start(self, fetch: CompletedFetch, columnar: bool) -> _Draining | None:
        if self._subs.position_at(fetch.tp, fetch.epoch) != fetch.fetch_offset:
            # stale before decoding (unlocked check; take() decides for what is decoded)
            self._subs.release_fetch(fetch.tp, fetch.epoch)
            self.stale_fetches += 1
            log.debug("%s: fetch at %d dropped: the partition changed", fetch.tp, fetch.fetch_offset)
            return None
        decoded = self._decode(fetch, fetch.fetch_offset, columnar)
        self._metrics.bytes_consumed(fetch.size)
        if not columnar and not self._typed:
            # the records now hold copies of keys and values: drop the raw bytes instead of keeping
            # a second copy of the partition's data alive until it is drained. Columns keep them
            # (no larger than the fetch) in case poll() takes over in the middle: see _convert; so do
            # records whose values a schema deserializer made, which columns cannot be made of again.
            fetch.records = None
        return _Draining(fetch, decoded, columnar)

    def _decode(self, fetch: CompletedFetch, fetch_offset: int, columnar: bool):
        tp = fetch.tp
        if columnar:
            from ._columns import decode_partition_columns

            decoded = decode_partition_columns(
                tp.topic,
                tp.partition,
                fetch.records,
                fetch_offset=fetch_offset,
                isolation_level=self._isolation,
                aborted_transactions=fetch.aborted_transactions,
                check_crcs=self._check_crcs,
                max_batch_bytes=self._max_batch_bytes,
            )
            if self._key_des is None and self._value_des is None:
                return decoded
            from ._typed import type_columns

            return type_columns(decoded, tp.topic, tp.partition, self._key_des, self._value_des)
        # collection postponed to the end of this one decode: 1.4-1.8x faster decoding here
        with gc_paused():
            return decode_partition(
                tp.topic,
                tp.partition,
                fetch.records,
                fetch_offset=fetch_offset,
                isolation_level=self._isolation,
                aborted_transactions=fetch.aborted_transactions,
                check_crcs=self._check_crcs,
                key_deserializer=self._key_des,
                value_deserializer=self._value_des,
                max_batch_bytes=self._max_batch_bytes,
            )

    def _convert(self, cur: _Draining) -> None:
        """Switch a partly handed out fetch to the other form; the rest of it stays as it was."""
        if cur.columnar:
            # poll() after poll_batch(): decode the kept raw data again from the next record on,
            # so deserializers, checksums and sizes are exactly what poll() always gives
            decoded = self._decode(cur.fetch, cur.offset_at(cur.index), False)
            cur.fetch.records = None
            cur.data, cur.columnar = decoded.records, False
            cur.next_offset, cur.error, cur.leader_epoch = decoded.next_offset, decoded.error, decoded.leader_epoch
        elif cur.fetch.records is not None:  # typed columns: made again from the raw data, as poll()'s records are
            decoded = self._decode(cur.fetch, cur.offset_at(cur.index), True)
            cur.data, cur.columnar = decoded.columns, True
            cur.next_offset, cur.error, cur.leader_epoch = decoded.next_offset, decoded.error, decoded.leader_epoch
        else:
            from ._columns import from_records

            cur.data, cur.columnar = from_records(cur.data[cur.index :]), True
        cur.size = len(cur.data) if not cur.columnar else cur.data.num_rows
        cur.index, cur.base = 0, cur.pos

    def _drop_stale(self) -> None:
        """The fetch being drained belongs to a partition that changed: dropped, counted, fetched again
        (its in-flight mark goes, if the epoch is still the one it was fetched under)."""
        cur = self._current
        assert cur is not None  # called only while a fetch is being handed out
        fetch = cur.fetch
        self.stale_fetches += 1
        self.stale_records += cur.size - cur.index
        log.debug("%s: %d fetched records dropped: the partition changed", fetch.tp, cur.size - cur.index)
        self._subs.release_fetch(fetch.tp, fetch.epoch)
        self._finish()

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


def _same_types(out: dict, columns) -> bool:
    from ._assemble import typed_type

    first = next(iter(out.values()))[0]
    return typed_type(first) == typed_type(columns)


def _gaps(cur: _Draining, lo: int, hi: int) -> list[list[int]]:
    """The ``[first, last]`` runs of offsets between records ``lo:hi`` that hold none (a history's gaps)."""
    out: list[list[int]] = []
    previous = cur.offset_at(lo)
    for i in range(lo + 1, hi):
        offset = cur.offset_at(i)
        if offset > previous + 1:
            out.append([previous + 1, offset - 1])
        previous = offset
    return out

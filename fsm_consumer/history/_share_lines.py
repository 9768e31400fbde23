"""A share consumer's lines, typed (docs/histories.md, "Share groups"): hand-outs with delivery counts and
the lock's deadline, acknowledgements as they were settled, acquired records lost. ``_model`` keeps them in
a ``Timeline`` beside the consumer lines; the share rules (_rules/_share.py) judge them."""

from __future__ import annotations

from dataclasses import dataclass

from ._lines import TP, Event, Malformed, as_tp, is_int, num

#: the events only a share consumer writes
SHARE_EVENTS = frozenset({"share_handed", "share_ack", "share_lost"})
#: the acknowledge types a share_ack names, and those that settle a record for good when they take effect
ACK_TYPES = frozenset({"gap", "accept", "release", "reject", "renew"})
FINAL = frozenset({"accept", "reject"})


@dataclass(frozen=True, slots=True)
class ShareHand:
    """Records one poll() handed out of one batch: ``records`` the ``(first, last, delivery count)`` runs,
    ``lock_until`` the lock's deadline as the member counted it."""

    i: int
    t: float
    consumer: str
    tp: TP
    records: tuple[tuple[int, int, int], ...]
    lock_until: float
    line: Event

    def counts(self) -> dict[int, int]:
        return {o: count for first, last, count in self.records for o in range(first, last + 1)}


@dataclass(frozen=True, slots=True)
class ShareAck:
    """Acknowledgements of one partition settled together: ``acks`` the ``(first, last, type)`` runs, ``error``
    None when they took effect, ``sent`` when they went out (None: never sent)."""

    i: int
    t: float
    consumer: str
    tp: TP
    acks: tuple[tuple[int, int, str], ...]
    error: str | None
    sent: float | None
    line: Event
    answered: bool = True  # False: failed on the member's side, the broker's answer never read

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def unknown(self) -> bool:
        """Sent, and failed before its answer was read (its session or connection ended): it may have taken
        effect on the broker."""
        return not self.ok and not self.answered and self.sent is not None

    def types(self) -> dict[int, str]:
        return {o: kind for first, last, kind in self.acks for o in range(first, last + 1)}


@dataclass(frozen=True, slots=True)
class ShareLost:
    """Acquired records that stopped being the member's (its lock ran out, its session ended): ``why``."""

    i: int
    t: float
    consumer: str
    tp: TP
    offsets: tuple[tuple[int, int], ...]
    why: str
    line: Event

    def all(self) -> list[int]:
        return [o for first, last in self.offsets for o in range(first, last + 1)]


def _runs(line: Event, key: str, width: int) -> list[list[object]]:
    value = line.get(key)
    if not isinstance(value, list) or not value:
        raise Malformed(f"{key} is not a non-empty list of runs: {value!r}")
    out = []
    for run in value:
        if (
            not isinstance(run, list)
            or len(run) != width
            or not is_int(run[0])
            or not is_int(run[1])
            or not 0 <= run[0] <= run[1]
        ):
            raise Malformed(f"{key}: not a [first, last{', ...' if width > 2 else ''}] run: {run!r}")
        out.append(run)
    return out


def share_line(i: int, t: float, name: str, kind: str, e: Event) -> ShareHand | ShareAck | ShareLost:
    """One share line, checked: Malformed names what it lacks."""
    tp = as_tp(e.get("tp"))
    if kind == "share_handed":
        records = []
        for first, last, count in _runs(e, "records", 3):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise Malformed(f"records: a delivery count is not a positive integer: {count!r}")
            records.append((int(first), int(last), int(count)))  # type: ignore[call-overload]
        return ShareHand(i, t, name, tp, tuple(records), num(e, "lock_until"), e)
    if kind == "share_ack":
        acks = []
        for first, last, kind_ in _runs(e, "acks", 3):
            if kind_ not in ACK_TYPES:
                raise Malformed(f"acks: not an acknowledge type: {kind_!r}")
            acks.append((int(first), int(last), str(kind_)))  # type: ignore[call-overload]
        error = e.get("error")
        if error is not None and not isinstance(error, str):
            raise Malformed(f"error is neither null nor a string: {error!r}")
        ago = e.get("sent_ago_ms")
        if ago is not None and (isinstance(ago, bool) or not isinstance(ago, (int, float)) or ago < 0):
            raise Malformed(f"sent_ago_ms is neither null nor a duration: {ago!r}")
        answered = e.get("answered", True)
        if not isinstance(answered, bool):
            raise Malformed(f"answered is not true or false: {answered!r}")
        sent = None if ago is None else t - float(ago)
        return ShareAck(i, t, name, tp, tuple(acks), error, sent, e, answered)
    why = e.get("why")
    offsets = tuple((int(a), int(b)) for a, b in _runs(e, "offsets", 2))  # type: ignore[call-overload]
    return ShareLost(i, t, name, tp, offsets, why if isinstance(why, str) else "", e)

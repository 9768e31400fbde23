"""Reading histories, and the checker's other inputs, from files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._model import TP

if TYPE_CHECKING:
    from ._rules._lost import Produced


class HistoryError(ValueError):
    """Input the checker cannot use: no history where one was named, a produced or broker-commits file
    that does not parse. The message is one line."""


@dataclass(frozen=True)
class Unparseable:
    """A line that is not a JSON object (a killed process's half line, when ``at_end``)."""

    path: str
    line: int
    at_end: bool  # the file's last line
    text: str  # its beginning

    def __str__(self) -> str:
        where = "the last line" if self.at_end else "line"
        return f"{self.path}:{self.line} ({where}): {self.text!r}"


@dataclass
class History:
    """The lines of every file read (``events``: file by file, line by line; ``sources``: the file of each),
    the files, how many lines they had (blank ones aside) and those that did not parse."""

    events: list[dict[str, Any]]
    files: list[Path]
    lines: int = 0
    unparseable: list[Unparseable] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def torn(self) -> int:
        """Unparseable last lines: what a process killed while writing leaves (the only lines passed over)."""
        return sum(1 for u in self.unparseable if u.at_end)

    @property
    def damaged(self) -> list[Unparseable]:
        """Unparseable lines inside a file: the history is not whole, and is not judged as if it were."""
        return [u for u in self.unparseable if not u.at_end]


def _files(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> tuple[list[Path], str]:
    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    files: list[Path] = []
    for s in sources:
        path = Path(s)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.jsonl") if p.is_file())
            if not found:
                raise HistoryError(f"{path}: no history there (no *.jsonl file)")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise HistoryError(f"{path}: no such file or directory")
    if not files:
        raise HistoryError("no history named (no file or directory given)")
    return files, ", ".join(str(Path(s)) for s in sources)


def load(source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> History:
    """Every line of every ``*.jsonl`` file of a directory, or of the files (or directories) given.

    A line that does not parse as a JSON object is counted (``History.unparseable``) and skipped: a
    process killed while writing leaves half a line at the end of its file (a torn last line); one inside
    a file makes the check's result not whole (``CheckResult.ok`` False). Raises ``HistoryError`` when
    there is no history: a path that does not exist, a directory without ``*.jsonl`` files, files
    without one line that parses, or without one that has the fields of every history line (``t``,
    ``consumer``, ``event``)."""
    files, named = _files(source)
    history = History([], files)
    for path in files:
        bad: list[tuple[int, str]] = []
        last = 0
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                text = raw.decode("utf-8", errors="replace").strip()
                if not text:
                    continue
                history.lines += 1
                last = number
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:
                    value = None
                if isinstance(value, dict):
                    history.events.append(value)
                    history.sources.append(str(path))
                else:
                    bad.append((number, text[:80]))
        history.unparseable.extend(Unparseable(str(path), n, n == last, text) for n, text in bad)
    if not history.events:
        raise HistoryError(
            f"{named}: no history lines in {len(files)} file(s) ({len(history.unparseable)} lines did not parse)"
        )
    if not any(_is_line(e) for e in history.events):
        raise HistoryError(
            f"{named}: no line of a consumer history in {len(files)} file(s) (none has t, consumer and event; "
            "docs/histories.md)"
        )
    return history


def _is_line(e: dict[str, Any]) -> bool:
    t = e.get("t")
    return (
        isinstance(t, (int, float))
        and not isinstance(t, bool)
        and isinstance(e.get("consumer"), str)
        and isinstance(e.get("event"), str)
    )


def read_produced(path: str | os.PathLike[str]) -> dict[TP, Produced]:
    """A ``--produced`` file: ``{"topic": {"partition": count or [[first, last], ...]}}``."""
    from ._rules import normalize_produced

    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        if not isinstance(value, dict):
            raise ValueError(f'expected {{"topic": {{"partition": count}}}}, got {type(value).__name__}')
        return normalize_produced(value)
    except (OSError, ValueError) as e:
        raise HistoryError(f"{path}: {_one_line(e)}") from None


def read_broker_commits(path: str | os.PathLike[str]) -> list[tuple[str, int, int]]:
    """A ``--broker-commits`` file: JSON lines ``[topic, partition, offset]``, in the order they took effect."""
    out: list[tuple[str, int, int]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"line {number}: not JSON ({e.msg})") from None
                if not (
                    isinstance(value, list)
                    and len(value) == 3
                    and isinstance(value[0], str)
                    and all(isinstance(v, int) and not isinstance(v, bool) for v in value[1:])
                ):
                    raise ValueError(f"line {number}: not [topic, partition, offset]: {line.strip()[:80]}")
                out.append((value[0], value[1], value[2]))
    except (OSError, ValueError) as e:
        raise HistoryError(f"{path}: {_one_line(e)}") from None
    return out


def _one_line(e: BaseException) -> str:
    text = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return " ".join(text.split())

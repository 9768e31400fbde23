"""Member processes of a scenario run (``_freeze_run``, ``_churn_run``) and the watch over their files.

``MemberProcess`` starts ``python -m fsm_consumer.testing._member_process`` in its own process group (a
signal reaches only it); ``stop_all`` stops any number of them, also those stopped or already dead;
``Watch`` follows the members' own JSON lines as they grow: who owns what, which offsets were read, and
when every partition was last owned by live members (a member killed on purpose is ``retire``d)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..broker._process import _parent_death_guard

__all__ = ["MODULES", "MemberProcess", "Watch", "stop_all"]

#: the member process of each client a run can have
MODULES = {
    "fsm": "fsm_consumer.testing._member_process",
    "librdkafka": "fsm_consumer.testing._librdkafka_member",
    "share": "fsm_consumer.testing._share_member",  # a share group's member (its own arguments and lines)
}
_ROOT = Path(__file__).resolve().parent.parent.parent  # the directory holding the fsm_consumer package


class MemberProcess:
    """One member in its own process. ``name`` is its client id (and the name in its lines); ``stem`` (default
    ``name``) names its files, ``OUT_DIR/STEM.jsonl`` (its own lines), ``.jsonl.lib`` (its consumer's
    history) and ``.stderr``: a replacement of a killed member keeps the name and takes a new stem. The
    other options go to ``_member_process`` as ``--key-name value`` (None: left out). ``client``: ``fsm``
    (this library, ``_member_process``) or ``librdkafka`` (confluent-kafka, ``_librdkafka_member``: the
    same arguments and lines)."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        out_dir: Path,
        *,
        stem: str | None = None,
        client: str = "fsm",
        **options: object,
    ) -> None:
        if client not in MODULES:
            raise ValueError(f"client {client!r} is none of {', '.join(MODULES)}")
        self.name = name
        self.client = client
        self.key = stem or name  # unique among the run's processes
        self.out = out_dir / f"{self.key}.jsonl"
        for stale in (self.out, Path(f"{self.out}.lib")):  # histories append: a rerun must start empty
            stale.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            MODULES[client],
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--name",
            name,
            "--out",
            str(self.out),
        ]
        for key, value in options.items():
            if value is not None:
                argv += [f"--{key.replace('_', '-')}", str(value)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
        self._stderr = open(out_dir / f"{self.key}.stderr", "w")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            env=env,
            process_group=0,
            # a run killed before its finally (SIGKILL, a timeout's SIGTERM) takes its members with it
            preexec_fn=_parent_death_guard(os.getpid()),
        )

    @property
    def history(self) -> str:
        """Its consumer's history (``history_path``): what the checker reads."""
        return f"{self.out}.lib"

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:  # it already exited
            pass

    def stderr_tail(self, n: int = 5) -> str:
        self._stderr.flush()
        lines = Path(self._stderr.name).read_text(errors="replace").splitlines()
        return " | ".join(lines[-n:])

    def close_log(self) -> None:
        self._stderr.close()


def stop_all(procs: list[MemberProcess], grace_s: float = 10.0) -> dict[str, int | None]:
    """SIGCONT (a stopped process would not act on SIGTERM), SIGTERM, wait, SIGKILL what is left; every
    process's exit code by its key (-9 for one killed before)."""
    for p in procs:
        p.signal(signal.SIGCONT)
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    codes: dict[str, int | None] = {}
    for p in procs:
        try:
            codes[p.key] = p.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.signal(signal.SIGKILL)
            codes[p.key] = p.proc.wait(5)
        p.close_log()
    return codes


class Watch:
    """Follows the members' own lines as they grow (``update``): ``owned`` by each process (by its key),
    offsets ``read`` per partition. A process given to ``retire`` (killed on purpose) no longer counts
    as owning anything, nor as a member that exited. With ``partitions``, ``whole_since`` is the time
    (the lines' monotonic ms) from which the live members together owned that many partitions, None
    while they do not; ``wholes`` lists each time they came to (with the owners then, ``owners()``).
    ``ever_owned``: the processes that owned partitions at some time; ``leader``: whether each process
    leads the group (its last "leader" line)."""

    def __init__(self, procs: list[MemberProcess], partitions: int | None = None) -> None:
        self._procs: list[MemberProcess] = []
        self._pos: dict[str, int] = {}
        self.owned: dict[str, set[tuple[str, int]]] = {}
        self.read: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.retired: set[str] = set()
        self.partitions = partitions
        self.whole_since: float | None = None
        self.wholes: list[tuple[float, dict[int, list[str]]]] = []
        self.ever_owned: set[str] = set()
        self.leader: dict[str, bool] = {}
        for p in procs:
            self.add(p)

    def add(self, proc: MemberProcess) -> None:
        self._procs.append(proc)
        self._pos[proc.key] = 0
        self.owned[proc.key] = set()

    def retire(self, proc: MemberProcess, t_ms: float) -> None:
        """``proc`` was killed at ``t_ms``: read the rest of its lines, then count it out."""
        self.update()
        self.retired.add(proc.key)
        self._recheck(t_ms)

    def live(self) -> list[MemberProcess]:
        return [p for p in self._procs if p.key not in self.retired]

    def live_owned(self) -> set[tuple[str, int]]:
        return set().union(*(self.owned[p.key] for p in self.live()))

    def _recheck(self, t_ms: float) -> None:
        if self.partitions is None:
            return
        whole = len(self.live_owned()) >= self.partitions
        if not whole:
            self.whole_since = None
        elif self.whole_since is None:
            self.whole_since = t_ms
            self.wholes.append((t_ms, self.owners()))

    def update(self) -> None:
        """Read the lines written since the last update, every file's, and apply them in time order."""
        new: list[tuple[float, str, dict[str, Any]]] = []
        for p in self._procs:
            if p.key in self.retired or not p.out.exists():
                continue
            with open(p.out, encoding="utf-8") as f:
                f.seek(self._pos[p.key])
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]  # a half-written last line waits for the next update
            self._pos[p.key] += len(complete.encode("utf-8"))
            for line in complete.splitlines():
                e = json.loads(line)
                new.append((float(e["t"]), p.key, e))
        new.sort(key=lambda x: x[0])
        for t, key, e in new:
            kind = e["event"]
            if kind == "assigned":
                self.owned[key].update((tp[0], tp[1]) for tp in e["partitions"])
                if self.owned[key]:
                    self.ever_owned.add(key)
            elif kind in ("revoked", "lost"):
                self.owned[key].difference_update((tp[0], tp[1]) for tp in e["partitions"])
            elif kind == "read":
                first, last = e["offsets"]
                self.read[(e["tp"][0], e["tp"][1])].update(range(first, last + 1))
                continue
            elif kind == "leader":
                self.leader[key] = bool(e["leader"])
                continue
            else:
                continue
            self._recheck(t)

    def all_assigned(self, partitions: int) -> bool:
        """Every live member owns partitions, and together they own ``partitions``."""
        owned = [self.owned[p.key] for p in self.live()]
        return all(owned) and len(set().union(*owned)) == partitions

    def read_all(self, produced: dict[tuple[str, int], set[int]]) -> bool:
        return all(offsets <= self.read[tp] for tp, offsets in produced.items())

    def owners(self) -> dict[int, list[str]]:
        """Partition -> the live members owning it (by key)."""
        out: dict[int, list[str]] = defaultdict(list)
        for p in self.live():
            for _, partition in sorted(self.owned[p.key]):
                out[partition].append(p.key)
        return dict(out)

    def describe(self) -> str:
        return "; ".join(f"{p.key} owns {sorted(part for _, part in self.owned[p.key])}" for p in self.live())

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str | None) -> bool:
        """Poll the files until ``predicate``; on timeout raise naming ``what`` (or return False if None).
        With ``what``, a live member that exited ends the wait early, raising."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.update()
            if predicate():
                return True
            dead = [p for p in self.live() if p.proc.poll() is not None]
            if time.monotonic() > deadline or (dead and what is not None):
                if what is None:
                    return False
                why = "a member exited" if dead else f"timed out after {timeout_s} s"
                raise RuntimeError(
                    f"{why} waiting for {what}: {self.describe()}; "
                    + "; ".join(f"{p.key} exit {p.proc.poll()} stderr: {p.stderr_tail()}" for p in self.live())
                )
            time.sleep(0.1)

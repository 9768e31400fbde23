"""pytest plugin recording which spec transitions the tests fire (``-p fsm_consumer.machines.pytest_plugin``).

Every transition any machine fires during a test is counted under the test's kind: the first
directory below ``tests/`` (unit, integration, spark), and under ``broker:NAME`` when the test runs
on a broker (its ``broker`` parameter: tansu, kafka). At the end of the session the counts go to
``$FSM_COVERAGE_DIR`` (default ``.fsm-coverage/`` in the rootdir) for ``tools/spec-coverage``.
Transitions fired in child processes are not seen. A link of a composition (specs/compositions/) that any
consumer found broken fails the session, also one found where no test could see it (at the end of a loop).
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from pathlib import Path

from ._composition import broken_links
from ._log import TransitionRecord, add_observer, remove_observer

_lock = threading.Lock()
_kind = ["setup"]
_broker: list[str | None] = [None]
_counts: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))


def _observe(rec: TransitionRecord) -> None:
    with _lock:  # background threads of consumers under test fire too
        slot = _counts[rec.machine][rec.index]
        slot[_kind[0]] += 1
        if _broker[0] is not None:
            slot[f"broker:{_broker[0]}"] += 1


def _records_dir(config) -> Path:
    return Path(os.environ.get("FSM_COVERAGE_DIR") or Path(config.rootpath) / ".fsm-coverage")


def pytest_configure(config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker writes its own file, cleans nothing
        add_observer(_observe)
        return
    directory = _records_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.json"):
        old.unlink()
    add_observer(_observe)


def pytest_runtest_setup(item) -> None:
    parts = Path(str(item.path)).resolve().relative_to(Path(str(item.config.rootpath)).resolve()).parts
    _kind[0] = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]
    callspec = getattr(item, "callspec", None)
    _broker[0] = callspec.params.get("broker") if callspec is not None else None


def pytest_sessionfinish(session) -> None:
    remove_observer(_observe)
    broken = broken_links()
    if broken:  # a composition's link broken in some consumer, maybe where no test could see it (the loop's end)
        print("\nfsm_consumer: links of specs/compositions/ broken during the tests:", *broken, sep="\n  ")
        session.exitstatus = 1
    with _lock:
        data = {"machines": {m: {str(i): dict(k) for i, k in by.items()} for m, by in _counts.items()}}
    directory = _records_dir(session.config)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"records-{os.getpid()}.json").write_text(json.dumps(data, sort_keys=True))

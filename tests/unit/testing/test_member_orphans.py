"""A scenario run killed before its ``finally`` (SIGKILL, a timeout's SIGTERM) leaves no member process
behind: each dies with the process that started it (PR_SET_PDEATHSIG). No broker: the member only tries a
closed port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) is dead for this purpose
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_member_processes_die_with_their_run(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from fsm_consumer.testing._processes import MemberProcess
        p = MemberProcess("127.0.0.1:1", "g", "t", "m0", Path({str(tmp_path)!r}))
        print(p.proc.pid, flush=True)
        time.sleep(60)
        """
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    member = None
    try:
        member = int(run.stdout.readline())
        assert _alive(member)
        run.send_signal(signal.SIGKILL)
        run.wait(10)
        deadline = time.monotonic() + 10
        while _alive(member) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(member), "the member outlived the run that started it"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if member is not None and _alive(member):
            os.kill(member, signal.SIGKILL)

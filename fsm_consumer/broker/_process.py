"""Spawning helper processes that cannot outlive the Python process that started them.

Three layers, because each one alone has a gap:

* ``start_new_session=True`` puts the child in its own process group, so ``stop()``
  can signal the whole group (anything the child forked goes too), and a Ctrl-C
  aimed at the test runner's group does not race our own shutdown.
* ``PR_SET_PDEATHSIG(SIGKILL)`` (Linux) makes the kernel kill the child when its
  parent dies, which covers the one case no Python code can: the parent being
  SIGKILLed or crashing.
* ``weakref.finalize`` (which also runs at interpreter exit) stops a child whose
  owner was garbage-collected or forgotten without ``stop()``.

PDEATHSIG caveat: the signal fires when the *thread* that forked the child exits,
not when the process does. Starting a broker from a short-lived worker thread
(a ThreadPoolExecutor job, a thread-scoped fixture) gets it SIGKILLed as soon as
that thread finishes. Start it from the main thread or a thread that lives as
long as the broker should.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """Resolve libc's prctl once, in the parent: a forked child must not dlopen."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


def _parent_death_guard(parent_pid: int) -> Callable[[], None]:
    """Build the ``preexec_fn`` that runs in the child between fork and exec.

    It only calls pre-resolved functions: after fork() in a threaded parent,
    anything that takes a lock (imports, dlopen, logging) can deadlock.
    """
    prctl = _PRCTL

    def guard() -> None:
        if prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            # Popen re-raises this in the parent as SubprocessError.
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        # If the parent died before prctl took effect we were already reparented
        # and the death signal will never come: die now instead of leaking.
        if os.getppid() != parent_pid:
            os._exit(125)

    return guard


def _exited_unreaped(pid: int) -> bool:
    """True once ``pid`` has exited; leaves it a zombie so its pid (= pgid) can't be reused."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped elsewhere
        return True
    return info is not None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate_group(popen: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the child's group, SIGKILL it after ``grace`` seconds, then reap the child.

    Kept a module-level function (not a method) so the finalizer holds no
    reference to the owning object.
    """
    if popen.returncode is not None:
        return
    pgid = popen.pid  # session leader: its pid is the group id
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while not _exited_unreaped(popen.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    # Sweep the group while the leader is still an unreaped zombie (or alive),
    # so the pgid cannot belong to some unrelated, newer process.
    _signal_group(pgid, signal.SIGKILL)
    popen.wait()


class GuardedProcess:
    """A child process in its own group, killed with its parent, stopped on GC/exit."""

    def __init__(
        self, argv: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None, stop_grace: float = 3.0
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        with open(log_path, "ab") as log:  # the child keeps its own copy of the fd
            self._popen: subprocess.Popen[bytes] = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                close_fds=True,
                start_new_session=True,
                preexec_fn=_parent_death_guard(os.getpid()),
            )
        self._finalizer = weakref.finalize(self, _terminate_group, self._popen, stop_grace)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def alive(self) -> bool:
        return self._popen.poll() is None

    def stop(self) -> None:
        """Stop the whole process group and reap the child. Idempotent."""
        self._finalizer()

    def kill(self) -> None:
        """SIGKILL the whole process group at once (no grace: a crash), then reap the child."""
        if self._popen.returncode is None:
            _signal_group(self._popen.pid, signal.SIGKILL)  # the leader is unreaped: its pgid is still ours
            self._popen.wait()
        self._finalizer()

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited({self._popen.returncode})"
        return f"<GuardedProcess pid={self.pid} {state} {self.argv[0]!r}>"

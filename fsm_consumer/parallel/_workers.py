"""The workers: threads calling the handler, or one event loop awaiting an ``async def`` handler.

A worker takes a job from the scheduler, calls the handler (retrying ``retries`` times with
exponential backoff), then on a final failure calls ``on_failure(record, exc)`` when given. The
outcome goes on the completions queue for the application thread, and the job's lane is freed
(its next record becomes ready) only after that, so one key never runs twice at once; the lane of
a record that failed for good stays busy (run() is about to raise; that key's later records must
not run before it). Sleeping for
a retry keeps the lane busy: the key's later records wait, in order.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, NamedTuple

from ._scheduler import Job, Scheduler

log = logging.getLogger("fsm_consumer.parallel")


class Outcome(NamedTuple):
    """What became of a job: ``error`` None when handled (or dead-lettered by on_failure)."""

    job: Job
    error: BaseException | None
    retried: int
    dead_lettered: bool


class Attempts:
    """The retry policy shared by both kinds of workers."""

    def __init__(self, retries: int, backoff_ms: float, backoff_max_ms: float,
                 on_failure: Callable[[Any, BaseException], Any] | None) -> None:
        self.retries = retries
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.on_failure = on_failure

    def pause_s(self, attempt: int) -> float:
        return min(self.backoff_ms * 2 ** (attempt - 1), self.backoff_max_ms) / 1000

    def give_up(self, job: Job, exc: BaseException) -> Outcome:
        if self.on_failure is None:
            return Outcome(job, exc, job.attempts - 1, False)
        try:
            self.on_failure(job.record, exc)
        except BaseException as hook_exc:  # the dead-letter hook itself failed: nothing handled this record
            hook_exc.__cause__ = exc
            return Outcome(job, hook_exc, job.attempts - 1, False)
        return Outcome(job, None, job.attempts - 1, True)


class ThreadWorkers:
    def __init__(self, scheduler: Scheduler, handler: Callable[[Any], Any], parallelism: int, attempts: Attempts,
                 completions: SimpleQueue, wake: Callable[[], None]) -> None:
        self._scheduler = scheduler
        self._handler = handler
        self._attempts = attempts
        self._completions = completions
        self._wake = wake
        self._stopping = threading.Event()
        # daemon threads: a handler that never returns must not keep the process alive after close()
        self._threads = [threading.Thread(target=self._run, args=(i,), name=f"fsm-parallel-{i}", daemon=True)
                         for i in range(parallelism)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout_s: float) -> bool:
        """Stop taking jobs; wait up to ``timeout_s`` for running handlers; True if all threads ended."""
        self._stopping.set()
        self._scheduler.close()
        for t in self._threads:
            t.join(timeout_s)
        return not any(t.is_alive() for t in self._threads)

    def _run(self, worker: int) -> None:
        while not self._stopping.is_set():
            job = self._scheduler.take(worker)
            if job is None:
                return
            outcome = self._handle(job)
            self._completions.put(outcome)
            if outcome.error is None:  # a failed key stays busy: its later records must not run
                self._scheduler.done(job)
            self._wake()

    def _handle(self, job: Job) -> Outcome:
        while True:
            job.attempts += 1
            try:
                self._handler(job.record)
                return Outcome(job, None, job.attempts - 1, False)
            except Exception as exc:
                if job.attempts > self._attempts.retries or self._stopping.is_set():
                    return self._attempts.give_up(job, exc)
                log.debug("handler failed on %s@%d (attempt %d), retrying: %r", job.tp, job.offset, job.attempts,
                          exc)
                if self._stopping.wait(self._attempts.pause_s(job.attempts)):
                    return self._attempts.give_up(job, exc)


class AsyncWorkers:
    """``parallelism`` tasks on one event loop, in a thread of its own."""

    def __init__(self, scheduler: Scheduler, handler: Callable[[Any], Any], parallelism: int, attempts: Attempts,
                 completions: SimpleQueue, wake: Callable[[], None]) -> None:
        self._scheduler = scheduler
        self._handler = handler
        self._parallelism = parallelism
        self._attempts = attempts
        self._completions = completions
        self._wake = wake
        self._loop = asyncio.new_event_loop()
        self._ready = asyncio.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._main, name="fsm-parallel-loop", daemon=True)

    def notify(self) -> None:
        """Called by the scheduler (any thread) when a job may be ready."""
        if not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._ready.set)
            except RuntimeError:  # the loop closed in between
                pass

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        self._stopping = True
        self._scheduler.close()
        self.notify()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._all())
        finally:
            self._loop.close()

    async def _all(self) -> None:
        await asyncio.gather(*(self._worker(i) for i in range(self._parallelism)))

    async def _worker(self, worker: int) -> None:
        while not self._stopping:
            job = self._scheduler.try_take(worker)
            if job is None:
                self._ready.clear()
                job = self._scheduler.try_take(worker)  # again after clear(): a notify in between is not lost
                if job is None:
                    await self._ready.wait()
                    continue
            outcome = await self._handle(job)
            self._completions.put(outcome)
            if outcome.error is None:  # a failed key stays busy: its later records must not run
                self._scheduler.done(job)
            self._wake()

    async def _handle(self, job: Job) -> Outcome:
        while True:
            job.attempts += 1
            try:
                await self._handler(job.record)
                return Outcome(job, None, job.attempts - 1, False)
            except Exception as exc:
                if job.attempts > self._attempts.retries or self._stopping:
                    return self._attempts.give_up(job, exc)
                await asyncio.sleep(self._attempts.pause_s(job.attempts))


def is_async(handler: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None))

"""The workers: threads calling the handler, or one event loop awaiting an ``async def`` handler.

A worker takes a job from the scheduler, calls the handler (retrying ``retries`` times with
exponential backoff), then on a final failure calls ``on_failure(record, exc)`` when given. The
outcome goes on the completions queue for the application thread, and the job's lane is freed
(its next record becomes ready) only after that, so one key never runs twice at once; the lane of
a record that failed for good stays busy (run() is about to raise; that key's later records must
not run before it). Sleeping for
a retry keeps the lane busy: the key's later records wait, in order.

A ``BaseException`` that is no failure of a record (``KeyboardInterrupt``, ``SystemExit``) is not
retried: it becomes an ``abort`` outcome, the worker ends, and run() stops and raises it as itself.
Whatever ends a worker, its outcome is reported: a worker never dies silently.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from queue import SimpleQueue
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, TypeGuard

from ._scheduler import Job, Scheduler

if TYPE_CHECKING:
    from ..structs import ConsumerRecord

#: ``handler(record)`` run on a worker thread; what it returns is ignored.
Handler: TypeAlias = "Callable[[ConsumerRecord], object]"
#: ``async def handler(record)`` awaited on the workers' event loop; what it returns is ignored.
AsyncHandler: TypeAlias = "Callable[[ConsumerRecord], Awaitable[object]]"
#: ``on_failure(record, exc)``: called (on the worker) when a record failed for good; its result is ignored.
FailureHook: TypeAlias = "Callable[[ConsumerRecord, BaseException], object]"

log = logging.getLogger("fsm_consumer.parallel")


class Outcome(NamedTuple):
    """What became of a job: ``error`` None when handled (or dead-lettered by on_failure). ``abort``:
    ``error`` must stop run() and reach its caller as itself; ``job`` is None when a worker ended
    outside any record."""

    job: Job | None
    error: BaseException | None
    retried: int
    dead_lettered: bool
    abort: bool = False


def is_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the record (retried, then on_failure or HandlerFailedError), not
    a request to stop the process (``KeyboardInterrupt``, ``SystemExit``: they abort run()).

    ``asyncio.CancelledError`` counts as the record's failure: a ParallelConsumer never cancels a
    handler (stop() lets running handlers finish), so one reaching us was raised inside the handler
    (a task or timeout it awaited was cancelled) and says nothing about the consumer; letting it
    propagate would end every worker of the event loop over one record. A worker task that really
    is being cancelled is told apart by ``Task.cancelling()`` (``AsyncWorkers._handle``)."""
    return isinstance(exc, (Exception, asyncio.CancelledError))


class Attempts:
    """The retry policy shared by both kinds of workers."""

    def __init__(
        self,
        retries: int,
        backoff_ms: float,
        backoff_max_ms: float,
        on_failure: FailureHook | None,
    ) -> None:
        self.retries = retries
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.on_failure = on_failure

    def pause_s(self, attempt: int) -> float:
        factor: int = 2 ** (attempt - 1)  # an int (attempt >= 1); typeshed cannot tell for int ** int
        return min(self.backoff_ms * factor, self.backoff_max_ms) / 1000

    def after(self, job: Job, exc: BaseException, stopping: bool) -> Outcome | float:
        """What follows a failed attempt: the job's outcome, or the seconds to wait before retrying."""
        if not is_failure(exc):
            return Outcome(job, exc, job.attempts - 1, False, abort=True)
        if job.attempts > self.retries or stopping:
            return self.give_up(job, exc)
        log.debug("handler failed on %s@%d (attempt %d), retrying: %r", job.tp, job.offset, job.attempts, exc)
        return self.pause_s(job.attempts)

    def give_up(self, job: Job, exc: BaseException) -> Outcome:
        if self.on_failure is None:
            return Outcome(job, exc, job.attempts - 1, False)
        try:
            self.on_failure(job.record, exc)
        except BaseException as hook_exc:  # the dead-letter hook itself failed: nothing handled this record
            if not is_failure(hook_exc):
                return Outcome(job, hook_exc, job.attempts - 1, False, abort=True)
            hook_exc.__cause__ = exc
            return Outcome(job, hook_exc, job.attempts - 1, False)
        return Outcome(job, None, job.attempts - 1, True)


def _hand_over(
    outcome: Outcome, scheduler: Scheduler, completions: SimpleQueue[Outcome], wake: Callable[[], None]
) -> None:
    """Hand ``outcome`` to the application thread, then free the job's lane (its next record becomes
    ready) unless the record failed for good: that key's later records must not run before it."""
    completions.put(outcome)
    if outcome.error is None and outcome.job is not None:
        scheduler.done(outcome.job)
    wake()


class ThreadWorkers:
    def __init__(
        self,
        scheduler: Scheduler,
        handler: Handler,
        parallelism: int,
        attempts: Attempts,
        completions: SimpleQueue[Outcome],
        wake: Callable[[], None],
    ) -> None:
        self._scheduler = scheduler
        self._handler = handler
        self._attempts = attempts
        self._completions = completions
        self._wake = wake
        self._stopping = threading.Event()
        # daemon threads: a handler that never returns must not keep the process alive after close()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"fsm-parallel-{i}", daemon=True)
            for i in range(parallelism)
        ]

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
        job = None
        try:
            while not self._stopping.is_set():
                job = self._scheduler.take(worker)
                if job is None:
                    return
                outcome = self._handle(job)
                job = None  # reported from here on
                _hand_over(outcome, self._scheduler, self._completions, self._wake)
                if outcome.abort:
                    return  # run() stops and raises it
        except BaseException as exc:  # never a silent dead worker: run() raises what ended it
            _hand_over(Outcome(job, exc, 0, False, abort=True), self._scheduler, self._completions, self._wake)

    def _handle(self, job: Job) -> Outcome:
        while True:
            job.attempts += 1
            try:
                self._handler(job.record)
                return Outcome(job, None, job.attempts - 1, False)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt too: here only the handler raises them
                then = self._attempts.after(job, exc, self._stopping.is_set())
                if isinstance(then, Outcome):
                    return then
                if self._stopping.wait(then):
                    return self._attempts.give_up(job, exc)


class AsyncWorkers:
    """``parallelism`` tasks on one event loop, in a thread of its own."""

    def __init__(
        self,
        scheduler: Scheduler,
        handler: AsyncHandler,
        parallelism: int,
        attempts: Attempts,
        completions: SimpleQueue[Outcome],
        wake: Callable[[], None],
    ) -> None:
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

    def _report(self, outcome: Outcome) -> None:
        _hand_over(outcome, self._scheduler, self._completions, self._wake)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._all())
        except BaseException as exc:
            # KeyboardInterrupt or SystemExit raised in a task the handler created leaves the event loop
            # itself (asyncio re-raises them): report it, then cancel the tasks left, whose workers
            # report their records as aborted (so none stays counted as running)
            self._report(Outcome(None, exc, 0, False, abort=True))
            self._cancel_all()
        finally:
            self._loop.close()

    def _cancel_all(self) -> None:
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        if tasks:
            try:
                self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            except BaseException as exc:  # a second one while cancelling: the first is what run() raises
                log.warning("parallel consumer: the event loop ended while its tasks were cancelled: %r", exc)

    async def _all(self) -> None:
        await asyncio.gather(*(self._worker(i) for i in range(self._parallelism)))

    async def _worker(self, worker: int) -> None:
        job = None
        try:
            while not self._stopping:
                job = self._scheduler.try_take(worker)
                if job is None:
                    self._ready.clear()
                    job = self._scheduler.try_take(worker)  # again after clear(): a notify in between is not lost
                    if job is None:
                        await self._ready.wait()
                        continue
                outcome = await self._handle(job)
                job = None  # reported from here on
                self._report(outcome)
                if outcome.abort:
                    return  # run() stops and raises it
        except BaseException as exc:  # never a silent dead worker: run() raises what ended it
            self._report(Outcome(job, exc, 0, False, abort=True))

    async def _handle(self, job: Job) -> Outcome:
        while True:
            job.attempts += 1
            try:
                await self._handler(job.record)
                return Outcome(job, None, job.attempts - 1, False)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError) and _cancelling():
                    # this worker's own task is being cancelled (the loop is shutting down after an
                    # abort): not the record's failure, and no retry
                    return Outcome(job, exc, job.attempts - 1, False, abort=True)
                then = self._attempts.after(job, exc, self._stopping)
                if isinstance(then, Outcome):
                    return then
                await asyncio.sleep(then)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def is_async(handler: Callable[..., object]) -> TypeGuard[Callable[..., Awaitable[object]]]:
    # an instance whose class defines ``async def __call__`` is an async handler too
    call = getattr(type(handler), "__call__", None)  # noqa: B004 - the method itself, not whether it is callable
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)

"""CommitManager under the error policy, driven sans-IO: a fake ``now``, kafka-python responses into the
handlers. Retriable codes back off exponentially (bounded by retry_backoff_max_ms) until the deadline,
whose timeout names the last error; the user's codes fail at once saying how to fix them; an
unauthorized OffsetFetch of starting positions is held and not asked again while held."""

from __future__ import annotations

from types import SimpleNamespace

import kafka.errors as ke
import pytest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.errors import CommitFailedError, KafkaTimeoutError
from fsm_consumer.events import CommitEvent, FetchCommittedEvent
from fsm_consumer.fetch import OffsetAndMetadata, TopicPartition
from fsm_consumer.managers import CommitManager
from fsm_consumer.state import HeldErrors, SubscriptionState

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
RTT = 2.0


class Events(list):
    def put(self, event):
        self.append(event)


class Rig:
    """A CommitManager with a coordinator at node 1, run on a simulated clock."""

    def __init__(self, **config):
        settings = {"bootstrap_servers": "127.0.0.1:1", "group_id": "g", "enable_auto_commit": False, **config}
        self.config = ConsumerConfig.from_kwargs(**settings)
        self.subs = SubscriptionState()
        self.held = HeldErrors()
        self.lost = 0
        self.coordinator = SimpleNamespace(
            node=1, gone_for_close=False, needed=lambda: None, mark_unknown=self._lost, last_error=None
        )
        self.commits = CommitManager(
            self.config,
            subscription=self.subs,
            coordinator=self.coordinator,
            background_events=Events(),
            metrics=Metrics(),
            held=self.held,
        )
        self.now = 0.0
        self.sent: list[tuple[float, object]] = []  # (time, request)
        self.versions: list[tuple[int, int | None]] = []  # (min, max) of each request sent

    def _lost(self):
        self.lost += 1

    def commit(self, timeout_ms=10_000, offsets=None) -> CommitEvent:
        event = CommitEvent(
            offsets=offsets or {T0: OffsetAndMetadata(5, "", -1)},
            sync=True,
            deadline_ms=self.now + timeout_ms,
            what="commit of t-0",
            timeout_ms=timeout_ms,
        )
        self.commits.on_commit_event(event, self.now)
        return event

    def run(self, until: float, answer) -> None:
        """Poll, answer every request after RTT with ``answer(request)`` -> response (or an exception
        for a transport failure), and sleep as long as the manager asks, through ``until``."""
        while self.now <= until:
            wait, out = self.commits.poll(self.now)
            for o in out:
                self.sent.append((self.now, o.request))
                self.versions.append((o.min_version, o.max_version))
            if out:
                self.now += RTT
                for o in out:
                    reply = answer(o.request)
                    if isinstance(reply, BaseException):
                        o.handler(SimpleNamespace(error=reply, response=None, sent_to=1), self.now)
                    else:
                        o.handler(SimpleNamespace(error=None, response=reply, sent_to=1), self.now)
                continue
            if self.now == until:
                return
            self.now = min(until, self.now + max(1.0, min(wait, 5_000.0)))

    def count(self, kind) -> int:
        return sum(isinstance(r, kind) for _, r in self.sent)

    def times(self, kind) -> list[float]:
        return [t for t, r in self.sent if isinstance(r, kind)]


def commit_answer(code: int):
    def answer(request):
        if not isinstance(request, OffsetCommitRequest):
            return fetch_answer(0)(request)
        return OffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )

    return answer


def answered_topics(topic_cls, partition_cls, asked, code: int, offset: int) -> list:
    """An OffsetFetch answer's topics (either layout's classes) for the topics ``asked``."""
    return [
        topic_cls(
            name=t.name,
            partitions=[
                partition_cls(
                    partition_index=i,
                    committed_offset=-1 if code else offset,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=code,
                )
                for i in t.partition_indexes
            ],
        )
        for t in asked
    ]


def fetch_answer(code: int, top: int = 0, offset: int = 42):
    def answer(request):
        assert isinstance(request, OffsetFetchRequest)
        R = OffsetFetchResponse
        T = R.OffsetFetchResponseTopic
        return R(
            throttle_time_ms=0,
            error_code=top,
            topics=answered_topics(T, T.OffsetFetchResponsePartition, request.topics, code, offset),
        )

    return answer


# -- OffsetCommit ------------------------------------------------------------------------------------


def test_load_in_progress_is_retried_with_a_growing_backoff_and_the_timeout_names_it():
    rig = Rig()
    event = rig.commit(timeout_ms=10_000)
    rig.run(10_000.0, commit_answer(14))
    times = rig.times(OffsetCommitRequest)
    assert 5 <= len(times) <= 20, times  # 10 s at <= ~10/s, fewer as the backoff grows
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[0] < 200 and all(g >= 80 for g in gaps)  # 100 ms (+-20%) at first ...
    assert all(800 <= g <= 1200 + RTT for g in gaps[5:]), gaps  # ... then capped at retry_backoff_max_ms
    assert rig.lost == 0  # loading: the same coordinator, later
    assert event.future.done
    with pytest.raises(
        KafkaTimeoutError,
        match=r"commit of t-0 timed out after 10000 ms: "
        r"last error CoordinatorLoadInProgressError",
    ) as caught:
        event.future.result()
    assert isinstance(caught.value.__cause__, ke.CoordinatorLoadInProgressError)
    assert event.cause == "last error CoordinatorLoadInProgressError"  # the caller's own timeout says it too
    assert "last error CoordinatorLoadInProgressError" in str(event.timeout_error())


@pytest.mark.parametrize("code", [15, 16])
def test_coordinator_moved_is_rediscovered_and_retried(code):
    rig = Rig()
    event = rig.commit(timeout_ms=3_000)
    rig.run(3_000.0, commit_answer(code))
    assert 3 <= rig.count(OffsetCommitRequest) <= 10
    assert rig.lost == rig.count(OffsetCommitRequest)
    with pytest.raises(KafkaTimeoutError, match=f"last error {ke.for_code(code).__name__}"):
        event.future.result()


def test_a_transport_failure_is_retried_with_backoff_and_named():
    rig = Rig()
    event = rig.commit(timeout_ms=2_000)
    rig.run(2_000.0, lambda request: ke.KafkaConnectionError("connection reset"))
    assert 3 <= rig.count(OffsetCommitRequest) <= 8
    with pytest.raises(KafkaTimeoutError, match="last error KafkaConnectionError"):
        event.future.result()


def test_success_after_retries_completes_and_later_commits_start_from_the_base_backoff():
    rig = Rig()
    event = rig.commit()
    answers = iter([14, 14, 14, 0])
    rig.run(3_000.0, lambda request: commit_answer(next(answers))(request))
    assert rig.count(OffsetCommitRequest) == 4
    assert event.future.done and event.future.result() is None
    second = rig.commit()
    start = len(rig.sent)
    rig.run(rig.now + 500.0, commit_answer(0))
    assert len(rig.sent) == start + 1 and second.future.result() is None


def test_group_authorization_failed_is_not_retried_and_says_how_to_fix_it():
    rig = Rig()
    event = rig.commit()
    rig.run(5_000.0, commit_answer(30))
    assert rig.count(OffsetCommitRequest) == 1
    with pytest.raises(
        ke.GroupAuthorizationFailedError,
        match="OffsetCommit for group 'g' failed: grant this principal READ on the consumer group",
    ):
        event.future.result()


def test_topic_authorization_failed_names_the_partitions():
    rig = Rig()
    event = rig.commit(offsets={T0: OffsetAndMetadata(5, "", -1), T1: OffsetAndMetadata(6, "", -1)})
    rig.run(5_000.0, commit_answer(29))
    assert rig.count(OffsetCommitRequest) == 1
    with pytest.raises(ke.TopicAuthorizationFailedError, match="for t-0, t-1 failed: grant this principal READ"):
        event.future.result()


def test_a_commit_without_a_coordinator_times_out_naming_why():
    rig = Rig()
    rig.coordinator.node = None
    rig.coordinator.last_error = "FindCoordinator answered CoordinatorNotAvailableError"
    event = rig.commit(timeout_ms=1_000)
    rig.run(1_500.0, commit_answer(0))
    assert rig.sent == []
    with pytest.raises(
        KafkaTimeoutError,
        match="no coordinator for group 'g' "
        r"\(FindCoordinator answered CoordinatorNotAvailableError\)",
    ):
        event.future.result()


def test_auto_commits_in_a_storm_are_never_queued_twice_nor_sent_again_with_old_positions():
    """As Java: a failed auto-commit is not retried; the next one is brought forward (backing off, doubling)
    and takes the positions of then, so an old position never goes out after a newer one."""
    rig = Rig(enable_auto_commit=True, auto_commit_interval_ms=500)
    rig.subs.assign([T0])
    rig.subs.seek(T0, 7)
    rig.commits.start_auto_commit(0.0)
    rig.run(10_000.0, commit_answer(14))
    assert sum(c.kind == "auto" for c in rig.commits._queue) <= 1
    assert 5 <= rig.count(OffsetCommitRequest) <= 10_000 / 500 + 1  # one an interval at most
    rig.subs.seek(T0, 9)  # the next auto-commit takes the newer position
    rig.run(12_000.0, commit_answer(0))
    assert rig.commits._queue == [] and rig.commits._last_auto == {T0: 9}
    sent = [
        p.committed_offset
        for _, r in rig.sent
        if isinstance(r, OffsetCommitRequest)
        for t in r.topics
        for p in t.partitions
    ]
    assert sent == sorted(sent) and sent[-1] == 9  # never back from 9 to 7


# -- OffsetFetch of starting positions ---------------------------------------------------------------------


def assigned(rig: Rig, *tps):
    rig.subs.assign(tps, awaiting_committed=True)


def test_offset_fetch_group_authorization_failed_is_held_and_not_asked_again():
    rig = Rig()
    assigned(rig, T0, T1)
    rig.run(10_000.0, fetch_answer(30))
    assert rig.count(OffsetFetchRequest) == 1
    assert rig.held.holds(("group",))
    with pytest.raises(ke.GroupAuthorizationFailedError, match="grant this principal READ on the consumer group"):
        rig.held.raise_first()
    rig.subs.seek(T0, 3)
    rig.run(11_000.0, fetch_answer(30))
    assert rig.held.holds(("group",)) and rig.count(OffsetFetchRequest) == 1  # T1 still waits for it
    rig.subs.seek(T1, 3)  # the user gave up on the committed offsets: nothing needs them
    rig.run(12_000.0, fetch_answer(30))
    assert not rig.held.holds(("group",)) and rig.count(OffsetFetchRequest) == 1


def test_offset_fetch_group_level_code_is_held_too():
    rig = Rig()
    assigned(rig, T0)
    rig.run(3_000.0, fetch_answer(0, top=30))
    assert rig.count(OffsetFetchRequest) == 1 and rig.held.holds(("group",))


def test_offset_fetch_topic_authorization_failed_is_held_for_the_topic():
    rig = Rig()
    u0 = TopicPartition("u", 0)
    assigned(rig, T0, u0)

    def answer(request):
        R = OffsetFetchResponse
        return R(
            throttle_time_ms=0,
            error_code=0,
            topics=[
                R.OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        R.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
                            partition_index=i,
                            committed_offset=-1 if t.name == "t" else 11,
                            committed_leader_epoch=-1,
                            metadata="",
                            error_code=29 if t.name == "t" else 0,
                        )
                        for i in t.partition_indexes
                    ],
                )
                for t in request.topics
            ],
        )

    rig.run(10_000.0, answer)
    assert rig.count(OffsetFetchRequest) == 1
    assert rig.held.holds(("topic", "t")) and not rig.held.holds(("group",))
    with pytest.raises(ke.TopicAuthorizationFailedError, match="topic 't'.*grant this principal READ"):
        rig.held.raise_first()
    assert rig.subs.positions() == {u0: 11}  # the authorized topic got its position meanwhile


def test_offset_fetch_retriable_is_paced_then_succeeds():
    rig = Rig()
    assigned(rig, T0)
    rig.run(10_000.0, fetch_answer(14))
    assert 5 <= rig.count(OffsetFetchRequest) <= 20
    assert not rig.held.holds(("group",))
    rig.run(12_000.0, fetch_answer(0))
    assert rig.subs.positions() == {T0: 42}


# -- committed() ---------------------------------------------------------------------------------------


def test_committed_lookup_backs_off_on_retriable_and_fails_at_once_on_authorization():
    rig = Rig()
    event = FetchCommittedEvent(partitions=frozenset([T0]), deadline_ms=60_000)
    rig.commits.on_fetch_committed(event, 0.0)
    rig.run(5_000.0, fetch_answer(0, top=14))
    assert 4 <= rig.count(OffsetFetchRequest) <= 12 and not event.future.done
    assert event.cause == "last error CoordinatorLoadInProgressError"
    rig.run(7_000.0, fetch_answer(0, top=30))
    sent = rig.count(OffsetFetchRequest)
    with pytest.raises(ke.GroupAuthorizationFailedError, match="OffsetFetch for group 'g' failed: grant"):
        event.future.result()
    rig.run(9_000.0, fetch_answer(0, top=30))
    assert rig.count(OffsetFetchRequest) == sent
    assert not rig.held.holds(("group",))  # the caller got it: nothing held for an explicit lookup


# -- OffsetFetch under the consumer protocol (KIP-848): the member id and epoch, v9 -----------------------


class EpochMember:
    """The consumer-protocol member as the OffsetFetch reads it: the (member id, epoch) it may carry, or None
    where the spec's commit attribute says commits do not go out under the epoch (joining, fenced, stale)."""

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch
        self.machine = SimpleNamespace(attribute=lambda name: "open")

    def fetch_member(self):
        return None if self.epoch is None else ("member-1", self.epoch)


def group_answer(codes, offset: int = 42, seen: list | None = None):
    """A v8+ answer (one group), each call taking the next (group-level code, partition code); the members
    the requests carried are noted in ``seen``."""
    codes = list(codes)

    def answer(request):
        assert isinstance(request, OffsetFetchRequest) and request.groups, request
        (g,) = request.groups
        if seen is not None:
            seen.append((g.member_id, g.member_epoch))
        top, code = codes.pop(0) if len(codes) > 1 else codes[0]
        R = OffsetFetchResponse
        G = R.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        topics = answered_topics(T, T.OffsetFetchResponsePartitions, g.topics, code or top, offset)
        return R(throttle_time_ms=0, groups=[G(group_id=g.group_id, error_code=top, topics=topics)])

    return answer


def test_a_member_with_an_epoch_fetches_with_its_id_and_epoch_in_v9():
    rig = Rig()
    rig.commits.membership = EpochMember(7)
    assigned(rig, T0, T1)
    seen: list = []
    rig.run(1_000.0, group_answer([(0, 0)], seen=seen))
    assert seen == [("member-1", 7)] and rig.versions == [(9, 9)]
    assert rig.subs.positions() == {T0: 42, T1: 42}


def test_without_an_epoch_the_fetch_names_the_group_only_in_v7():
    rig = Rig()
    rig.commits.membership = EpochMember(None)  # joining, fenced or stale: no epoch the broker would take
    assigned(rig, T0)
    rig.run(1_000.0, fetch_answer(0))
    assert rig.versions == [(0, 7)] and rig.sent[0][1].group_id == "g"
    assert rig.subs.positions() == {T0: 42}


@pytest.mark.parametrize("code", [113, 110, 25])  # STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
def test_a_stale_or_fenced_epoch_on_the_positions_fetch_is_asked_again_with_the_epoch_held_then(code):
    rig = Rig()
    member = rig.commits.membership = EpochMember(3)
    assigned(rig, T0)
    seen: list = []
    answer = group_answer([(code, 0), (0, 0)], seen=seen)
    rig.run(1.0, answer)
    assert seen == [("member-1", 3)] and rig.subs.positions() == {}
    member.epoch = 4  # the next heartbeat's answer
    rig.run(2_000.0, answer)
    assert seen == [("member-1", 3), ("member-1", 4)]
    assert rig.subs.positions() == {T0: 42} and not rig.held.holds(("group",))


@pytest.mark.parametrize("code", [113, 110])
def test_a_committed_lookup_told_its_epoch_is_stale_or_fenced_is_retried_not_failed(code):
    rig = Rig()
    member = rig.commits.membership = EpochMember(3)
    event = FetchCommittedEvent(partitions=frozenset([T0]), deadline_ms=60_000)
    rig.commits.on_fetch_committed(event, 0.0)
    seen: list = []
    answer = group_answer([(code, 0), (0, 0)], offset=17, seen=seen)
    rig.run(1.0, answer)
    assert not event.future.done
    member.epoch = None if code == 110 else 4  # fenced: joining again, no epoch; stale: the next one
    rig.run(2_000.0, answer if code == 113 else fetch_answer(0, offset=17))
    assert event.future.result() == {T0: OffsetAndMetadata(17, "", -1)}
    assert seen[0] == ("member-1", 3) and rig.versions[-1] == ((9, 9) if code == 113 else (0, 7))


# -- per partition, never an older offset after a newer one ---------------------------------------------------


def offsets_sent(rig: Rig) -> list[int]:
    return [
        p.committed_offset
        for _, r in rig.sent
        if isinstance(r, OffsetCommitRequest)
        for t in r.topics
        for p in t.partitions
    ]


def scripted(*codes: int):
    """Answer the OffsetCommits with these codes in turn, then 0."""
    left = list(codes)

    def answer(request):
        return commit_answer(left.pop(0) if left else 0)(request)

    return answer


def async_commit(rig: Rig, offset: int, results: list) -> CommitEvent:
    event = CommitEvent(
        offsets={T0: OffsetAndMetadata(offset, "", -1)},
        sync=False,
        callback=lambda offsets, error: results.append((offsets[T0].offset, error)),
    )
    rig.commits.on_commit_event(event, rig.now)
    return event


def test_an_async_commit_is_never_retried_so_a_newer_one_is_never_overtaken():
    """The review's case: commit_async(5) answered COORDINATOR_LOAD_IN_PROGRESS, then commit_async(10). Sent
    5, 10, 5 before, and the broker ended at 5. As Java: the async commit is not retried, its callback gets
    the retriable error."""
    rig, results = Rig(), []
    async_commit(rig, 5, results)
    rig.run(10.0, scripted(14))
    async_commit(rig, 10, results)
    rig.run(3_000.0, scripted())
    assert offsets_sent(rig) == [5, 10]
    (five, five_error), (ten, ten_error) = (e.args for e in rig.commits._bg)
    assert five[T0].offset == 5 and isinstance(five_error, ke.CoordinatorLoadInProgressError)
    assert five_error.retriable and ten[T0].offset == 10 and ten_error is None


def test_a_retried_commit_leaves_out_partitions_a_newer_commit_was_sent_for():
    rig = Rig()
    older = rig.commit(offsets={T0: OffsetAndMetadata(5, "", -1), T1: OffsetAndMetadata(3, "", -1)})
    rig.run(1.0, scripted(14))  # T0 and T1 at 5 and 3: retriable, backing off
    newer = rig.commit(offsets={T0: OffsetAndMetadata(9, "", -1)})
    rig.run(5_000.0, scripted())
    assert older.future.done and older.future.result() is None and newer.future.result() is None
    sent = [
        (t.name, p.partition_index, p.committed_offset)
        for _, r in rig.sent
        if isinstance(r, OffsetCommitRequest)
        for t in r.topics
        for p in t.partitions
    ]
    assert sent == [("t", 0, 5), ("t", 1, 3), ("t", 0, 9), ("t", 1, 3)]  # the retry: T1 only
    # all of it overtaken: not sent again, and not a success either
    rig = Rig()
    older = rig.commit(offsets={T0: OffsetAndMetadata(5, "", -1)})
    rig.run(1.0, scripted(14))
    rig.commit(offsets={T0: OffsetAndMetadata(9, "", -1)})
    rig.run(5_000.0, scripted())
    assert offsets_sent(rig) == [5, 9]
    with pytest.raises(CommitFailedError, match="a newer commit of those partitions went out"):
        older.future.result()


def test_a_revocation_commit_is_retried_with_the_positions_of_each_attempt_and_ends_on_a_deleted_topic():
    rig = Rig(enable_auto_commit=True)
    rig.subs.assign([T0, T1])
    rig.subs.seek(T0, 5)
    rig.subs.seek(T1, 2)
    done: list = []
    rig.commits.commit_positions({T0: 5, T1: 2}, on_done=done.append)
    rig.run(1.0, scripted(14))
    rig.subs.seek(T0, 8)  # handed out meanwhile (before the partitions stopped fetching)
    rig.run(3_000.0, scripted())
    assert offsets_sent(rig) == [5, 2, 8, 2] and done == [None]
    # a partition of a deleted topic: final, the revocation goes on (it once waited 60 s)
    rig = Rig(enable_auto_commit=True)
    rig.subs.assign([T0])
    rig.subs.seek(T0, 5)
    rig.commits.commit_positions({T0: 5}, on_done=done.append)
    rig.run(3_000.0, scripted(3, 3, 3))
    assert rig.count(OffsetCommitRequest) == 1 and isinstance(done[-1], ke.UnknownTopicOrPartitionError)


def test_an_auto_commit_leaves_out_a_partition_the_user_is_committing():
    rig = Rig(enable_auto_commit=True, auto_commit_interval_ms=100)
    rig.subs.assign([T0, T1])
    rig.subs.seek(T0, 7)
    rig.subs.seek(T1, 4)
    rig.commit(offsets={T0: OffsetAndMetadata(3, "", -1)})  # the user's own, older: it must win
    rig.commits.start_auto_commit(-100.0)
    wait, out = rig.commits.poll(0.0)
    sent = sorted((p.partition_index, p.committed_offset) for o in out for t in o.request.topics for p in t.partitions)
    assert sent == [(0, 3), (1, 4)]  # the user's T0 at 3; the auto-commit's T1 only

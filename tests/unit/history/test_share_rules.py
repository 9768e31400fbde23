"""The share-group rules H, N, A and S (docs/histories.md, "Share groups") over hand-made histories: a clean
run passes, and each way a share group could break what its user relies on is reported by its rule."""

from __future__ import annotations

from typing import Any

from fsm_consumer.history import check

TOPIC = "work"
BASE = 1_800_000_000.0  # the wall clock at t = 0: one clock for every member


class Run:
    """Lines of share consumers of one group, written as the ShareConsumer writes them."""

    def __init__(self, group: str = "sg") -> None:
        self.group = group
        self.lines: list[dict[str, Any]] = []
        self.members: set[str] = set()

    def _line(self, who: str, t: float, event: str, **fields: Any) -> None:
        if who not in self.members:
            self.members.add(who)
            self.lines.append(
                dict(
                    t=0.0,
                    wall=BASE,
                    consumer=who,
                    client=who,
                    event="started",
                    kind="share",
                    group=self.group,
                    config={},
                )
            )
        self.lines.append(dict(t=float(t), wall=BASE + t / 1000.0, consumer=who, client=who, event=event, **fields))

    def hand(self, who: str, t: float, first: int, last: int, count: int = 1, lock: float = 10_000.0) -> Run:
        self._line(who, t, "share_handed", tp=[TOPIC, 0], records=[[first, last, count]], lock_until=lock)
        return self

    def ack(
        self, who: str, t: float, first: int, last: int, kind: str = "accept", sent: float | None = None, error=None
    ) -> Run:
        ago = None if sent is None else t - sent
        self._line(who, t, "share_ack", tp=[TOPIC, 0], acks=[[first, last, kind]], error=error, sent_ago_ms=ago)
        return self

    def lost(self, who: str, t: float, first: int, last: int, why: str = "its share session ended") -> Run:
        self._line(who, t, "share_lost", tp=[TOPIC, 0], offsets=[[first, last]], why=why)
        return self

    def closed(self, who: str, t: float) -> Run:
        self._line(who, t, "closed")
        return self

    def check(self, produced: int | None = None, **kw: Any):
        return check(self.lines, produced=None if produced is None else {TOPIC: {"0": produced}}, **kw)


def rules(result) -> set[str]:
    return {v.rule for v in result.violations}


def clean() -> Run:
    """Two members drain 20 records: a accepts 0..9, b 10..19, then both close."""
    return (
        Run()
        .hand("a", 100, 0, 9)
        .hand("b", 110, 10, 19)
        .ack("a", 250, 0, 9, sent=200)
        .ack("b", 260, 10, 19, sent=210)
        .closed("a", 300)
        .closed("b", 310)
    )


def test_a_clean_drain_passes_every_share_rule():
    result = clean().check(produced=20)
    assert result.ok, result.format()
    assert [result.status(r) for r in "HNAS"] == ["passed"] * 4
    assert result.status("L") == "passed"  # no consumer group read the topic: L has nothing to judge


def test_without_produced_counts_s_is_not_checked():
    result = clean().check()
    assert result.ok and result.status("S") == "not checked" and result.status("H") == "passed"


def test_a_record_given_to_a_second_member_while_the_first_holds_it_breaks_h():
    run = clean().hand("b", 150, 5, 5, count=2)  # a's lock runs to 10 s; a accepts it at 200
    result = run.check()
    assert "H" in rules(result), result.format()
    h = result.by_rule()["H"][0]
    assert h.offsets == (5, 5) and set(h.consumers) == {"a", "b"} and "while a held it" in h.message
    # and a's accept then took effect for a record b had been handed meanwhile: A
    assert any("was handed it at 150.0 ms" in v.message for v in result.by_rule()["A"]), result.format()


def test_after_the_lock_ran_out_another_member_may_have_it():
    run = Run().hand("a", 100, 0, 0, lock=1000).lost("a", 1001, 0, 0, "the acquisition lock ran out")
    run.hand("b", 1200, 0, 0, count=2).ack("b", 1300, 0, 0, sent=1250).closed("a", 2000).closed("b", 2000)
    result = run.check(produced=1)
    assert result.ok, result.format()


def test_a_lost_session_lets_the_record_go_before_its_member_knows():
    # the broker released a's records when its connection dropped; a learns it at 500, b had them at 300
    run = Run().hand("a", 100, 0, 0).hand("b", 300, 0, 0, count=2).lost("a", 500, 0, 0)
    run.ack("b", 400, 0, 0, sent=350).closed("a", 600).closed("b", 600)
    assert run.check(produced=1).ok, run.check(produced=1).format()
    # the same, but a's late accept reported as taken effect: a false success (A; and a held it meanwhile: H)
    run.ack("a", 450, 0, 0, sent=420)
    result = run.check(produced=1)
    assert "A" in rules(result), result.format()
    assert any("b was handed it at 300.0 ms" in v.message for v in result.by_rule()["A"])


def test_a_killed_member_binds_no_one_after_its_last_line():
    run = Run().hand("a", 100, 0, 0).hand("b", 400, 0, 0, count=2).ack("b", 500, 0, 0, sent=450).closed("b", 600)
    assert run.check(produced=1).ok  # a wrote nothing after 100 and never closed: killed
    early = Run().hand("a", 100, 0, 0).hand("a", 300, 1, 1).hand("b", 200, 0, 0, count=2)
    assert "H" in rules(early.check()), early.check().format()  # a was alive at 300, holding it


def test_released_records_come_back_counting_up():
    run = Run().hand("a", 100, 0, 0).ack("a", 200, 0, 0, "release", sent=150)
    run.hand("b", 300, 0, 0, count=2).ack("b", 400, 0, 0, sent=350).closed("a", 500).closed("b", 500)
    assert run.check(produced=1).ok


def test_a_delivery_that_does_not_count_up_breaks_n():
    run = Run().hand("a", 100, 0, 0).ack("a", 200, 0, 0, "release", sent=150).hand("b", 300, 0, 0, count=1)
    result = run.check()
    assert rules(result) == {"N"}, result.format()
    assert "at delivery 1, after a had it at delivery 1" in result.violations[0].message


def test_a_delivery_past_the_limit_breaks_n():
    run = Run()
    for n in range(1, 7):
        run.hand("a", n * 100, 0, 0, count=n).ack("a", n * 100 + 50, 0, 0, "release", sent=n * 100 + 10)
    result = run.check()
    assert rules(result) == {"N"} and "past the delivery limit 5" in result.violations[0].message
    assert run.check(delivery_limit=6).ok


def test_a_record_delivered_up_to_the_limit_is_settled_archived():
    run = Run()
    for n in range(1, 6):
        run.hand("a", n * 100, 0, 0, count=n).ack("a", n * 100 + 50, 0, 0, "release", sent=n * 100 + 10)
    run.closed("a", 1000)
    assert run.check(produced=1).ok
    short = Run()
    for n in range(1, 4):
        short.hand("a", n * 100, 0, 0, count=n).ack("a", n * 100 + 50, 0, 0, "release", sent=n * 100 + 10)
    result = short.check(produced=1)
    assert rules(result) == {"S"} and "never accepted or rejected" in result.violations[0].message


def test_an_accepted_record_is_never_handed_out_again():
    run = clean().hand("b", 400, 3, 3, count=2)
    result = run.check()
    assert "A" in rules(result) and "after a's ACCEPT of it took effect" in result.by_rule()["A"][0].message


def test_two_acceptances_of_one_record_break_a():
    run = clean().ack("b", 280, 3, 3, sent=270)
    result = run.check()
    assert "A" in rules(result)
    assert any("a record settles once" in v.message for v in result.by_rule()["A"]), result.format()


def test_an_acknowledgement_taking_effect_after_its_lock_ran_out_breaks_a():
    run = Run().hand("a", 100, 0, 0, lock=1000).ack("a", 1600, 0, 0, sent=1500).closed("a", 2000)
    result = run.check(produced=1)
    assert rules(result) == {"A"} and "after a's lock ran out at 1000.0 ms" in result.violations[0].message
    # reported failed, as the consumer reports it, it is no violation (and the record is not settled: S)
    honest = Run().hand("a", 100, 0, 0, lock=1000).ack("a", 1600, 0, 0, sent=1500, error="the lock ran out")
    assert rules(honest.check(produced=1)) == {"S"}


def test_an_acknowledgement_never_sent_cannot_take_effect():
    run = Run().hand("a", 100, 0, 0).ack("a", 200, 0, 0, sent=None)
    assert rules(run.check()) == {"A"} and "never sent" in run.check().violations[0].message


def test_a_renewed_record_stays_its_members_under_the_new_lock():
    run = Run().hand("a", 100, 0, 0, lock=1000).ack("a", 600, 0, 0, "renew", sent=500)
    run.hand("a", 700, 0, 0, count=1, lock=1500).ack("a", 1450, 0, 0, sent=1400).closed("a", 1600)
    assert run.check(produced=1).ok, run.check(produced=1).format()
    # another member given it after the first lock but within the renewed one: H
    stolen = Run().hand("a", 100, 0, 0, lock=1000).ack("a", 600, 0, 0, "renew", sent=500)
    stolen.hand("a", 700, 0, 0, count=1, lock=1500).hand("b", 1200, 0, 0, count=2).closed("a", 2000)
    assert "H" in rules(stolen.check()), stolen.check().format()


def test_a_group_reading_nothing_of_a_produced_partition_breaks_s():
    result = clean().check(produced=25)
    assert rules(result) == {"S"}
    assert result.violations[0].offsets == (20, 24) and "never handed out" in result.violations[0].message


def test_two_share_groups_are_judged_apart():
    other = Run("sg2").hand("c", 120, 0, 19)  # another group holds the same records at the same time
    result = check(clean().lines + other.lines)
    assert result.ok, result.format()


def test_a_share_line_without_its_fields_is_malformed():
    run = clean()
    bad = dict(
        t=400.0, wall=BASE + 0.4, consumer="a", client="a", event="share_handed", tp=[TOPIC, 0], records=[[3, 1, 1]]
    )
    run.lines.append(bad)
    result = run.check()
    assert not result.whole and result.summary["malformed"] == 1


def test_every_share_mutant_of_a_clean_history_is_caught(tmp_path):
    """The checker proved on a share history: each kind of violation injected into a clean run is reported by
    the rule it breaks."""
    import json

    from fsm_consumer.history import SHARE_MUTANT_KINDS, load, mutation_report

    run = Run()
    run.hand("a", 100, 0, 4).hand("b", 105, 5, 9)
    run.ack("a", 200, 0, 3, sent=150).ack("a", 201, 4, 4, "release", sent=150)
    run.hand("b", 300, 4, 4, count=2).ack("b", 400, 5, 9, sent=350).ack("b", 401, 4, 4, sent=350)
    run.hand("a", 500, 10, 14).ack("a", 600, 10, 14, sent=550).closed("a", 700).closed("b", 710)
    for who in ("a", "b"):
        with open(tmp_path / f"{who}.jsonl", "w") as f:
            for line in run.lines:
                if line["consumer"] == who:
                    f.write(json.dumps(line) + "\n")
    result = check(load(tmp_path), produced={TOPIC: {"0": 15}})
    assert result.ok, result.format()
    report = mutation_report(result, rounds=3)
    tried = {kind: counts[0] for kind, counts in report.by_kind().items()}
    assert all(tried[kind] >= 1 for kind in SHARE_MUTANT_KINDS), report.format()
    assert report.all_caught, report.format()


def test_check_history_takes_the_delivery_limit_and_names_a_bad_one(tmp_path, capsys):
    import json

    from fsm_consumer.cli import main

    run = Run()
    for n in range(1, 7):
        run.hand("a", n * 100, 0, 0, count=n).ack("a", n * 100 + 50, 0, 0, "release", sent=n * 100 + 10)
    run.closed("a", 1000)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(line) + "\n" for line in run.lines))
    produced = tmp_path / "produced.json"
    produced.write_text(json.dumps({TOPIC: {"0": 1}}))
    assert main(["check-history", str(tmp_path), "--produced", str(produced)]) == 1  # 6 deliveries, limit 5: N
    assert "past the delivery limit 5" in capsys.readouterr().out
    assert main(["check-history", str(tmp_path), "--produced", str(produced), "--delivery-limit", "6"]) == 0
    capsys.readouterr()
    assert main(["check-history", str(tmp_path), "--delivery-limit", "zero"]) == 2
    assert "--delivery-limit takes a count >= 1, got 'zero'" in capsys.readouterr().err


def test_a_record_handed_out_after_its_own_lock_ran_out_breaks_h():
    run = Run().hand("a", 1500, 0, 0, lock=1000).ack("a", 1700, 0, 0, sent=1600, error="the lock ran out")
    result = run.check()
    assert rules(result) == {"H"} and "after its lock ran out at 1000.0 ms" in result.violations[0].message


def test_a_record_whose_holder_was_killed_acknowledging_it_is_settled_on_the_brokers_word_only():
    """b accepted record 10 and was killed before the answer came back: no outcome in its history. With the
    broker saying every record below 11 is settled, S takes its word for that one record, and for no record a
    live member left without an outcome."""
    run = Run().hand("a", 100, 0, 9).ack("a", 200, 0, 9, sent=150).hand("b", 210, 10, 10).closed("a", 300)
    assert rules(run.check(produced=11)) == {"S"}
    result = run.check(produced=11, share_settled={(TOPIC, 0): 11})
    assert result.ok, result.format()
    assert "1 record(s) settled on the broker's word only" in result.summary["rules"]["S"]["note"]
    run.closed("b", 400)  # b lived on and closed: it must have reported the outcome itself
    assert rules(run.check(produced=11, share_settled={(TOPIC, 0): 11})) == {"S"}


def test_an_acceptance_whose_answer_was_lost_with_the_connection_is_settled_on_the_brokers_word_only():
    """b's ACCEPT went out, then its connection closed (a broker restart): reported failed unanswered; the broker
    had applied it (the record never came back). S takes the broker's word for it, not for one the broker
    answered with an error."""
    run = Run().hand("a", 100, 0, 9).ack("a", 200, 0, 9, sent=150).hand("b", 210, 10, 10)
    run._line("b", 300, "share_lost", tp=[TOPIC, 0], offsets=[[10, 10]], why="its share session ended")
    run._line(
        "b",
        300,
        "share_ack",
        tp=[TOPIC, 0],
        acks=[[10, 10, "accept"]],
        error="its share session ended",
        answered=False,
        sent_ago_ms=80.0,
    )
    run.closed("a", 400).closed("b", 400)
    assert rules(run.check(produced=11)) == {"S"}
    assert run.check(produced=11, share_settled={(TOPIC, 0): 11}).ok
    refused = Run().hand("a", 100, 0, 9).ack("a", 200, 0, 9, sent=150).hand("b", 210, 10, 10)
    refused.ack("b", 300, 10, 10, sent=250, error="INVALID_RECORD_STATE (121)").closed("a", 400).closed("b", 400)
    assert rules(refused.check(produced=11, share_settled={(TOPIC, 0): 11})) == {"S"}


def test_a_redelivery_across_a_broker_restart_may_keep_its_count_on_the_brokers_word_only():
    """Kafka writes a delivery count with the record's acknowledgement: acquired by a, its ACCEPT lost with the
    connection when the broker restarted, the record comes back at delivery 1. N allows it only when a restart
    lies between the two hand-outs (--broker-restarts), and says how many it allowed."""
    run = Run().hand("a", 100, 0, 0)
    run._line(
        "a",
        300,
        "share_ack",
        tp=[TOPIC, 0],
        acks=[[0, 0, "accept"]],
        error="its share session ended",
        answered=False,
        sent_ago_ms=150.0,
    )
    run.hand("a", 2000, 0, 0, count=1).ack("a", 2100, 0, 0, sent=2050).closed("a", 2200)
    assert rules(run.check(produced=1)) == {"N"}
    result = run.check(produced=1, broker_restarts=[(200.0, 1500.0)])
    assert result.ok, result.format()
    assert (
        "1 redelivery(ies) at no higher a count across the broker's 1 restart(s)"
        in result.summary["rules"]["N"]["note"]
    )
    assert rules(run.check(produced=1, broker_restarts=[(2500.0, 3000.0)])) == {"N"}  # a restart after: no excuse

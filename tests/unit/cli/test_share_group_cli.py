"""`fsm-consumer share-group`: its arguments, its tables and JSON, and its errors as one line and an exit code,
with a stand-in for ShareGroupAdmin (no broker)."""

from __future__ import annotations

import importlib
import json

import kafka.errors as ke
import pytest

from fsm_consumer import cli
from fsm_consumer.errors import ConfigError
from fsm_consumer.share._admin import (
    GroupConfigEntry,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsets,
)
from fsm_consumer.structs import TopicPartition

sg = importlib.import_module("fsm_consumer.cli._share_group")  # the package has a function of that name
TP = TopicPartition
MEMBER = "6f1c2a3e-0d4b-4c1e-9a57-2f3e4d5c6b7a"
DESCRIPTION = ShareGroupDescription(
    group_id="orders-share",
    state="Stable",
    group_epoch=4,
    assignment_epoch=4,
    assignor="simple",
    members=(
        ShareMemberDescription(
            member_id=MEMBER,
            client_id="worker-1",
            host="/127.0.0.1",
            epoch=4,
            rack_id=None,
            subscribed_topics=("orders", "payments"),
            assignment=(TP("orders", 0), TP("orders", 1), TP("payments", 3)),
        ),
    ),
)
OFFSETS = {
    TP("orders", 0): SharePartitionOffsets("orders", 0, 120, 123, 3),
    TP("orders", 1): SharePartitionOffsets("orders", 1, None, 50, None),
}


class FakeAdmin:
    """ShareGroupAdmin's surface, answering from the module's constants; records what it was asked."""

    calls: list[tuple] = []
    error: BaseException | None = None
    made_with: dict = {}

    def __init__(self, bootstrap_servers, *, timeout_ms=None, **config):
        FakeAdmin.made_with = {"bootstrap_servers": bootstrap_servers, "timeout_ms": timeout_ms, **config}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        FakeAdmin.calls.append(("close",))

    def _answer(self, call, value):
        FakeAdmin.calls.append(call)
        if FakeAdmin.error is not None:
            raise FakeAdmin.error
        return value

    def describe_group(self, group):
        return self._answer(("describe_group", group), DESCRIPTION)

    def describe_offsets(self, group):
        return self._answer(("describe_offsets", group), OFFSETS)

    def set_group_config(self, group, settings):
        return self._answer(("set_group_config", group, dict(settings)), None)

    def group_config_entries(self, group):
        entries = [
            GroupConfigEntry("share.auto.offset.reset", "earliest", "group"),
            GroupConfigEntry("share.isolation.level", "read_uncommitted", "default"),
        ]
        return self._answer(("group_config_entries", group), entries)

    def reset_offsets(self, group, topic, to):
        return self._answer(("reset_offsets", group, topic, to), {TP(topic, 0): 7, TP(topic, 1): 9})

    def delete_offsets(self, group, topics):
        return self._answer(("delete_offsets", group, list(topics)), None)


@pytest.fixture
def fake(monkeypatch):
    FakeAdmin.calls, FakeAdmin.error, FakeAdmin.made_with = [], None, {}
    monkeypatch.setattr("fsm_consumer.share._admin.ShareGroupAdmin", FakeAdmin)
    return FakeAdmin


def run(argv, capsys):
    code = cli.main(["share-group", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- rendering ----------------------------------------------------------------------------------------------


def test_a_table_aligns_its_columns_and_shows_none_as_a_dash():
    text = sg.table(["A", "LONGER"], [["x", None], ["wide-value", 3]])
    lines = text.splitlines()
    assert lines == ["A           LONGER", "x           -", "wide-value  3"]


def test_an_assignment_is_grouped_by_topic():
    assert sg.assignment_text([TP("b", 2), TP("a", 1), TP("a", 0)]) == "a:0,1 b:2"
    assert sg.assignment_text([]) == "-"


def test_the_description_shows_the_group_its_members_and_each_partitions_lag():
    text = sg.render_description(DESCRIPTION, OFFSETS)
    head, members, offsets = text.split("\n\n")
    assert head.startswith("share group orders-share: state Stable, group epoch 4")
    assert "assignor simple, 1 member(s)" in head
    assert members.splitlines()[0].split() == ["MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT"]
    assert members.splitlines()[1].split() == [MEMBER, "worker-1", "/127.0.0.1", "4", "orders:0,1", "payments:3"]
    rows = [line.split() for line in offsets.splitlines()]
    assert rows == [
        ["TOPIC", "PARTITION", "START-OFFSET", "END-OFFSET", "LAG"],
        ["orders", "0", "120", "123", "3"],
        ["orders", "1", "-", "50", "-"],
    ]


def test_an_empty_group_says_it_has_no_partitions():
    empty = ShareGroupDescription("g", "Empty", 2, 2, "simple", ())
    text = sg.render_description(empty, {})
    assert "0 member(s)" in text and "MEMBER-ID" not in text and "no partitions" in text


def test_the_json_form_has_every_field():
    doc = json.loads(json.dumps(sg.description_json(DESCRIPTION, OFFSETS)))
    assert doc["state"] == "Stable" and doc["assignor"] == "simple"
    (member,) = doc["members"]
    assert member["member_id"] == MEMBER and member["assignment"][2] == {"topic": "payments", "partition": 3}
    assert doc["offsets"][1] == {"topic": "orders", "partition": 1, "start_offset": None, "end_offset": 50, "lag": None}


def test_the_settings_table_says_where_each_value_comes_from():
    text = sg.render_config([GroupConfigEntry("share.auto.offset.reset", "earliest", "group")])
    assert text.splitlines()[1].split() == ["share.auto.offset.reset", "earliest", "group"]


@pytest.mark.parametrize("bad", ["novalue", "=x", " =x"])
def test_settings_must_be_key_equals_value(bad):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        sg.parse_settings([bad])
    assert sg.parse_settings(["a.b = 1", "c=x=y", "d="]) == {"a.b": "1", "c": "x=y", "d": ""}


# -- arguments ---------------------------------------------------------------------------------------------


def test_it_is_a_command_with_a_line_in_the_help(capsys):
    assert "share-group" in cli._COMMANDS and "share-group" in cli._SUMMARIES
    with pytest.raises(SystemExit) as done:
        cli.main(["share-group", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: fsm-consumer share-group") and "``" not in out
    for action in ("describe", "config", "reset-offsets", "delete-offsets"):
        assert action in out


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no action
        ["describe"],  # no group
        ["reset-offsets", "g", "--topic", "t"],  # no --to-*
        ["reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["reset-offsets", "g", "--to-offset", "3"],  # no --topic
        ["reset-offsets", "g", "--topic", "t", "--to-offset", "x"],
        ["delete-offsets", "g"],
        ["config", "g", "--set", "novalue"],
    ],
)
def test_wrong_arguments_are_usage_errors(argv, fake, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["share-group", *argv])
    assert done.value.code == 2
    assert "usage: fsm-consumer share-group" in capsys.readouterr().err
    assert fake.calls == []


def test_describe_prints_the_tables(fake, capsys):
    code, out, err = run(["describe", "orders-share", "--bootstrap-server", "h:1", "--timeout", "5"], capsys)
    assert code == 0 and err == ""
    assert MEMBER in out and "orders  0          120           123         3" in out
    assert fake.made_with == {"bootstrap_servers": "h:1", "timeout_ms": 5000}
    assert fake.calls == [("describe_group", "orders-share"), ("describe_offsets", "orders-share"), ("close",)]


def test_describe_json_is_one_document(fake, capsys):
    code, out, _ = run(["describe", "orders-share", "--json", "-b", "h:1"], capsys)
    assert code == 0 and json.loads(out)["offsets"][0]["lag"] == 3


def test_connection_settings_pass_through(fake, capsys):
    code, _, _ = run(["describe", "g", "-X", "security_protocol=SSL", "-X", "request_timeout_ms=5000"], capsys)
    assert code == 0
    assert fake.made_with["security_protocol"] == "SSL" and fake.made_with["request_timeout_ms"] == 5000
    assert fake.made_with["bootstrap_servers"] == "localhost:9092"


def test_config_sets_then_shows(fake, capsys):
    code, out, _ = run(
        ["config", "g", "--set", "share.auto.offset.reset=earliest", "--delete", "share.isolation.level"], capsys
    )
    assert code == 0
    assert fake.calls[0] == (
        "set_group_config",
        "g",
        {"share.auto.offset.reset": "earliest", "share.isolation.level": None},
    )
    assert "share.auto.offset.reset  earliest" in out
    code, out, _ = run(["config", "g", "--json"], capsys)
    assert json.loads(out) == {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_uncommitted"}
    assert ("set_group_config", "g", {}) not in fake.calls


@pytest.mark.parametrize(
    ("flag", "to"), [(["--to-earliest"], "earliest"), (["--to-latest"], "latest"), (["--to-offset", "7"], 7)]
)
def test_reset_offsets(flag, to, fake, capsys):
    code, out, _ = run(["reset-offsets", "g", "--topic", "orders", *flag], capsys)
    assert code == 0 and fake.calls[0] == ("reset_offsets", "g", "orders", to)
    assert out.splitlines()[1].split() == ["orders", "0", "7"]


def test_delete_offsets(fake, capsys):
    code, out, _ = run(["delete-offsets", "g", "--topic", "b", "--topic", "a"], capsys)
    assert code == 0 and fake.calls[0] == ("delete_offsets", "g", ["b", "a"])
    assert "'g'" in out and "a, b" in out


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ke.GroupIdNotFoundError("describing share group 'nope' failed (Group nope not found): check the group id"), 1),
        (ke.NonEmptyGroupError("altering the offsets of share group 'g' failed:\nthe group has active members"), 1),
        (ke.UnsupportedVersionError("this broker does not support share groups"), 1),
        (ConfigError("'foo' is not a share group setting", key="foo"), 2),
    ],
)
def test_errors_are_one_line_and_an_exit_code(error, code, fake, capsys):
    fake.error = error
    got, out, err = run(["describe", "nope"], capsys)
    assert got == code and out == ""
    assert err.count("\n") == 1 and err.startswith("fsm-consumer share-group describe: ")
    assert "Traceback" not in err
    assert fake.calls[-1] == ("close",)  # closed on the way out

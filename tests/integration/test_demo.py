"""The README's main command runs end to end on the embedded broker and leaves nothing behind."""

import re

import psutil
import pytest

from fsm_consumer.cli import main

pytestmark = pytest.mark.integration


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_demo_fills_a_topic_and_renders_diagrams(tmp_path, capsys):
    assert main(["demo", "--records", "600", "--partitions", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "topic 'demo': 600 records" in out
    assert "the broker is stopped" in out
    for machine in ("background", "connection", "membership"):
        for suffix in (".dot", ".svg", ".mmd"):
            assert (tmp_path / f"{machine}{suffix}").stat().st_size > 100
    pid = int(re.search(r"Tansu pid (\d+)", out).group(1))
    assert _gone(pid), "the demo's broker is stopped"  # its own pid: other brokers may run meanwhile


def test_demo_without_graphviz_still_writes_dot_and_mermaid(tmp_path, capsys, monkeypatch):
    import fsm_consumer.cli._demo as demo_module

    monkeypatch.setattr(demo_module, "have_dot", lambda: False)
    assert main(["demo", "--records", "50", "--partitions", "1", "--out", str(tmp_path)]) == 0
    assert "dot is not installed" in capsys.readouterr().out
    assert (tmp_path / "membership.dot").is_file() and (tmp_path / "membership.mmd").is_file()
    assert not (tmp_path / "membership.svg").exists()


@pytest.mark.brokers("kafka")
def test_demo_on_apache_kafka(broker, tmp_path, capsys):
    """``--broker kafka``: the same job on a KafkaBroker of its own (``broker`` only makes sure the jars are
    there, or skips saying why), stopped at the end."""
    assert main(["demo", "--broker", "kafka", "--records", "600", "--partitions", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "broker: Apache Kafka 4." in out and "topic 'demo': 600 records" in out
    assert "fsm_consumer read 600 records" in out
    pid = int(re.search(r"Apache Kafka [\d.]+ pid (\d+)", out).group(1))
    assert pid != broker.pid and _gone(pid), "the demo's own Kafka is stopped"


def test_demo_on_kafka_without_its_jars_says_how_to_fetch_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FSM_CONSUMER_CACHE", str(tmp_path / "empty-cache"))
    assert main(["demo", "--broker", "kafka", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "fsm-consumer broker fetch --kind kafka" in err or "no java on PATH" in err, err

"""``fsm-consumer consume`` against the embedded broker, run as the user runs it (a subprocess)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration


def _cli(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fsm_consumer.cli", "consume", *args], capture_output=True, text=True, timeout=timeout
    )


def _json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_max_records_as_json(broker, make_topic, send):
    topic = make_topic()
    send(topic, [{"key": b"k%d" % i, "value": b"v%d" % i, "headers": [("h", b"x"), ("h", None)]} for i in range(10)])
    done = _cli("-b", broker.bootstrap_servers, "-t", topic, "--max", "4", "-f", "json")
    assert done.returncode == 0, done.stderr
    lines = _json_lines(done.stdout)
    assert [(d["partition"], d["offset"], d["key"], d["value"]) for d in lines] == [
        (0, i, f"k{i}", f"v{i}") for i in range(4)
    ]
    assert all(d["topic"] == topic and d["headers"] == [["h", "x"], ["h", None]] for d in lines)
    assert isinstance(lines[0]["timestamp"], int) and lines[0]["timestamp"] > 0
    assert "% 4 records" in done.stderr


def test_from_offset_partition_and_kcat_format(broker, make_topic, send):
    topic = make_topic(partitions=2)
    send(topic, [{"partition": i % 2, "value": b"p%d-%d" % (i % 2, i // 2)} for i in range(12)])
    done = _cli(
        "-b", broker.bootstrap_servers, "-t", topic, "-p", "1", "--from", "3", "--max", "2", "-f", "%t|%p|%o|%s"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{topic}|1|3|p1-3", f"{topic}|1|4|p1-4"]

    # without --max it stops when idle; -p given twice takes both partitions
    done = _cli(
        "-b", broker.bootstrap_servers, "-t", topic, "-p", "0", "-p", "1", "--idle-exit-ms", "300", "-f", "json"
    )
    assert done.returncode == 0, done.stderr
    got = sorted((d["partition"], d["offset"]) for d in _json_lines(done.stdout))
    assert got == sorted((p, o) for p in (0, 1) for o in range(6))


def test_from_latest_skips_what_was_there(broker, make_topic, send):
    topic = make_topic()
    send(topic, [{"value": b"old-%d" % i} for i in range(5)])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fsm_consumer.cli",
            "consume",
            "-b",
            broker.bootstrap_servers,
            "-t",
            topic,
            "--from",
            "latest",
            "--max",
            "2",
            "--idle-exit-ms",
            "0",
            "-f",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # it is positioned at some moment we cannot see: keep producing until it has its two records
        deadline, i = time.monotonic() + 20, 0
        while proc.poll() is None and time.monotonic() < deadline:
            send(topic, [{"value": b"new-%d" % i}], each=True)
            i += 1
            time.sleep(0.05)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    lines = _json_lines(out)
    assert len(lines) == 2
    assert all(d["value"].startswith("new-") for d in lines)
    assert lines[0]["offset"] >= 5 and lines[1]["offset"] == lines[0]["offset"] + 1


def test_without_bootstrap_servers_exits_2():
    done = _cli("-t", "anything")
    assert done.returncode == 2
    assert "--bootstrap-servers is required" in done.stderr
    assert done.stdout == ""


def test_unreachable_broker_exits_1_saying_which_and_why():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        server = f"127.0.0.1:{s.getsockname()[1]}"
    done = _cli("-b", server, "-t", "x", "-X", "bootstrap_timeout_ms=500")
    assert done.returncode == 1
    assert (
        f"fsm-consumer consume: no broker answered within bootstrap_timeout_ms (500 ms): could not bootstrap "
        f"from bootstrap_servers '{server}'" in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_unknown_topic_exits_1_and_creates_nothing(broker, make_consumer):
    name = "cli-no-such-topic-9f1c"
    done = _cli("-b", broker.bootstrap_servers, "-t", name)
    assert done.returncode == 1
    assert f"topic {name!r} not found" in done.stderr
    assert make_consumer(allow_auto_create_topics=False).partitions_for_topic(name) == set()


def test_bad_config_exits_2(broker):
    done = _cli("-b", broker.bootstrap_servers, "-t", "x", "-X", "no_such_key=1")
    assert done.returncode == 2
    assert "no_such_key" in done.stderr

"""`fsm-consumer broker start`, the broker a user starts for their own code: it says where it is, creates
the topics asked for, serves the README's ten lines, and stops cleanly on Ctrl-C (its port free again)."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from fsm_consumer.broker._ports import free_loopback_port, port_in_use

README = Path(__file__).resolve().parents[2] / "README.md"


def ten_lines() -> str:
    """The README's ten lines, as written."""
    text = README.read_text()
    start = text.index("## In ten lines")
    return re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)


@pytest.fixture
def started():
    port = free_loopback_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "fsm_consumer.cli", "broker", "start", "--port", str(port), "--topic", "events:3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        while not any(line.startswith("bootstrap_servers=") for line in lines):
            line = process.stdout.readline()
            assert line, f"broker start ended: {lines} {process.stderr.read()}"
            lines.append(line)
        yield process, port, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def test_the_readmes_ten_lines_read_what_was_produced_to_broker_start(started, caplog):
    """As written, on the embedded broker: Tansu holds the JoinGroup half of the default 45 s session, and the
    log says so (a warning after 5 s: what the consumer waits for, and why) before the records come."""
    caplog.set_level(logging.WARNING, "fsm_consumer.membership")
    process, port, lines = started
    address = f"127.0.0.1:{port}"
    assert f"bootstrap_servers={address}\n" in lines and "  topic events: 3 partition(s)\n" in lines
    producer = KafkaProducer(bootstrap_servers=address)
    for i in range(6):
        producer.send("events", key=b"k%d" % i, value=b"hello %d" % i)
    producer.flush()
    producer.close()
    code = ten_lines().replace("127.0.0.1:9092", address)
    assert code.count("while True:") == 1  # run as written, but stopped once every record was printed
    code = code.replace("while True:", "while len(seen) < 6 and time.monotonic() < deadline:")
    code = code.replace("print(tp.partition, r.offset, r.key, r.value)", "seen.add(r.value)")
    seen: set = set()
    exec(code, {"seen": seen, "time": time, "deadline": time.monotonic() + 90})  # noqa: S102 - the README's own code
    assert seen == {b"hello %d" % i for i in range(6)}
    said = [r.getMessage() for r in caplog.records if "to answer JoinGroup, no records until then" in r.getMessage()]
    assert said and "Tansu, the embedded broker, for half of session_timeout_ms (22.5 s here" in said[0], said

    process.send_signal(signal.SIGINT)  # Ctrl-C
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0 and out.strip().endswith("stopped") and "Traceback" not in err
    assert not port_in_use(port)


def test_a_taken_port_and_a_bad_topic_are_one_line_each(started):
    _, port, _ = started
    done = subprocess.run(
        [sys.executable, "-m", "fsm_consumer.cli", "broker", "start", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and f"port {port} is taken" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "fsm_consumer.cli", "broker", "start", "--topic", "events:none"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "NAME:PARTITIONS" in done.stderr and len(done.stderr.splitlines()) == 1

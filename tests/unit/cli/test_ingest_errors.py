"""How ``fsm-consumer ingest`` reports what goes wrong (issue 49): a plain line and a non-zero exit, the
traceback only with --debug; a Java exception by its own message; Ctrl-C as a request to stop."""

from __future__ import annotations

import os
import signal

import pytest

import fsm_consumer.cli._ingest as _ingest
from fsm_consumer.cli._ctrl_c import ctrl_c_stops
from fsm_consumer.cli._ingest_preflight import Refused


def _failing(exc: BaseException):
    def run(args, extra):
        raise exc

    return run


def test_an_error_is_one_line_and_a_hint_and_debug_shows_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr(_ingest, "_run", _failing(RuntimeError("the query failed: boom\n\tat some.Java(line 1)")))
    assert _ingest.ingest([]) == 1
    err = capsys.readouterr().err
    assert err == "error: the query failed: boom\n(run again with --debug for the traceback)\n"
    with pytest.raises(RuntimeError, match="boom"):
        _ingest.ingest(["--debug"])


def test_a_refused_check_exits_2_and_an_interrupt_before_the_query_130(monkeypatch, capsys):
    monkeypatch.setattr(_ingest, "_run", _failing(Refused("topic 'x' does not exist at h:1")))
    assert _ingest.ingest([]) == 2
    assert capsys.readouterr().err == "error: topic 'x' does not exist at h:1\n"
    monkeypatch.setattr(_ingest, "_run", _failing(KeyboardInterrupt()))
    assert _ingest.ingest([]) == 130
    assert "interrupted before the query started: nothing was written" in capsys.readouterr().err


def test_a_java_exception_is_said_by_its_own_message():
    class JavaException:
        def getMessage(self):
            return "[PATH_NOT_FOUND] Path does not exist: file:/nowhere.\nmore"

    class Py4JJavaError(Exception):
        java_exception = JavaException()

        def __str__(self):
            return "An error occurred while calling o42.start.\n: org.apache.spark..."

    assert _ingest._plain(Py4JJavaError()) == "[PATH_NOT_FOUND] Path does not exist: file:/nowhere."
    assert _ingest._plain(ValueError("")) == "ValueError"


def test_a_bad_option_pair_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        _ingest.ingest(["--option", "no-equals-sign"])
    assert exit_.value.code == 2
    assert "--option 'no-equals-sign' is not KEY=VALUE" in capsys.readouterr().err


def test_the_first_ctrl_c_asks_to_stop_and_the_second_interrupts(capsys):
    told = []
    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_stops(first=lambda: told.append(1)) as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop() and told == [1]
        assert "stopping: the batch under way is abandoned" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before

"""`fsm-consumer` explains itself: its help on stdout lists every command with a line each, `--version`,
`help COMMAND`, and a clear message (with a guess) for a command it does not have."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fsm_consumer import cli
from fsm_consumer._version import __version__


@pytest.mark.parametrize("asked", [["--help"], ["-h"], ["help"]])
def test_help_lists_every_command_with_a_line_each_on_stdout(asked, capsys):
    assert cli.main(asked) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("usage: fsm-consumer COMMAND")
    for name in cli._COMMANDS:
        [line] = [line for line in out.splitlines() if line.strip().startswith(name + " ")]
        assert len(line.split(maxsplit=1)[1]) > 10  # a description, not just the name


def test_every_command_has_its_line():
    assert set(cli._SUMMARIES) == set(cli._COMMANDS)


def test_no_arguments_shows_the_help_on_stderr_and_fails(capsys):
    assert cli.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage: fsm-consumer COMMAND" in err and "ingest" in err


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fsm-consumer {__version__}"


def test_an_unknown_command_says_so_and_guesses(capsys):
    assert cli.main(["ingset"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "no command 'ingset'" in err and "did you mean 'ingest'" in err
    assert cli.main(["frobnicate"]) == 2
    assert "did you mean" not in capsys.readouterr().err


@pytest.mark.parametrize("name", ["check-specs", "diagrams", "spec-coverage", "demo", "consume", "timeline"])
def test_a_commands_help_names_it_under_fsm_consumer(name, capsys):
    try:
        code = cli.main(["help", name])
    except SystemExit as done:  # argparse's --help
        code = done.code
    assert code == 0
    assert capsys.readouterr().out.startswith(f"usage: fsm-consumer {name}")


def test_consume_shows_its_required_options_as_required(capsys):
    with pytest.raises(SystemExit):
        cli.main(["consume", "--help"])
    assert capsys.readouterr().out.startswith("usage: fsm-consumer consume -b HOST:PORT -t TOPIC [options]")


@pytest.mark.parametrize("name", ["consume", "demo", "broker", "ingest"])
def test_a_commands_help_is_plain_text(name, capsys):
    try:
        cli.main([name, "--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    assert out.startswith(f"usage: fsm-consumer {name}") and "``" not in out


def test_ingest_without_java_says_to_install_it_before_starting_anything(monkeypatch, capsys):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # python, and no java
    from fsm_consumer.broker import _kafka_jars

    started = []
    monkeypatch.setattr("fsm_consumer.broker.start_broker", lambda *a, **k: started.append(a))
    assert _kafka_jars.shutil.which("java") is None
    assert cli.main(["ingest"]) == 2
    err = capsys.readouterr().err
    assert "Spark needs Java 17" in err and "JAVA_HOME" in err and len(err.splitlines()) == 1
    assert started == []  # nothing started: no broker, no Spark

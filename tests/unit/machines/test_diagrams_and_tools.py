"""Diagrams are deterministic and mark timeouts; the spec tools report what they should."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsm_consumer.cli import main
from fsm_consumer.machines import shipped_spec, specs_dir
from fsm_consumer.machines._diagram import render_all, render_dot, render_mermaid

ROOT = Path(__file__).resolve().parents[3]

# Drawing an SVG needs Graphviz's dot, a system program pip cannot install: skipped without it, saying how to
# get it, unless the run requires it (CI does: FSM_REQUIRE_GRAPHVIZ=1)
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None and os.environ.get("FSM_REQUIRE_GRAPHVIZ") != "1",
    reason="Graphviz's dot is not installed (apt-get install graphviz, or brew install graphviz): no SVG to draw",
)


def test_dot_marks_timeouts_dashed_with_duration():
    dot = render_dot(shipped_spec("membership"))
    edge = next(line for line in dot.splitlines() if "revocation_timed_out" in line)
    assert "style=dashed" in edge and "after revocation_timeout" in edge
    plain = next(line for line in dot.splitlines() if "revoke_acked" in line)
    assert "dashed" not in plain
    assert "peripheries=2" in next(line for line in dot.splitlines() if line.strip().startswith("fatal"))


def test_wildcard_drawn_once_from_any_state():
    dot = render_dot(shipped_spec("background"))
    assert sum("crash" in line for line in dot.splitlines()) == 1
    assert "__any -> failed" in dot


def test_mermaid_lists_every_transition():
    spec = shipped_spec("connection")
    mmd = render_mermaid(spec)
    assert mmd.splitlines()[3] == "stateDiagram-v2"
    assert "backoff --> disconnected: backoff_elapsed (timeout: after reconnect_backoff)" in mmd
    assert "connecting --> tls_hello: connected [uses_tls]" in mmd
    assert "closed --> [*]" in mmd


@needs_dot
@pytest.mark.parametrize(
    "name",
    [
        "background",
        "connection",
        "consumer_membership",
        "fetch",
        "membership",
        "parallel",
        "share_batch",
        "share_fetch_pacing",
        "share_membership",
        "share_session",
    ],
)
def test_rendering_is_deterministic(name):
    spec = shipped_spec(name)
    assert render_all(spec) == render_all(spec)
    assert "<svg" in render_all(spec)[".svg"]


def test_committed_diagrams_are_current(capsys):
    assert main(["diagrams", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


@needs_dot
def test_check_names_stale_and_missing_files(tmp_path, capsys):
    specs = tmp_path / "specs"
    shutil.copytree(specs_dir(), specs)
    out = tmp_path / "diagrams"
    assert main(["diagrams", "--specs", str(specs), "--out", str(out)]) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(first) == 3 * 10  # .dot, .svg, .mmd of each spec
    assert main(["diagrams", "--specs", str(specs), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first  # byte-identical rerun
    capsys.readouterr()
    text = (specs / "background.yaml").read_text().replace("dest: discovery_backoff}", "dest: initialized}", 1)
    (specs / "background.yaml").write_text(text)
    (out / "membership.mmd").unlink()
    assert main(["diagrams", "--specs", str(specs), "--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert "background.dot (differs from its spec)" in err and "membership.mmd (missing)" in err


def test_check_specs_prints_one_line_per_machine(capsys):
    assert main(["check-specs"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "background",
        "connection",
        "consumer_membership",
        "fetch",
        "membership",
        "parallel",
        "share_batch",
        "share_fetch_pacing",
        "share_membership",
        "share_session",
    ]
    assert lines[0].startswith("background: 8 states, 12 transitions, 3 timeouts")


def test_check_specs_fails_on_a_bad_spec(tmp_path, capsys):
    shutil.copytree(specs_dir(), tmp_path / "specs")
    (tmp_path / "specs" / "connection.yaml").write_text("machine: connection\ninitial: x\n")
    assert main(["check-specs", "--specs", str(tmp_path / "specs")]) == 1
    assert "connection.yaml:1:" in capsys.readouterr().err


def test_spec_coverage_reports_missing_and_percent(tmp_path, capsys):
    spec = shipped_spec("background")
    hits = {str(t.index): {"unit": 1} for t in spec.transitions if t.trigger != "crash"}
    hits[str(spec.transitions[0].index)] = {"integration": 2}
    (tmp_path / "records-1.json").write_text(json.dumps({"machines": {"background": hits}}))
    code = main(["spec-coverage", "--records", str(tmp_path), "--machines", "background", "--fail-under", "100"])
    out = capsys.readouterr().out
    assert code == 1
    assert "background: 11/12 transitions exercised (91.7%)" in out
    assert "never fired: * --crash--> failed" in out
    assert main(["spec-coverage", "--records", str(tmp_path), "--machines", "background", "--kind", "integration"]) == 0
    assert "1/12" in capsys.readouterr().out


def test_spec_coverage_per_broker_and_the_gaps_between_brokers(tmp_path, capsys):
    spec = shipped_spec("background")
    first, second = spec.transitions[0], spec.transitions[1]
    hits = {
        str(first.index): {"integration": 2, "broker:tansu": 1, "broker:kafka": 1},
        str(second.index): {"integration": 1, "broker:tansu": 1},
    }
    (tmp_path / "records-1.json").write_text(json.dumps({"machines": {"background": hits}}))
    base = ["spec-coverage", "--records", str(tmp_path), "--machines", "background"]
    assert main([*base, "--broker", "kafka"]) == 0
    assert "background: 1/12 transitions exercised (8.3%) on kafka" in capsys.readouterr().out
    assert main([*base, "--compare-brokers", "tansu,kafka"]) == 1
    out = capsys.readouterr().out
    assert "fired by broker tests on tansu 2, kafka 1" in out
    assert f"never fired on kafka (fired on another broker): {second.label}" in out
    assert "never fired on tansu" not in out
    assert main([*base, "--compare-brokers", "tansu,kafka", "--allow-gap", f"background:{second.trigger}"]) == 0
    assert f"never fired on kafka (fired on another broker) [allowed]: {second.label}" in capsys.readouterr().out


def test_a_machine_only_one_broker_runs_is_judged_on_that_broker_alone(tmp_path, capsys):
    """The consumer protocol runs on Apache Kafka only: its spec is not compared with Tansu's (which fires only
    the refusal), and every transition must fire on Kafka."""
    spec = shipped_spec("consumer_membership")
    hits = {str(t.index): {"broker:kafka": 1} for t in spec.transitions[1:]}
    hits[str(spec.transitions[-1].index)]["broker:tansu"] = 1  # the refusal: fatal on Tansu too
    (tmp_path / "records-1.json").write_text(json.dumps({"machines": {"consumer_membership": hits}}))
    base = ["spec-coverage", "--records", str(tmp_path), "--machines", "consumer_membership"]
    base += ["--compare-brokers", "tansu,kafka", "--only-on", "consumer_membership:kafka"]
    assert main(base) == 1
    out = capsys.readouterr().out
    assert f"never fired on kafka: {spec.transitions[0].label}" in out and "never fired on tansu" not in out
    hits[str(spec.transitions[0].index)] = {"broker:kafka": 3}
    (tmp_path / "records-1.json").write_text(json.dumps({"machines": {"consumer_membership": hits}}))
    assert main(base) == 0


def test_tools_run_from_a_checkout():
    for tool in ("check-specs", "render-diagrams"):
        args = [sys.executable, str(ROOT / "tools" / tool)] + (["--check"] if tool == "render-diagrams" else [])
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr


def test_render_diagrams_without_dot_says_what_to_install(tmp_path):
    """No Graphviz: no traceback; the tool names the package and still writes .dot and .mmd."""
    out = tmp_path / "diagrams"
    env = {"PATH": str(tmp_path / "empty-bin"), "PYTHONPATH": str(ROOT)}  # no `dot` anywhere on PATH
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "render-diagrams"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "apt-get install graphviz" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{m}{s}"
        for m in (
            "background",
            "connection",
            "consumer_membership",
            "fetch",
            "membership",
            "parallel",
            "share_batch",
            "share_fetch_pacing",
            "share_membership",
            "share_session",
        )
        for s in (".dot", ".mmd")
    )
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "render-diagrams"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert check.returncode == 0 and "up to date" in check.stdout, check.stderr

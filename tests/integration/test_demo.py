"""The README's main command runs end to end on the embedded broker and leaves nothing behind."""

import psutil
import pytest

from fsm_consumer.cli import main

pytestmark = pytest.mark.integration


def _tansu_pids():
    return {p.pid for p in psutil.process_iter(["name", "cmdline"])
            if "tansu" in " ".join(p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE}


def test_demo_fills_a_topic_and_renders_diagrams(tmp_path, capsys):
    before = _tansu_pids()
    assert main(["demo", "--records", "600", "--partitions", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "topic 'demo': 600 records" in out
    assert "the broker is stopped" in out
    for machine in ("background", "connection", "membership"):
        for suffix in (".dot", ".svg", ".mmd"):
            assert (tmp_path / f"{machine}{suffix}").stat().st_size > 100
    assert _tansu_pids() <= before  # the demo's broker is gone


def test_demo_without_graphviz_still_writes_dot_and_mermaid(tmp_path, capsys, monkeypatch):
    import fsm_consumer.cli._demo as demo_module
    monkeypatch.setattr(demo_module, "have_dot", lambda: False)
    assert main(["demo", "--records", "50", "--partitions", "1", "--out", str(tmp_path)]) == 0
    assert "dot is not installed" in capsys.readouterr().out
    assert (tmp_path / "membership.dot").is_file() and (tmp_path / "membership.mmd").is_file()
    assert not (tmp_path / "membership.svg").exists()

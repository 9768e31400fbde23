"""check-specs' record of the specs it validated: a Consumer skips the schema check only for exactly those
texts against exactly that schema; anything else is checked and its fault named by file and line."""

import runpy
import shutil
import subprocess
import sys

import pytest

from fsm_consumer.cli import main
from fsm_consumer.machines import (
    SpecError,
    _checked,
    _checked_record,
    all_spec_paths,
    parse_spec,
    schema_path,
)
from fsm_consumer.machines._load import already_checked
from fsm_consumer.machines._paths import spec_path


def _shipped_paths():
    return [schema_path(), *all_spec_paths()]


def test_the_record_holds_the_shipped_specs_and_schema():
    # stale after a spec or the schema changed: `tools/check-specs --record` (CI's check-specs fails too)
    assert _checked_record.record_is_current(_shipped_paths())
    assert len(_checked.SPECS) == len(all_spec_paths())


def test_a_consumer_of_the_shipped_specs_never_imports_jsonschema():
    code = (
        "import sys\n"
        "import fsm_consumer.consumer\n"
        "from fsm_consumer.machines import shipped_spec\n"
        "for m in ('background', 'membership', 'consumer_membership', 'connection', 'fetch', 'parallel',\n"
        "          'share_batch', 'share_fetch_pacing', 'share_membership', 'share_session'):\n"
        "    shipped_spec(m)\n"
        "assert 'jsonschema' not in sys.modules, 'the shipped specs were validated again'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_shipped_spec_changed_by_one_key_is_checked_and_its_fault_named():
    text = spec_path("background").read_text(encoding="utf-8")
    assert already_checked(text)
    changed = text.replace("\nstates:", "\nstaets: {}\nstates:", 1)
    assert changed != text and not already_checked(changed)
    with pytest.raises(SpecError) as caught:
        parse_spec(changed, "edited/background.yaml", expected_name="background")
    line = changed.splitlines().index("staets: {}") + 1
    assert f"edited/background.yaml:{line}:" in str(caught.value) and "staets" in str(caught.value)


def test_another_schema_means_every_spec_is_checked_again(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    shutil.copytree(schema_path().parent, specs)
    schema = specs / "spec.schema.json"
    schema.write_text(schema.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    monkeypatch.setenv("FSM_CONSUMER_SPECS", str(specs))
    assert not already_checked((specs / "fetch.yaml").read_text(encoding="utf-8"))


def test_check_specs_fails_on_a_stale_record(monkeypatch, capsys):
    monkeypatch.setattr(_checked, "SPECS", frozenset(list(_checked.SPECS)[1:]))
    assert main(["check-specs"]) == 1
    assert "tools/check-specs --record" in capsys.readouterr().err


def test_record_writes_what_check_specs_compares(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_checked_record, "RECORD", tmp_path / "_checked.py")
    assert main(["check-specs", "--record"]) == 0
    written = runpy.run_path(str(tmp_path / "_checked.py"))
    assert written["SCHEMA"] == _checked.SCHEMA and written["SPECS"] == _checked.SPECS
    assert "recorded" in capsys.readouterr().out


def test_record_refuses_a_directory_of_the_users(tmp_path, capsys):
    shutil.copytree(schema_path().parent, tmp_path / "specs")
    assert main(["check-specs", "--specs", str(tmp_path / "specs"), "--record"]) == 1
    assert "project's own specs" in capsys.readouterr().err

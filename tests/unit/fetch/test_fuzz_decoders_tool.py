"""tools/fuzz-decoders, the differential fuzzer of the record decoders (issue 48) and of the compiled Avro column
decoder, runs as CI runs it: 200 cases of seed 1 of each target (a few seconds), on which the record decoding
paths agree and the compiled Avro columns are fastavro's. A failure names its reproducer, which
`tools/fuzz-decoders --replay FILE` runs again."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fsm_consumer.fetch import _decode_v2

TOOL = Path(__file__).resolve().parents[3] / "tools" / "fuzz-decoders"

pytestmark = pytest.mark.skipif(
    _decode_v2._compiled is None, reason="fsm_consumer was installed without a C compiler: no compiled decoder"
)


def test_two_hundred_cases_of_seed_1_of_each_target_agree(tmp_path):
    done = subprocess.run(
        [sys.executable, str(TOOL), "--cases", "200", "--seed", "1", "--keep-going", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert re.search(r"records \(plain build\): 200 cases in", done.stdout), done.stdout + done.stderr
    if "the Avro target is left out" not in done.stdout:  # it is without the schemas extra
        assert re.search(r"avro \(plain build\): 200 cases in", done.stdout), done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_avro_case_made_again_from_its_seed_and_number(tmp_path):
    pytest.importorskip("confluent_kafka.schema_registry", reason="the Avro target: the schemas extra")
    done = subprocess.run(
        [sys.executable, str(TOOL), "--replay", "avro:1:3", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "the two paths agree" in done.stdout and done.returncode == 0, done.stdout + done.stderr

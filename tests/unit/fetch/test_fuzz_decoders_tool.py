"""tools/fuzz-decoders, issue 48's differential fuzzer of the record decoders, runs as CI runs it: 200 cases of
seed 1 (a second or two), on which the four decoding paths agree. A failure names its reproducer, which
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


def test_two_hundred_cases_of_seed_1_agree(tmp_path):
    done = subprocess.run(
        [sys.executable, str(TOOL), "--cases", "200", "--seed", "1", "--keep-going", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert re.search(r"\b200 cases in", done.stdout), done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr

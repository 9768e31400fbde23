"""Fuzzing the specs (issue 25): the shipped specs mutated line by line (lines deleted, doubled, swapped,
cut short, words replaced by other words of the file or by random text, the file truncated) either load or
raise a SpecError naming the file and, when it has one, a line of it: never another exception, never a
line outside the file. FSM_FUZZ_EXAMPLES sets the cases (tools/fuzz runs 10,000)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_consumer.machines import SpecError, load_spec

SPECS = sorted((Path(__file__).resolve().parents[3] / "specs").glob("*.yaml"))
TEXTS = {p.name: p.read_text() for p in SPECS}
EXAMPLES = int(os.environ.get("FSM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
WORDS = sorted(
    {w for text in TEXTS.values() for w in re.findall(r"[A-Za-z_][\w.]*|\d+|[:{}\[\],\-#&*!|>'\"%@`]", text)}
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(sorted(TEXTS)))
    lines = TEXTS[name].splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["delete", "double", "swap", "cut", "word", "noise", "indent", "truncate"]))
        if kind == "delete":
            del lines[i]
        elif kind == "double":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))] + "\n"
        elif kind == "word":
            words = re.findall(r"[A-Za-z_][\w.]*|\d+", lines[i])
            if words:
                old = draw(st.sampled_from(words))
                lines[i] = lines[i].replace(old, draw(st.sampled_from(WORDS)), 1)
        elif kind == "noise":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.text(max_size=12)) + lines[i][at:]
        elif kind == "indent":
            lines[i] = " " * draw(st.integers(0, 6)) + lines[i].lstrip(" ")
        else:
            lines = lines[:i]
    return name, "".join(lines)


@FUZZ
@given(case=mutated())
def test_a_mutated_spec_loads_or_names_file_and_line(
    case: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    name, text = case
    path = tmp_path_factory.getbasetemp() / name
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        load_spec(path)
    except SpecError as exc:
        message = str(exc)
        assert message.startswith(f"{exc.file}:") and exc.file and exc.file.endswith(name), message
        assert exc.fault and exc.fault in message, message
        if exc.line is not None:
            assert 1 <= exc.line <= text.count("\n") + 2, (exc.line, message)

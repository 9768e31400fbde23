"""tools/bench share runs the clients of each cell in turn: a broker that gets faster run after run (its JIT) must
not favour whichever client always goes last."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))

from benchlib.share import _in_turn  # noqa: E402


def test_each_client_of_a_cell_goes_first_in_turn_and_every_run_runs_each_once():
    plan = [
        ("fsm", "implicit", 1, 0),
        ("java", "implicit", 1, 0),
        ("confluent", "implicit", 1, 0),
        ("group", "-", 1, 0),
        ("fsm", "implicit", 8, 0),
        ("confluent", "implicit", 8, 0),
        ("fsm", "explicit", 8, 0),
        ("confluent", "explicit", 8, 0),
    ]
    runs = [_in_turn(plan, run) for run in range(4)]
    for steps in runs:
        assert sorted(steps) == sorted(plan)  # each once, whatever the order
    firsts = [[s for s in steps if s[1:] == ("implicit", 1, 0) or s[0] == "group"][0][0] for steps in runs]
    assert firsts == ["fsm", "java", "confluent", "group"]
    n8 = [[s[0] for s in steps if s[1:] == ("implicit", 8, 0)] for steps in runs]
    assert n8 == [["fsm", "confluent"], ["confluent", "fsm"], ["fsm", "confluent"], ["confluent", "fsm"]]
    # cells stay in the plan's order: N=1's before N=8's, implicit's before explicit's
    for steps in runs:
        assert [(s[2], s[1] if s[0] != "group" else "implicit") for s in steps] == [
            (s[2], s[1] if s[0] != "group" else "implicit") for s in plan
        ]

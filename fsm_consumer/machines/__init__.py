"""The spec layer: YAML state-machine specs, checked and compiled into transitions machines.

Nothing here knows about Kafka, threads or sockets. Time enters only through a Clock.
"""

from ._clock import Clock, FakeClock, MonotonicClock
from ._composition import Composition, Linker, load_composition, shipped_composition, shipped_compositions
from ._errors import IllegalTransition, SpecError
from ._load import all_spec_paths, load_spec, parse_spec, shipped_spec
from ._log import Observer, TransitionRecord, add_observer, remove_observer
from ._machine import SpecMachine, resolve_durations
from ._model import Duration, Spec, State, Timeout, Transition
from ._paths import schema_path, specs_dir
from ._table import TableMachine

__all__ = [
    "Clock",
    "Composition",
    "Duration",
    "FakeClock",
    "IllegalTransition",
    "Linker",
    "MonotonicClock",
    "Observer",
    "Spec",
    "SpecError",
    "SpecMachine",
    "State",
    "TableMachine",
    "Timeout",
    "Transition",
    "TransitionRecord",
    "add_observer",
    "all_spec_paths",
    "load_composition",
    "load_spec",
    "parse_spec",
    "remove_observer",
    "resolve_durations",
    "schema_path",
    "shipped_composition",
    "shipped_compositions",
    "shipped_spec",
    "specs_dir",
]

"""A spec's relations between durations (``relations:``), checked for the defaults and against the config
validator: a configuration that breaks one must be refused, with a message naming both keys.

A duration's value is its config key's, else its default; a computed one (``computed_by``) is taken as its
configured value (the hook shapes it per visit: a backoff's jitter) or, without a key, its default (the broker
gives it: only the defaults can be checked). The validator is probed with the configurations that break a
relation at its edge: the shorter duration's key set to the longer one's value (one more for ``at_most``), and
the longer one's key set to the shorter one's value (one less). Each must be refused, with a message naming
the key the probe set; the validator's own message for the relation names both keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ._model import Duration, Relation, Spec

__all__ = ["TimingFault", "check_relations"]

Validate = Callable[[Mapping[str, Any]], Any]  # raises (a ConfigError) for a configuration it refuses


@attrs.frozen
class TimingFault:
    name: str  # the relation's
    message: str
    line: int = 0


def _value(d: Duration, config: Mapping[str, Any]) -> float:
    return float(config[d.config]) if d.config is not None and d.config in config else float(d.default)


def _holds(r: Relation, shorter: float, longer: float) -> bool:
    return shorter < longer if r.strict else shorter <= longer


def check_relations(spec: Spec, validate: Validate | None = None) -> list[TimingFault]:
    """Every relation of ``spec`` for its defaults, and (with ``validate``) for what the validator accepts."""
    faults = []
    for r in spec.relations:
        a, b = spec.durations[r.shorter], spec.durations[r.longer]

        def fault(message: str, r: Relation = r) -> None:
            faults.append(TimingFault(r.name, f"{r}: {message}", r.line))

        if not _holds(r, a.default, b.default):
            fault(f"the defaults break it ({a.name} {a.default} ms, {b.name} {b.default} ms)")
            continue
        if validate is None or (a.config is None and b.config is None):
            continue
        if a.config is not None and a.config == b.config:
            if r.strict:
                fault(f"both are config key {a.config!r}: one can never be below the other")
            continue
        keys = [k for k in (a.config, b.config) if k is not None]
        probes: list[dict[str, Any]] = []
        if a.config is not None:
            probes.append({a.config: b.default if r.strict else b.default + 1})
        if b.config is not None and a.default - (0 if r.strict else 1) >= 1:
            probes.append({b.config: a.default if r.strict else a.default - 1})
        for config in probes:
            if _holds(r, _value(a, config), _value(b, config)):
                continue
            try:
                validate(config)
            except Exception as exc:  # noqa: BLE001 - the validator's refusal, whatever its type
                # it names the key the probe set (another rule may refuse it first: a session of 100 ms
                # is below the default heartbeat interval), so the user knows which setting to change
                unnamed = [k for k in config if k not in str(exc)]
                if unnamed:
                    fault(f"the validator refuses {config} but does not name {', '.join(unnamed)}: {exc}")
                continue
            fault(f"the config validator accepts {config}, which breaks it: it should refuse it naming {keys}")
    return faults

"""Errors of the spec layer: a bad spec (SpecError) and an illegal trigger (IllegalTransition)."""

from __future__ import annotations


class SpecError(ValueError):
    """A spec file is malformed, or a model lacks the hooks its spec names.

    The message always starts with ``file:line:`` (line 1-based) so editors and CI logs link to it.
    """

    def __init__(
        self, fault: str, *, file: str | None = None, line: int | None = None, faults: list[str] | None = None
    ) -> None:
        self.fault = fault
        self.file = file
        self.line = line
        # Several faults of one kind (e.g. every missing hook) travel together.
        self.faults = faults or [fault]
        where = f"{file or '<spec>'}:{line}: " if line is not None else f"{file or '<spec>'}: "
        super().__init__(where + fault)


class IllegalTransition(RuntimeError):
    """A trigger was fired in a state that has no transition for it; the state is unchanged."""

    def __init__(self, machine: str, state: str, trigger: str, *, known: bool = True) -> None:
        self.machine = machine
        self.state = state
        self.trigger = trigger
        why = "is not legal in state" if known else "is not declared in the spec; state"
        super().__init__(f"machine {machine!r}: trigger {trigger!r} {why} {state!r}")

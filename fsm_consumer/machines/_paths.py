"""Where the shipped specs and their schema live: a wheel carries them inside the package
(``fsm_consumer/_specs``); a source checkout has them at the top level (``specs/``)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "FSM_CONSUMER_SPECS"


def specs_dir() -> Path:
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_specs", package.parent / "specs"):
        if (candidate / "spec.schema.json").is_file():
            return candidate
    raise FileNotFoundError(
        f"cannot find the specs directory (looked in {package / '_specs'} and {package.parent / 'specs'}); "
        f"set {ENV_VAR}"
    )


def specs_are_the_users() -> bool:
    """Whether the specs directory is one the user chose (``FSM_CONSUMER_SPECS``), not the shipped one."""
    return bool(os.environ.get(ENV_VAR))


def schema_path() -> Path:
    return specs_dir() / "spec.schema.json"


def spec_path(machine: str) -> Path:
    return specs_dir() / f"{machine}.yaml"

"""Reading spec files: YAML with lines -> schema check -> Spec with semantic checks."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ._build import build_spec
from ._errors import SpecError
from ._model import Spec
from ._paths import spec_path, specs_dir
from ._schema import validate
from ._yaml import load_located


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def parse_spec(text: str, file: str = "<spec>", *, expected_name: str | None = None) -> Spec:
    """Check and build a spec from YAML text; ``file`` is only used in error messages."""
    doc = load_located(text, file)
    validate(doc)
    return build_spec(doc, expected_name)


def load_spec(path: str | os.PathLike[str]) -> Spec:
    """Load one spec file; its ``machine`` must match the file's stem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read spec: {exc.strerror}", file=_display(p)) from None
    return parse_spec(text, _display(p), expected_name=p.stem)


@functools.cache
def shipped_spec(machine: str) -> Spec:
    """A spec from the project's specs directory, loaded once per process."""
    return load_spec(spec_path(machine))


def all_spec_paths(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    return sorted(Path(directory or specs_dir()).glob("*.yaml"))

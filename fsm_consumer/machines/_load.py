"""Reading spec files: YAML with lines -> schema check -> Spec with semantic checks.

The schema check is skipped for a text check-specs already validated against the same schema, as its
record (_checked.py) says by their digests: the shipped specs, unchanged. Any other text (a spec edited in
a checkout, a user's) is validated, so a fault is still named by file and line; the semantic checks run
on every spec.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from . import _checked
from ._build import build_spec
from ._errors import SpecError
from ._model import Spec
from ._paths import schema_path, spec_path, specs_dir
from ._schema import validate
from ._yaml import load_located


def digest(data: str | bytes) -> str:
    """The digest check-specs records of a spec's or the schema's text."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


@functools.cache
def _schema_digest(path: Path) -> str | None:
    try:
        return digest(path.read_bytes())
    except OSError:
        return None  # validate() reports the missing schema


def already_checked(text: str) -> bool:
    """Whether check-specs validated exactly this text against exactly the schema in use."""
    return digest(text) in _checked.SPECS and _schema_digest(schema_path()) == _checked.SCHEMA


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def parse_spec(
    text: str, file: str = "<spec>", *, expected_name: str | None = None, validate_always: bool = False
) -> Spec:
    """Check and build a spec from YAML text; ``file`` is only used in error messages. ``validate_always``:
    run the schema check even on a text check-specs recorded (check-specs itself does)."""
    doc = load_located(text, file)
    if validate_always or not already_checked(text):
        validate(doc)
    return build_spec(doc, expected_name)


def load_spec(path: str | os.PathLike[str], *, validate_always: bool = False) -> Spec:
    """Load one spec file; its ``machine`` must match the file's stem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read spec: {exc.strerror}", file=_display(p)) from None
    return parse_spec(text, _display(p), expected_name=p.stem, validate_always=validate_always)


@functools.cache
def shipped_spec(machine: str) -> Spec:
    """A spec from the project's specs directory, loaded once per process."""
    return load_spec(spec_path(machine))


def all_spec_paths(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    return sorted(Path(directory or specs_dir()).glob("*.yaml"))

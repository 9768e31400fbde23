"""JSON Schema validation of a loaded spec, with faults pointed at their line."""

from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ._errors import SpecError
from ._paths import schema_path, specs_are_the_users
from ._yaml import Located

if TYPE_CHECKING:
    import jsonschema  # no stubs (types-jsonschema is not a dependency): pyproject ignores its imports

# jsonschema is imported where a spec is validated, not with this module: a process whose specs are all
# the shipped ones as check-specs recorded them (_checked.py) never validates one, and its import (40 ms,
# 3 MB) is then saved in every process that makes a Consumer (a Spark worker, the CLI).


def check_schema_file(path: Path | None = None) -> None:
    """Raise SpecError naming the schema file (default: the one in use) if it is not a valid JSON Schema
    (draft 2020-12)."""
    import jsonschema

    path = path or schema_path()
    try:
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))
    except jsonschema.SchemaError as exc:
        where = _where(tuple(exc.absolute_path))
        raise SpecError(f"not a valid JSON Schema at {where}: {exc.message}", file=str(path)) from None


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema

    # Checking a schema against the metaschema costs 60 ms, the most of a process's first Consumer: the
    # shipped schema is checked by check-specs and the tests, a schema of the user's (the specs directory
    # moved by FSM_CONSUMER_SPECS) here.
    if specs_are_the_users():
        check_schema_file()
    return jsonschema.Draft202012Validator(json.loads(schema_path().read_text()))


def _where(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "the top level"


def _fault(err: jsonschema.ValidationError, doc: Located) -> tuple[tuple, str, bool]:
    """(path, message, points_at_key) for one schema error, worded for a spec author."""
    path = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = list(err.schema.get("properties", {}))
        extra = sorted((k for k in err.instance if k not in allowed), key=str)  # YAML keys may mix int and str
        if extra:
            key = extra[0]
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            tip = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(allowed)})"
            return path + (key,), f"unknown key {key!r} in {_where(path)}{tip}", True
    if err.validator == "required":
        return path, f"{_where(path)}: {err.message}", False
    if err.validator == "oneOf" and err.context:
        # oneOf hides the useful fault among its branches: show the deepest one.
        best = max(err.context, key=lambda e: len(e.absolute_path))
        return tuple(best.absolute_path), f"{_where(tuple(best.absolute_path))}: {best.message}", False
    if err.validator == "pattern":
        return (
            path,
            (
                f"{_where(path)}: {err.instance!r} is not a valid name "
                "(lower-case letters, digits and _; starting with a letter)"
            ),
            False,
        )
    return path, f"{_where(path)}: {err.message}", False


def validate(doc: Located) -> None:
    """Raise SpecError for the first schema fault, in document order."""
    errors = list(_validator().iter_errors(doc.data))
    if not errors:
        return
    faults = [_fault(e, doc) for e in errors]
    faults.sort(key=lambda f: doc.line_of(f[0], key=f[2]))
    path, message, at_key = faults[0]
    raise doc.error(path, message, key=at_key)

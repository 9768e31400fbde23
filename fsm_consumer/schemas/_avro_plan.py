"""Programs for the compiled Avro column decoder (``_cavro.c``): Avro's resolution of a writer's schema to the
reader's worked out once per schema pair, as fastavro works it out per record, and the reader's Arrow type
(``_avro_arrow``) laid out as one builder per Arrow array.

``Layout(reader)`` numbers the builders of the reader's type (the root first, a parent before its children);
``compile_pair(writer, layout)`` gives the program that reads a writer's payload into them: an int64 array of
ops and their arguments (the ops below, numbered as in ``_cavro.c``) and the constants they name (enum
symbols, error texts, encoded defaults). A field the reader lacks is skipped; one the writer lacks gets its
default, encoded once with fastavro and read like a payload; a branch or field that cannot resolve is an
error each record meeting it gets, as fastavro raises it then.

What the program does not cover raises ``Unsupported`` and the pair is read by fastavro: logical types that
differ between writer and reader, decimals of another precision or scale, defaults of bytes, fixed or
decimal fields (their JSON spelling is Avro's own), and a default fastavro cannot encode.
"""

from __future__ import annotations

import io
from array import array
from typing import Any, NamedTuple

import pyarrow as pa
from fastavro import parse_schema, schemaless_writer

from ._avro_arrow import arrow_type

OPS = (
    "NULL", "BOOL", "INT", "LONG", "FLOAT", "DOUBLE", "BYTES", "FIXED", "DEC_BYTES", "DEC_FIXED",
    "ENUM", "RECORD", "ARRAY", "MAP", "UNION", "NULL_INTO", "MEMBER", "ERROR", "DEFAULT",
)  # fmt: skip
OP = {name: i for i, name in enumerate(OPS)}
K_NULL, K_BOOL, K_I32, K_I64, K_F32, K_F64, K_BIN, K_DEC, K_STRUCT, K_LIST = range(10)
C_I32, C_I64, C_F32, C_F64, C_DATE, C_TIME_MS, C_TIME_US, C_TS_MS, C_TS_US = range(9)
S_ANY, S_UTF8, S_UUID = range(3)
RESOLUTION = "resolution: "  # an error text every record of a pair meets, as fastavro's SchemaResolutionError

_NAMED = ("record", "error", "enum", "fixed")
_CONV = {  # (avro type, logical type): how the value lands
    ("int", None): C_I32,
    ("int", "date"): C_DATE,
    ("int", "time-millis"): C_TIME_MS,
    ("long", None): C_I64,
    ("long", "time-micros"): C_TIME_US,
    ("long", "timestamp-millis"): C_TS_MS,
    ("long", "local-timestamp-millis"): C_TS_MS,
    ("long", "timestamp-micros"): C_TS_US,
    ("long", "local-timestamp-micros"): C_TS_US,
    ("float", None): C_F32,
    ("double", None): C_F64,
}
_KIND = {"null": K_NULL, "boolean": K_BOOL, "int": K_I32, "long": K_I64, "float": K_F32, "double": K_F64}
_PROMOTE = {"int": ("long", "float", "double"), "long": ("float", "double"), "float": ("double",),
            "string": ("bytes",), "bytes": ("string",)}  # fmt: skip


class Unsupported(Exception):
    """A schema pair the compiled decoder leaves to fastavro."""


class Program(NamedTuple):
    code: array
    consts: tuple


def _kind(schema: Any) -> str:
    return "union" if isinstance(schema, list) else schema if isinstance(schema, str) else schema["type"]


def _logical(schema: Any) -> str | None:
    return schema.get("logicalType") if isinstance(schema, dict) else None


def _base(schema: Any) -> Any:
    """A primitive written as {"type": "int"} (with an unknown logical type, say) as the primitive."""
    if isinstance(schema, dict) and schema["type"] not in (*_NAMED, "array", "map") and not _known_logical(schema):
        return schema["type"]
    return schema


def _known_logical(schema: dict) -> bool:
    logical = schema.get("logicalType")
    if logical == "decimal":
        return schema["type"] in ("bytes", "fixed")
    return logical == "uuid" and schema["type"] == "string" or (schema["type"], logical) in _CONV


class Node:
    """A reader schema's node and the builder its values go to."""

    __slots__ = ("schema", "b", "kind", "children", "conv", "branches", "entries", "keys")

    def __init__(self, schema: Any, b: int) -> None:
        self.schema, self.b, self.kind = schema, b, _kind(schema)
        self.entries = self.keys = -1  # a map's: the builders of its entries (a struct) and their keys
        self.children: list[Node] = []
        self.conv = C_I64
        self.branches: list[tuple[Any, str, Node | None]] = []  # a union's: (branch, "null"|"value"|"member", node)


class Layout:
    """The builders of the reader schema's Arrow type: ``spec`` for ``_cavro.Columns``, ``types`` for pyarrow."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.type = arrow_type(reader)
        self.spec: list[tuple[int, tuple[int, ...]]] = []
        self.types: list[pa.DataType] = []
        self.root = self._node(reader, self.type)

    def _new(self, kind: int, typ: pa.DataType) -> int:
        self.spec.append((kind, ()))
        self.types.append(typ)
        return len(self.spec) - 1

    def _children(self, b: int, children: list[int]) -> None:
        self.spec[b] = (self.spec[b][0], tuple(children))

    def _node(self, schema: Any, typ: pa.DataType) -> Node:
        schema = _base(schema)
        if isinstance(schema, list):
            return self._union(schema, typ)
        kind = _kind(schema)
        logical = _logical(schema)
        if logical == "decimal":
            return Node(schema, self._new(K_DEC, typ))
        if kind in _KIND:
            node = Node(schema, self._new(_KIND[kind], typ))
            node.conv = _CONV.get((kind, logical), C_I64)
            return node
        if kind in ("bytes", "string", "enum", "fixed"):
            return Node(schema, self._new(K_BIN, typ))
        if kind in ("record", "error"):
            node = Node(schema, self._new(K_STRUCT, typ))
            node.children = [self._node(f["type"], typ.field(i).type) for i, f in enumerate(schema["fields"])]
            self._children(node.b, [c.b for c in node.children])
            return node
        if kind == "array":
            node = Node(schema, self._new(K_LIST, typ))
            node.children = [self._node(schema["items"], typ.value_type)]
            self._children(node.b, [node.children[0].b])
            return node
        if kind == "map":
            node = Node(schema, self._new(K_LIST, typ))
            entries = self._new(K_STRUCT, pa.struct([typ.key_field, typ.item_field]))
            keys = self._new(K_BIN, pa.string())
            value = self._node(schema["values"], typ.item_type)
            self._children(node.b, [entries])
            self._children(entries, [keys, value.b])
            node.children = [value]
            node.entries, node.keys = entries, keys
            return node
        raise Unsupported(f"the Avro type {kind!r}")

    def _union(self, branches: list, typ: pa.DataType) -> Node:
        if any(b != "null" and _base(b) == "null" for b in branches):
            # {"type": "null"}: a member of the Arrow type (_avro_arrow drops "null" only), yet the Python path's
            # null value is a null union, not a member set
            raise Unsupported('a union with a null branch spelled {"type": "null"}')
        present = [b for b in branches if b != "null"]
        widened = len(present) > 1 and not pa.types.is_struct(typ)  # [int, long] and [float, double]
        if len(present) > 1 and not widened and any(isinstance(b, dict) and _logical(b) for b in present):
            raise Unsupported("a union with logical types among several branches")
        if not present:
            node = Node(branches, self._new(K_NULL, typ))
            node.branches = [(b, "null", node) for b in branches]
            return node
        if len(present) == 1 or widened:
            if widened:
                shared = self._new(K_I64 if typ == pa.int64() else K_F64, typ)
                inner = {}
                for b in present:
                    inner[id(b)] = Node(b, shared)
                    inner[id(b)].conv = C_I64 if typ == pa.int64() else C_F64
                target = Node(branches, shared)
            else:
                target = self._node(present[0], typ)
                inner = {id(present[0]): target}
            target.branches = [(b, "null", None) if b == "null" else (b, "value", inner[id(b)]) for b in branches]
            target.kind = "union"
            return target
        node = Node(branches, self._new(K_STRUCT, typ))
        members = [self._node(b, typ.field(i).type) for i, b in enumerate(present)]
        self._children(node.b, [m.b for m in members])
        it = iter(members)
        node.branches = [(b, "null", None) if b == "null" else (b, "member", next(it)) for b in branches]
        node.kind = "union"
        return node


def matches(w: Any, r: Any) -> bool:
    """fastavro's ``match_types``: whether a writer's (non-union) schema resolves to a reader's."""
    w, r = _base(w), _base(r)
    if isinstance(w, list) or isinstance(r, list):
        return True
    wk, rk = _kind(w), _kind(r)
    if wk != rk and wk in _NAMED and rk in _NAMED and _same_name(w, r):
        # fastavro matches named types by name alone, a union's branch too (a fixed taken for a record of its
        # name): its answer
        raise Unsupported(f"a {wk} matched to a {rk} of the same name")
    if wk != rk and rk not in _PROMOTE.get(wk, ()):
        return False
    if wk in ("map", "array"):
        key = "values" if wk == "map" else "items"
        return matches(w[key], r[key])
    if wk in _NAMED:
        if wk == "fixed" and w["size"] != r["size"]:
            return False
        return _same_name(w, r)
    return True


def _same_name(w: dict, r: dict) -> bool:
    short = w["name"].split(".")[-1]
    aliases = r.get("aliases", [])
    return short == r["name"].split(".")[-1] or w["name"] in aliases or short in aliases


class _Compiler:
    def __init__(self, layout: Layout, unresolved: bool = False) -> None:
        self.layout = layout
        self.unresolved = unresolved
        self.code: list[int] = [0]  # word 0: the pc of the root's op
        self.consts: list[bytes | None] = []

    def const(self, value: bytes | None) -> int:
        self.consts.append(value)
        return len(self.consts) - 1

    def emit(self, *words: int) -> int:
        pc = len(self.code)
        self.code.extend(words)
        return pc

    def error(self, text: str) -> int:
        return self.emit(OP["ERROR"], self.const((RESOLUTION + text).encode()[:180]))

    def resolve(self, w: Any, r: Node | None) -> int:
        """The pc of the op reading a value of writer schema ``w`` into ``r`` (None: skipped)."""
        w = _base(w)
        if isinstance(w, list):
            if self.unresolved and r is not None and r.kind == "union" and len(r.branches) == len(w):
                # fastavro reads a payload of the reader's own schema unresolved: each branch as written, not
                # the first reader branch it promotes to (in [long, float] a long stays a long)
                pcs = [self.resolve_branch(b, r, only=k) for k, b in enumerate(w)]
            else:
                pcs = [self.resolve_branch(b, r) for b in w]
            return self.emit(OP["UNION"], len(pcs), *pcs)
        if r is not None and r.kind == "union":
            return self.resolve_branch(w, r)
        return self.value(w, r)

    def resolve_branch(self, w: Any, r: Node | None, only: int | None = None) -> int:
        """A writer union's branch (or a writer value into a reader union): the first reader branch it matches
        (``only``: the reader's branch of that index, if it matches)."""
        if r is None:
            return self.resolve(w, None)
        if r.kind != "union":
            if matches(w, r.schema):
                return self.value(_base(w), r)
            return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
        for k, (branch, mode, node) in enumerate(r.branches):
            if (only is not None and k != only) or not matches(w, branch):
                continue
            if mode == "null":
                if _kind(_base(w)) != "null":
                    continue
                target = r.b if node is None else node.b
                return self.emit(OP["NULL_INTO"], target)
            assert node is not None  # a value's or a member's node
            if mode == "value":
                return self.value(_base(w), node)
            return self.emit(OP["MEMBER"], r.b, self._member(r, node), self.resolve(w, node))
        return self.error(f"schema mismatch: {_show(w)} not found in {_show(r.schema)}")

    def _member(self, union: Node, node: Node) -> int:
        members = [n for _, mode, n in union.branches if mode == "member"]
        return members.index(node)

    def value(self, w: Any, r: Node | None) -> int:
        kind = _kind(w)
        b = -1 if r is None else r.b
        if r is not None:
            if _logical(w) != _logical(r.schema):
                raise Unsupported(f"the logical types {_logical(w)!r} and {_logical(r.schema)!r}")
            rk = _kind(r.schema)
            if kind != rk and kind in _NAMED and rk in _NAMED and _same_name(w, r.schema):
                # fastavro matches named types by name alone (a fixed read as a record of its name): its answer
                raise Unsupported(f"a {kind} read as a {rk} of the same name")
            if rk != kind and rk not in _PROMOTE.get(kind, ()) and not (r.kind == "union" and kind == "null"):
                return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
        if kind == "null":
            return self.emit(OP["NULL"], b)
        if kind == "boolean":
            return self.emit(OP["BOOL"], b)
        if kind in ("int", "long"):
            return self.emit(OP["INT" if kind == "int" else "LONG"], b, C_I64 if r is None else r.conv)
        if kind in ("float", "double"):
            return self.emit(OP["FLOAT" if kind == "float" else "DOUBLE"], b, C_F64 if r is None else r.conv)
        if kind in ("bytes", "string"):
            if _logical(w) == "decimal":
                self._same_decimal(w, r)
                return self.emit(OP["DEC_BYTES"], b, w["precision"])
            # fastavro decodes a writer's string whatever the reader does with it; bytes read as a string are
            # checked too (pyarrow would refuse them for the whole column)
            check = S_UTF8 if kind == "string" or (r is not None and _kind(r.schema) == "string") else S_ANY
            if r is not None and _logical(r.schema) == "uuid":
                check = S_UUID
            return self.emit(OP["BYTES"], b, check)
        if kind == "fixed":
            if r is not None and not matches(w, r.schema):
                return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
            if _logical(w) == "decimal":
                self._same_decimal(w, r)
                return self.emit(OP["DEC_FIXED"], b, w["size"], w["precision"])
            return self.emit(OP["FIXED"], b, w["size"], 0)
        if kind == "enum":
            if r is None:
                return self.emit(OP["LONG"], -1, C_I64)
            if not matches(w, r.schema):
                return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
            symbols, default = r.schema["symbols"], r.schema.get("default")
            first = len(self.consts)
            for s in w["symbols"]:
                chosen = s if s in symbols else default or None
                self.const(None if chosen is None else chosen.encode())
            return self.emit(OP["ENUM"], b, len(w["symbols"]), first)
        if kind in ("record", "error"):
            return self.record(w, r)
        if kind == "array":
            if r is not None and not matches(w, r.schema):
                return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
            item = self.resolve(w["items"], None if r is None else r.children[0])
            return self.emit(OP["ARRAY"], b, item)
        if kind == "map":
            if r is not None and not matches(w, r.schema):
                return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
            item = self.resolve(w["values"], None if r is None else r.children[0])
            return self.emit(OP["MAP"], b, item, -1 if r is None else r.entries, -1 if r is None else r.keys)
        raise Unsupported(f"the Avro type {kind!r}")

    def _same_decimal(self, w: Any, r: Node | None) -> None:
        if r is None:
            return
        rs = r.schema
        if _logical(rs) != "decimal" or (w["precision"], w.get("scale", 0)) != (rs["precision"], rs.get("scale", 0)):
            raise Unsupported("decimals of another precision or scale")

    def record(self, w: dict, r: Node | None) -> int:
        if r is None:
            pcs = [self.resolve(f["type"], None) for f in w["fields"]]
            return self.emit(OP["RECORD"], -1, len(pcs), *pcs, 0)
        if not matches(w, r.schema):
            return self.error(f"schema mismatch: {_show(w)} is not {_show(r.schema)}")
        fields = r.schema["fields"]
        by_name = {f["name"]: i for i, f in enumerate(fields)}
        by_alias = {a: i for i, f in enumerate(fields) for a in f.get("aliases", [])}
        pcs, taken = [], set()
        for f in w["fields"]:
            i = by_name.get(f["name"], by_alias.get(f["name"]))
            if i is None or i in taken:
                pcs.append(self.resolve(f["type"], None))
            else:
                taken.add(i)
                pcs.append(self.resolve(f["type"], r.children[i]))
        defaults = []
        for i, f in enumerate(fields):
            if i in taken:
                continue
            if "default" not in f:
                defaults.append(self.error(f"No default value for field {f['name']} in {r.schema['name']}"))
            else:
                defaults.append(self.default(f, r.children[i]))
        return self.emit(OP["RECORD"], r.b, len(pcs), *pcs, len(defaults), *defaults)

    def default(self, field: dict, r: Node) -> int:
        if _has_binary(field["type"]):
            raise Unsupported(f"the default of the field {field['name']!r} (bytes, fixed or decimal)")
        if not _read_as_written(field["type"], field["default"]):
            raise Unsupported(f"the default of the field {field['name']!r} (a record's field left out, or a uuid)")
        try:
            out = io.BytesIO()
            schemaless_writer(out, parse_schema(field["type"], _write_hint=False), field["default"])
        except Exception as exc:  # noqa: BLE001 - fastavro's reading then decides
            raise Unsupported(f"the default of the field {field['name']!r}: {exc}") from exc
        return self.emit(OP["DEFAULT"], self.const(out.getvalue()), self.resolve(field["type"], r))


def _read_as_written(schema: Any, value: Any) -> bool:
    """Whether a default encoded with fastavro's writer reads back as fastavro's reader hands it out, which is
    the JSON value as written: not so where the writer fills in a record's missing field with its own default
    (the Python path has a null there) or the compiled path lower-cases a uuid."""
    if isinstance(schema, list):
        return all(_read_as_written(b, value) for b in schema)
    if not isinstance(schema, dict):
        return True
    kind = schema["type"]
    if schema.get("logicalType") == "uuid":
        return not isinstance(value, str) or value == value.lower()
    if kind in ("record", "error") and isinstance(value, dict):
        return all(f["name"] in value and _read_as_written(f["type"], value[f["name"]]) for f in schema["fields"])
    if kind == "array" and isinstance(value, list):
        return all(_read_as_written(schema["items"], v) for v in value)
    if kind == "map" and isinstance(value, dict):
        return all(_read_as_written(schema["values"], v) for v in value.values())
    return True


def _has_binary(schema: Any) -> bool:
    if isinstance(schema, list):
        return any(_has_binary(b) for b in schema)
    if isinstance(schema, str):
        return schema == "bytes"
    kind = schema["type"]
    if kind in ("bytes", "fixed"):
        return True
    if kind in ("record", "error"):
        return any(_has_binary(f["type"]) for f in schema["fields"])
    if kind == "array":
        return _has_binary(schema["items"])
    if kind == "map":
        return _has_binary(schema["values"])
    return False


def _show(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_show(b) for b in schema) + "]"
    if isinstance(schema, dict):
        return schema.get("name") or schema["type"]
    return str(schema)


def compile_pair(writer: Any, layout: Layout, unresolved: bool = False) -> Program:
    """The program reading a payload of ``writer`` (an expanded schema) into ``layout``'s builders: word 0
    holds the pc of the root's op. ``unresolved``: the writer's schema is the reader's (fastavro then reads
    without resolving: a union's value stays in the branch it was written with)."""
    c = _Compiler(layout, unresolved)
    c.code[0] = c.resolve(writer, layout.root)
    return Program(array("q", c.code), tuple(c.consts))

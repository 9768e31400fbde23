"""The compiled Avro column decoder (schemas/_cavro.c, its programs from _avro_plan.py) against the pure-Python
path (fastavro's values made into the same Arrow type), column for column and error for error: every Avro type
and logical type, each of Avro's resolution rules (promotions, fields added with defaults and dropped, enum
symbols, unions on either side), several writer versions in one column, and payloads cut short or corrupted."""

from __future__ import annotations

import datetime
import decimal
import io
import random
import uuid

import pyarrow as pa
import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="the schemas extra: pip install fsm_consumer[schemas]")

from confluent_kafka.schema_registry import Schema  # noqa: E402
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient  # noqa: E402
from fastavro import parse_schema, schemaless_writer  # noqa: E402

from fsm_consumer.schemas import AvroDeserializer, Registry, _avro, _avro_columns  # noqa: E402  # noqa: E402
from fsm_consumer.testing import _schema_peer as peer  # noqa: E402

if _avro_columns._cavro is None:
    pytest.skip("the C modules were not built (no C compiler): fastavro types every column", allow_module_level=True)

_count = 0


def _registry():
    global _count
    _count += 1
    return MockSchemaRegistryClient({"url": f"mock://compiled{_count}"})


def _dec(precision, scale, kind="bytes", **extra):
    return {"type": kind, "logicalType": "decimal", "precision": precision, "scale": scale, **extra}


KITCHEN = {
    "type": "record",
    "name": "Kitchen",
    "namespace": "t",
    "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "dec", "type": _dec(20, 4)},
        {"name": "decf", "type": _dec(9, 2, "fixed", name="Dec8", size=8)},
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tus", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "ltu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "arr", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "string"}}},
        {"name": "opt", "type": ["null", {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}]},
        {"name": "multi", "type": ["null", "string", "long", "In", "boolean"]},
        {"name": "wide", "type": ["int", "long"]},
        {"name": "wf", "type": ["null", "float", "double"]},
        {"name": "recs", "type": {"type": "array", "items": "In"}},
        {"name": "nested", "type": {"type": "map", "values": ["null", "In"]}},
    ],
}


def _named(schema, named: dict) -> dict:
    """The named types a schema defines, by name."""
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, named)
    elif isinstance(schema, dict):
        if schema["type"] in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
        for f in schema.get("fields", ()):
            _named(f["type"], named)
        for key in ("items", "values"):
            if key in schema:
                _named(schema[key], named)
    return named


def _value(schema, rnd: random.Random, named: dict):
    """A random value of an (unexpanded) schema, in the form fastavro's writer takes."""
    if not named:
        _named(schema, named)
    if isinstance(schema, list):
        return _value(rnd.choice(schema), rnd, named)
    if isinstance(schema, str):
        if schema in named:
            return _value(named[schema], rnd, named)
        kind, logical = schema, None
    else:
        kind, logical = schema["type"], schema.get("logicalType")
        if kind in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
    if logical == "decimal":
        digits = schema["precision"]
        unscaled = rnd.randint(-(10**digits) + 1, 10**digits - 1)
        return decimal.Decimal(unscaled).scaleb(-schema["scale"])
    if logical == "date":
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=rnd.randint(-20000, 40000))
    if logical == "time-millis":
        return datetime.time(rnd.randint(0, 23), rnd.randint(0, 59), rnd.randint(0, 59), rnd.randint(0, 999) * 1000)
    if logical == "time-micros":
        return datetime.time(rnd.randint(0, 23), rnd.randint(0, 59), rnd.randint(0, 59), rnd.randint(0, 999999))
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        micros = rnd.randint(-(2**40), 2**52)
        if "millis" in logical:
            micros -= micros % 1000
        tz = None if logical.startswith("local") else datetime.UTC
        return datetime.datetime(1970, 1, 1, tzinfo=tz) + datetime.timedelta(microseconds=micros)
    if logical == "uuid":
        return str(uuid.UUID(int=rnd.getrandbits(128)))
    if kind == "null":
        return None
    if kind == "boolean":
        return rnd.random() < 0.5
    if kind == "int":
        return rnd.choice([0, -1, 1, 2**31 - 1, -(2**31), rnd.randint(-(2**31), 2**31 - 1)])
    if kind == "long":
        return rnd.choice([0, -1, 2**63 - 1, -(2**63), rnd.randint(-(2**63), 2**63 - 1)])
    if kind in ("float", "double"):
        return rnd.choice([0.0, -1.5, 3.25, float("inf"), rnd.random() * 1e6])
    if kind == "bytes":
        return rnd.randbytes(rnd.randint(0, 12))
    if kind == "string":
        return "".join(rnd.choice("aé€😀z ") for _ in range(rnd.randint(0, 10)))
    if kind == "fixed":
        return rnd.randbytes(schema["size"])
    if kind == "enum":
        return rnd.choice(schema["symbols"])
    if kind == "array":
        return [_value(schema["items"], rnd, named) for _ in range(rnd.randint(0, 4))]
    if kind == "map":
        return {f"k{j}": _value(schema["values"], rnd, named) for j in range(rnd.randint(0, 3))}
    if kind == "record":
        return {f["name"]: _value(f["type"], rnd, named) for f in schema["fields"]}
    raise AssertionError(kind)


def _write(client, subject: str, schema: dict, values: list) -> list[bytes]:
    schema_id = client.register_schema(subject, Schema(__import__("json").dumps(schema), "AVRO"))
    parsed = parse_schema(schema)
    out = []
    for v in values:
        buf = io.BytesIO()
        schemaless_writer(buf, parsed, v)
        out.append(b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue())
    return out


OUTCOMES: list[bool] = []  # whether each column went through the compiled decoder (True) or was declined


def _counted(*args, **kwargs):
    got = _avro_columns.compiled_column(*args, **kwargs)
    OUTCOMES.append(got is not None)
    return got


@pytest.fixture(autouse=True)
def _count_outcomes(monkeypatch):
    monkeypatch.setattr(_avro, "compiled_column", _counted)
    OUTCOMES.clear()


def _both(client, data: list, permissive: bool = False, declined_ok: bool = False, **options):
    """The compiled column and the Python path's, and each side's failed (index, type); the compiled side's
    exceptions."""
    compiled = AvroDeserializer(Registry(client=client), on_error="null" if permissive else "fail", **options)
    col, failed = compiled.to_arrow("t", pa.array(data, pa.binary()), permissive)
    assert declined_ok or OUTCOMES[-1], "the compiled decoder declined the column"
    saved = _avro_columns._cavro
    _avro_columns._cavro = None
    try:
        python = AvroDeserializer(Registry(client=client), on_error="null" if permissive else "fail", **options)
        col2, failed2 = python.to_arrow("t", pa.array(data, pa.binary()), permissive)
    finally:
        _avro_columns._cavro = saved
    return (col, [(i, type(e)) for i, e in failed]), (col2, [(i, type(e)) for i, e in failed2]), failed


def _same(client, data, permissive=False, **options):
    (col, failed), (col2, failed2), raw = _both(client, data, permissive, **options)
    assert col.type == col2.type
    assert failed == failed2
    assert col.to_pylist() == col2.to_pylist()
    return col, raw


@pytest.mark.parametrize("seed", range(4))
def test_every_avro_type_is_read_as_fastavro_reads_it(seed):
    rnd = random.Random(seed)
    client = _registry()
    data = _write(client, "t-value", KITCHEN, [_value(KITCHEN, rnd, {}) for _ in range(150)])
    col, _ = _same(client, [*data, None, *data[:3]])
    assert len(col) == 154 and col.null_count == 1


def test_the_demo_topic_two_versions_resolved_to_the_latest():
    client = _registry()
    data = peer.payloads("avro", client, "t", 400)
    col, _ = _same(client, data)
    assert col.to_pylist()[0]["note"] == "none" and col.to_pylist()[-1]["note"] != "none"


WRITER = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "a", "type": "int"},
        {"name": "b", "type": "long"},
        {"name": "c", "type": "float"},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "gone", "type": {"type": "map", "values": {"type": "array", "items": ["null", "string"]}}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y", "Z"]}},
        {"name": "u", "type": ["null", "int"]},
        {"name": "one", "type": "long"},
        {"name": "old_name", "type": "string"},
    ],
}
READER = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "by", "type": "string"},  # bytes -> string
        {"name": "s", "type": "bytes"},  # string -> bytes
        {"name": "c", "type": "double"},  # float -> double
        {"name": "b", "type": "double"},  # long -> double
        {"name": "a", "type": "long"},  # int -> long
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["Y", "X", "W"], "default": "W"}},
        {"name": "u", "type": ["null", "long", "string"]},  # a union resolved branch by branch
        {"name": "one", "type": ["null", "long"]},  # a plain value into a union
        {"name": "renamed", "aliases": ["old_name"], "type": "string"},
        {"name": "added", "type": ["null", "string"], "default": None},
        {"name": "added_rec", "type": {"type": "record", "name": "Q", "fields": [{"name": "q", "type": "int"}]},
         "default": {"q": 7}},
        {"name": "added_arr", "type": {"type": "array", "items": "long"}, "default": [1, 2]},
        {"name": "added_enum", "type": "E", "default": "Y"},
    ],
}  # fmt: skip


def test_avros_resolution_rules_as_fastavro_applies_them():
    rnd = random.Random(7)
    client = _registry()
    named = {}
    values = [_value(WRITER, rnd, named) for _ in range(200)]
    for v in values:
        v["by"] = v["s"].encode()  # bytes read as a string must be UTF-8
    data = _write(client, "t-value", WRITER, values)
    col, _ = _same(client, data, reader_schema=READER)
    rows = col.to_pylist()
    assert rows[0]["added_rec"] == {"q": 7} and rows[0]["added_arr"] == [1, 2] and rows[0]["added_enum"] == "Y"
    assert {r["e"] for r in rows} <= {"Y", "X", "W"}


def test_what_cannot_resolve_fails_each_record_it_meets_as_fastavro_fails_it():
    client = _registry()
    data = _write(client, "t-value", WRITER, [_value(WRITER, random.Random(1), {}) for _ in range(5)])
    no_default = dict(READER, fields=[{"name": "a", "type": "int"}, {"name": "missing", "type": "int"}])
    _, raw = _same(client, data, reader_schema=no_default)
    assert raw and "cannot be resolved" in str(raw[0][1]) and "missing" in str(raw[0][1])
    _, raw = _same(client, data, True, reader_schema=no_default)
    assert [i for i, _ in raw] == list(range(5))
    # a union branch the reader lacks: only the records that take it fail
    mismatch = {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["null", "string"]}]}
    col, raw = _same(client, data, True, reader_schema=mismatch)
    writer_u = [v["u"] for v in [_value(WRITER, random.Random(1), {}) for _ in range(5)]]
    assert [i for i, _ in raw] == [i for i, u in enumerate(writer_u) if u is not None]


def test_several_writer_versions_in_one_column():
    client = _registry()
    v1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    v2 = dict(v1, fields=[*v1["fields"], {"name": "b", "type": ["null", "string"], "default": None}])
    v3 = dict(v2, fields=[*v2["fields"], {"name": "c", "type": "long", "default": 5}])
    data = []
    for k in range(30):
        schema = (v1, v2, v3)[k % 3]
        data += _write(client, "t-value", schema, [_value(schema, random.Random(k), {})])
    col, _ = _same(client, data)
    assert [r["c"] for r in col.to_pylist()][:2] == [5, 5]


def _corrupted(rnd: random.Random, good: list[bytes]) -> list[bytes]:
    """Each payload with a few bytes past its header changed, a third of them also cut short."""
    bad = []
    for p in good:
        mutated = bytearray(p)
        for _ in range(rnd.randint(1, 3)):
            mutated[rnd.randint(5, len(p) - 1)] = rnd.randrange(256)
        bad.append(bytes(mutated[: rnd.randint(5, len(mutated))] if rnd.random() < 0.3 else mutated))
    return bad


def _text(column: pa.Array) -> str:
    return str(column.to_pylist())  # NaN equal to NaN


@pytest.mark.parametrize("permissive", [False, True])
@pytest.mark.parametrize("pair", ["kitchen", "resolved"])
def test_cut_and_corrupted_payloads_fail_the_rows_fastavro_fails(permissive, pair):
    """Same rows failed, same column otherwise; where the compiled decoder cannot tell what fastavro would
    answer (a negative union index fastavro counts from the end, a uuid in another spelling, a date past
    Python's) it declines and fastavro reads the column."""
    compared = compiled = 0
    for seed in range(40):
        rnd = random.Random(seed)
        client = _registry()
        schema, options = (KITCHEN, {}) if pair == "kitchen" else (WRITER, {"reader_schema": READER})
        values = [_value(schema, rnd, {}) for _ in range(8)]
        if schema is WRITER:
            for v in values:
                v["by"] = v["s"].encode()
        good = _write(client, "t-value", schema, values)
        bad = _corrupted(rnd, good)
        for k in range(0, len(bad), 2):  # small columns: a decline hands the whole column to fastavro
            column = [good[k], bad[k], bad[k + 1]]
            try:
                (col, failed), (col2, failed2), _ = _both(client, column, permissive, declined_ok=True, **options)
            except (pa.ArrowInvalid, OverflowError):
                continue  # the Python path cannot make a column of what fastavro read (an int past 32 bits)
            compared += 1
            compiled += OUTCOMES[-2]
            assert failed == failed2, (seed, column)
            assert _text(col) == _text(col2), (seed, column)
    assert compared >= 120 and compiled >= 40, (compared, compiled)


# Found by tools/fuzz-decoders --target avro (each was a column the compiled path gave otherwise than fastavro's,
# or a bound it broke); the compiled path now reads these as the Python path does, or declines them.


def _zigzag_varint(v: int) -> bytes:
    u, out = (v << 1) ^ (v >> 63), bytearray()
    u &= 2**64 - 1
    while True:
        out.append((u & 0x7F) | (0x80 if u > 0x7F else 0))
        u >>= 7
        if not u:
            return bytes(out)


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def _register(client, schema) -> int:
    return client.register_schema("t-value", Schema(__import__("json").dumps(schema), "AVRO"))


@pytest.mark.parametrize("permissive", [False, True])
def test_a_skipped_value_running_past_the_payload_is_fastavros_to_read(permissive):
    """fastavro skips a field the reader lacks by moving its position unchecked: a double cut short, a string of
    a negative length or one past the end still read as a record when nothing follows (it moved back, or past
    the end). The compiled path declined none of these: it failed the record."""
    client = _registry()
    for skipped, tails in [
        ("double", [b"", b"\x00\x00"]),
        ("boolean", [b""]),
        ("string", [b"\x08ab", b"\x01"]),
        ({"type": "fixed", "name": "F", "size": 4}, [b"\x01"]),
    ]:
        writer = {
            "type": "record",
            "name": "R",
            "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": skipped}],
        }
        sid = _register(client, writer)
        reader = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
        data = [_framed(sid, b"\x02" + tail) for tail in tails]
        (col, failed), (col2, failed2), _ = _both(client, data, permissive, declined_ok=True, reader_schema=reader)
        assert failed == failed2 == [] and col.to_pylist() == col2.to_pylist() == [{"a": 1}] * len(tails), skipped


def test_a_block_count_of_minus_two_to_the_63_is_fastavros_to_read():
    """fastavro negates a negative block count in 64 bits (-2**63 stays negative) and reads on: not an error
    the compiled path can name; it declines."""
    client = _registry()
    sid = _register(
        client, {"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}]}
    )
    data = [_framed(sid, _zigzag_varint(-(2**63)) + b"\x02\x04\x00")]
    (col, failed), (col2, failed2), _ = _both(client, data, declined_ok=True)
    assert failed == failed2 and col.to_pylist() == col2.to_pylist()
    assert not any(OUTCOMES), "the compiled decoder took the column"


def test_a_map_giving_one_key_twice_is_fastavros_to_read():
    """fastavro's dict keeps the last value of a key given twice, at the first one's place; an Arrow map would keep
    both entries: the compiled path declines (the sanitized fuzzer's seed 411847, case 480)."""
    client = _registry()
    sid = _register(
        client, {"type": "record", "name": "R", "fields": [{"name": "m", "type": {"type": "map", "values": "int"}}]}
    )
    # one block of three entries: "a" -> 1, "" -> 2, "a" -> 3
    data = [_framed(sid, b"\x06" + b"\x02a\x02" + b"\x00\x04" + b"\x02a\x06" + b"\x00")]
    (col, failed), (col2, failed2), _ = _both(client, data, declined_ok=True)
    assert failed == failed2 == [] and col.to_pylist() == col2.to_pylist() == [{"m": [("a", 3), ("", 2)]}]
    assert not any(OUTCOMES), "the compiled decoder took the column"


def test_a_long_read_as_a_float_rounds_through_a_double_as_the_python_path_does():
    """fastavro's float(v) then pyarrow's float32: two roundings, which land 2**54 + 2**30 + 1 on 2**54, where
    rounding the long straight to a float gave 2**54 + 2**31."""
    client = _registry()
    writer = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "x", "type": "long"}, {"name": "m", "type": {"type": "map", "values": "long"}}],
    }
    reader = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "x", "type": "float"}, {"name": "m", "type": {"type": "map", "values": "float"}}],
    }
    values = [2**54 + 2**30 + 1, -(2**54 + 2**30 + 1), 2**62 + 2**38 + 1, 2**53 + 1, 5]
    data = _write(client, "t-value", writer, [{"x": v, "m": {"k": v}} for v in values])
    col, _ = _same(client, data, reader_schema=reader)
    assert OUTCOMES[-2]
    assert col.to_pylist()[0]["x"] == 2.0**54


def test_a_payload_of_the_readers_own_schema_keeps_its_union_branch():
    """fastavro reads a payload whose schema is the reader's without resolving it: a long written in
    [boolean, float, long] stays a long, bytes in [string, bytes] stay bytes. The compiled program resolved
    them to the first branch they promote to (float, string: a string that is not UTF-8 failed the record)."""
    client = _registry()
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "n", "type": ["boolean", "float", "null", "long"]},
            {"name": "b", "type": ["null", "string", "bytes"]},
        ],
    }
    values = [{"n": ("long", 2**60 + 1), "b": ("bytes", b"\xff\xfe")}, {"n": ("float", 1.5), "b": ("string", "é")}]
    data = _write(client, "t-value", schema, values)
    col, _ = _same(client, data)
    assert OUTCOMES[-2]
    assert col.to_pylist()[0] == {"n": {"member0": None, "member1": None, "member2": 2**60 + 1},
                                  "b": {"member0": None, "member1": b"\xff\xfe"}}  # fmt: skip


def test_a_union_with_a_null_branch_spelled_as_a_type_is_fastavros_to_type():
    """{"type": "null"} is a member of the union's Arrow struct, yet the Python path's null is a null union: the
    compiled path gave a struct with every member null. It declines such a reader."""
    client = _registry()
    writer = {"type": "record", "name": "R", "fields": [{"name": "u", "type": [{"type": "null"}, "string"]}]}
    data = _write(client, "t-value", writer, [{"u": None}, {"u": None}])
    (col, failed), (col2, failed2), _ = _both(client, data, declined_ok=True)
    assert failed == failed2 and col.to_pylist() == col2.to_pylist() == [{"u": None}] * 2
    assert not any(OUTCOMES)


@pytest.mark.parametrize(
    "added",
    [
        {"name": "rec", "type": {"type": "record", "name": "Q", "fields": [{"name": "q", "type": "int", "default": 7}]},
         "default": {}},  # a field left out: fastavro's reader gives {} (q null), its writer filled q = 7
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"},
         "default": "12345678-1234-5678-1234-56781234ABCD"},  # lower-cased by the compiled path
    ],
)  # fmt: skip
def test_a_default_read_back_otherwise_than_as_written_is_fastavros(added):
    """fastavro hands a reader field's default out as written in the schema; the compiled program encodes it
    with fastavro's writer and reads it: a record's missing field filled in, a uuid lower-cased. Declined."""
    client = _registry()
    writer = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    reader = dict(writer, fields=[*writer["fields"], added])
    data = _write(client, "t-value", writer, [{"a": 1}, {"a": 2}])
    (col, failed), (col2, failed2), _ = _both(client, data, declined_ok=True, reader_schema=reader)
    assert failed == failed2 and col.to_pylist() == col2.to_pylist()
    assert not any(OUTCOMES)


def test_items_of_no_bytes_block_after_block_are_bounded_by_the_payload():
    """Each block's count was bounded by the bytes left, not all of a record's blocks together: an array of
    nulls in blocks each as long as the bytes after it held ~L**2/2 items for L bytes (a 60 KB record: 229
    million, 62 MB, 1.7 s). The compiled path declines more items than bytes."""
    client = _registry()
    sid = _register(
        client, {"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}
    )
    counts, after = [], 1
    while after < 300:
        counts.append(after)
        after += len(_zigzag_varint(after))
    payload = b"".join(_zigzag_varint(n) for n in reversed(counts)) + b"\x00"
    (col, failed), (col2, failed2), _ = _both(client, [_framed(sid, payload)], declined_ok=True)
    assert not any(OUTCOMES), "the compiled decoder took the column"
    assert failed == failed2 and len(col.to_pylist()[0]["a"]) == sum(counts) > 10 * len(payload)
    # as many items as bytes: still the compiled path's (a null takes no byte, its count does)
    few = _framed(sid, _zigzag_varint(3) + b"\x00\x00\x00")
    (col, _), _, _ = _both(client, [few], declined_ok=True)
    assert OUTCOMES[-2] and col.to_pylist() == [{"a": [None, None, None]}]


def test_a_program_aiming_ops_at_the_wrong_builders_neither_writes_past_them_nor_spins():
    """The C interpreter checks a program's builder, const and jump indexes; ops aimed at builders of another
    kind wrote a bit past a bitmap (a row closed on a boolean builder by a record of no fields, then a boolean
    into it: a null pointer), and a map naming one builder as both its entries and its keys chased its own rows
    for ever. Programs come from _avro_plan, never like these: the fuzzer's calls with a word changed found them."""
    from array import array

    from fsm_consumer.schemas import _avro_plan as plan

    op = plan.OP
    record = pa.array([b"\x00\x00\x00\x00\x00\x01"], pa.binary())  # schema id 0, payload: true
    code = array("q", [1, op["RECORD"], 0, 2, 7, 11, 0, op["RECORD"], 1, 0, 0, op["BOOL"], 1])
    cols = _avro_columns._cavro.Columns(((plan.K_STRUCT, (1,)), (plan.K_BOOL, ())))
    assert cols.decode(code, (), 0, *record.buffers(), 0, 0, 1)[:2] == (1, 0)
    cols.finish()
    record = pa.array([b"\x00\x00\x00\x00\x00\x02\x02a\x00"], pa.binary())  # a map of one entry, "a": null
    code = array("q", [1, op["RECORD"], 0, 1, 6, 0, op["MAP"], 1, 11, 3, 3, op["NULL"], -1])
    spec = ((plan.K_STRUCT, (1,)), (plan.K_LIST, (2,)), (plan.K_STRUCT, (3,)), (plan.K_BIN, ()))
    cols = _avro_columns._cavro.Columns(spec)
    assert cols.decode(code, (), 0, *record.buffers(), 0, 0, 1)[:2] == (1, 0)
    cols.finish()


@pytest.mark.parametrize("permissive", [False, True])
def test_a_named_type_taken_for_a_union_branch_of_another_kind_by_its_name_is_fastavros(permissive):
    """fastavro matches named types by name alone: a fixed N written where the reader has [record N, float]
    goes to the record branch (the Python path's conversion then fails the row: a SchemaError), where the
    compiled program found no branch (a SchemaDecodeError). Declined."""
    client = _registry()
    sid = _register(client, {"type": "fixed", "name": "N", "size": 2})
    reader = [{"type": "record", "name": "N", "fields": [{"name": "a", "type": "int"}]}, "float"]
    (col, failed), (col2, failed2), _ = _both(
        client, [_framed(sid, b"\x01\x02")], permissive, declined_ok=True, reader_schema=reader
    )
    assert failed == failed2 and col.to_pylist() == col2.to_pylist()
    assert not any(OUTCOMES)


def _no_nulls_where_not_nullable(array: pa.Array) -> None:
    """No null in a child declared not nullable, whether or not its parent row is null (pyarrow refuses to
    cast such a column, and Spark's types are cast so)."""
    if pa.types.is_struct(array.type):
        for i, field in enumerate(array.type):
            child = array.field(i)
            if not field.nullable:
                assert child.null_count == 0, field.name
            _no_nulls_where_not_nullable(child)
    elif pa.types.is_list(array.type) or pa.types.is_map(array.type):
        _no_nulls_where_not_nullable(array.values)


@pytest.mark.parametrize("permissive", [False, True])
def test_null_rows_leave_no_null_in_a_field_declared_not_nullable(permissive):
    """A record that fails (permissive), a tombstone and a null union leave empty values, not nulls, in the
    fields of a null struct that are not nullable; the column casts to its own type, as Spark's source casts."""
    client = _registry()
    data = peer.payloads("avro", client, "t", 6)
    column = [data[0], None, b"not framed", data[1]] if permissive else [data[0], None, data[1]]
    (col, failed), (col2, failed2), _ = _both(client, column, permissive)
    assert failed == failed2 and col.to_pylist() == col2.to_pylist()
    assert col.null_count == (2 if permissive else 1)
    _no_nulls_where_not_nullable(col)
    col.cast(col.type)  # what failed in fsm_kafka's PERMISSIVE read
    nested = _write(client, "n-value", KITCHEN, [_value(KITCHEN, random.Random(3), {}) for _ in range(20)])
    col, _ = _same(client, nested, subject="n-value")
    _no_nulls_where_not_nullable(col)

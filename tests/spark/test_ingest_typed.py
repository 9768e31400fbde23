"""``fsm-consumer ingest --value-format``: typed tables. On the embedded broker the job starts the schema
registry and lands two schema versions' records as one typed table; against a broker and registry of the
user's, a rerun after a new version is registered lands the new columns beside the old rows (the table's
schema evolves), and every record is landed once."""

from __future__ import annotations

import decimal
import os
import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("confluent_kafka.schema_registry", reason="the schemas extra: pip install fsm_consumer[schemas]")

import pyarrow.parquet as pq  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from fsm_consumer.testing import _schema_peer as peer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the helpers beside this file
from test_ingest import committed_rows  # noqa: E402

N = 2_000


def _finished(proc, timeout=240) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def test_the_embedded_demo_lands_two_versions_as_one_typed_table(tmp_path, start_ingest, registry):
    # (the registry fixture: the job needs the registry's files, and skips with its fetch command without them)
    out = _finished(start_ingest("--to", str(tmp_path / "out"), "--value-format", "avro", "--records", str(N)))
    assert "schema: value struct<id:bigint,customer:string,amount:decimal(12,2)" in out, out
    values = pq.read_table(tmp_path / "out").column("value").to_pylist()
    assert sorted(v["id"] for v in values) == list(range(N))
    for v in values:
        i = v["id"]
        expected = peer.record(i, 1 if i < N // 2 else 2)
        assert v["amount"] == expected["amount"] and v["customer"] == expected["customer"]
        assert v["ship"] == expected["ship"] and v["tags"] == expected["tags"]
        # version 1's records resolved to version 2: its defaults
        assert (v["note"], v["qty"]) == ((f"n{i}", i % 7) if i >= N // 2 else ("none", 1))


@pytest.mark.brokers("tansu")
def test_a_new_version_registered_while_the_job_runs_adds_its_columns_beside_the_old_rows(
    tmp_path, broker, make_topic, registry, start_ingest
):
    """A running job restarts its query with the new version when its first record comes: every record of it
    is landed with its new fields, none resolved to the older version; the rows landed before keep theirs."""
    topic = make_topic(2)
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    serializers = peer.serializers("avro", client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

    def produce(version, ids):
        for i in ids:
            producer.produce(topic, value=serializers[version](peer.record(i, version), ctx), partition=i % 2)
        assert producer.flush(30) == 0

    produce(1, range(100))
    out = tmp_path / "out"
    job = start_ingest(
        "--bootstrap-servers", broker.bootstrap_servers, "--schema-registry", registry.url, "--topic", topic,
        "--to", str(out), "--value-format", "avro", "--trigger", "1 second", "--duration", "90",
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not any(out.glob("*.parquet")) and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.5)
    assert any(out.glob("*.parquet")), "the first version's records were not landed"
    produce(2, range(100, 200))  # registers version 2
    while committed_rows(out) < 200 and time.monotonic() < deadline and job.poll() is None:
        time.sleep(0.5)
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGINT)  # everything landed: Ctrl-C, not the rest of --duration
    text, _ = job.communicate(timeout=120)
    assert job.returncode in (0, 130), text
    assert "schema: a record of a newer version came; the query restarts with it" in text, text
    assert "Traceback" not in text and " ERROR " not in text, text  # the restart is a line, not Spark's task logs
    schemas = [line for line in text.splitlines() if line.startswith("schema: value ")]
    assert len(schemas) == 2 and "note" not in schemas[0] and "note:string" in schemas[1], text
    rows = {}
    for piece in pq.ParquetDataset(out).fragments:
        for v in piece.to_table().column("value").to_pylist():
            assert v["id"] not in rows, f"record {v['id']} landed twice"
            rows[v["id"]] = v
    assert sorted(rows) == list(range(200))
    assert all("note" not in rows[i] for i in range(100))  # landed with version 1, before version 2 existed
    assert all(rows[i]["note"] == f"n{i}" and rows[i]["amount"] == decimal.Decimal(i) / 100 for i in range(100, 200))

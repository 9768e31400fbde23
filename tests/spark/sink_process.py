"""A ConsumerSink in its own process (its own Spark, local[1], loopback) for the crash test.

    sink_process.py BOOTSTRAP GROUP TOPIC PATH ENDS_JSON MAX_RECORDS

Runs until the group's committed offsets reach ENDS_JSON ({"partition": end offset}), then closes
and prints DONE. Prints one JSON line per micro-batch written (before its commit). With
SINK_HOLD_BATCH=N it prints HOLD for batch N and sleeps before committing it, so the test can kill
it between that write and its commit.
"""

from __future__ import annotations

import json
import os
import sys
import time


def out(**kw) -> None:
    print(json.dumps(kw), flush=True)


def main() -> None:
    bootstrap, group, topic, path, ends_json, max_records = sys.argv[1:7]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from fsm_consumer import Consumer, TopicPartition
    from fsm_consumer.spark import ConsumerSink

    hold = int(os.environ.get("SINK_HOLD_BATCH", "0"))
    ends = {TopicPartition(topic, int(p)): end for p, end in json.loads(ends_json).items()}
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("sink-process")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # follower_sync_delay_ms: Tansu 0.6 wants the leader's SyncGroup first (see tests/integration/group)
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        follower_sync_delay_ms=400,
        request_timeout_ms=5000,
    )

    def written(batch) -> None:
        offsets = {tp.partition: [batch.first_offsets[tp], n] for tp, n in batch.next_offsets.items()}
        out(ev="hold" if batch.number == hold else "written", batch=batch.number, offsets=offsets)
        if batch.number == hold:
            time.sleep(600)  # killed here: written, not committed

    sink = ConsumerSink(consumer, spark, path, max_records=int(max_records), max_wait_ms=500, on_written=written)
    start = {tp: consumer.committed(tp) or 0 for tp in ends}

    def caught_up() -> bool:
        return all(sink.committed.get(tp, start[tp]) >= end for tp, end in ends.items())

    sink.subscribe([topic])
    sink.run(until=caught_up, stop_after_ms=120_000)
    consumer.close()
    spark.stop()
    out(ev="done", caught_up=caught_up())


if __name__ == "__main__":
    main()

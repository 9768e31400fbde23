"""A group member in its own process, for kill tests: prints JSON lines of what it owns and consumes."""

import json
import sys
import time

from fsm_consumer.consumer import Consumer, ConsumerRebalanceListener


def out(**kw):
    print(json.dumps(kw), flush=True)


class Listener(ConsumerRebalanceListener):
    def on_partitions_assigned(self, assigned):
        out(ev="assigned", parts=sorted(tp.partition for tp in assigned), t=time.monotonic())

    def on_partitions_revoked(self, revoked):
        out(ev="revoked", parts=sorted(tp.partition for tp in revoked), t=time.monotonic())


def main():
    bootstrap, group, topic, strategy = sys.argv[1:5]
    c = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="child",
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        auto_offset_reset="earliest",
        auto_commit_interval_ms=200,
        partition_assignment_strategy=[strategy],
        follower_sync_delay_ms=400,
    )
    c.subscribe([topic], listener=Listener())
    while True:
        for tp, records in c.poll(timeout_ms=100).items():
            out(ev="records", p=tp.partition, offsets=[r.offset for r in records])


if __name__ == "__main__":
    main()

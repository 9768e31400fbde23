"""A ParallelConsumer in its own process, for the crash test: appends "partition offset" per handled
record to a log file (written before the handler returns, so a handled record is in the log before
its completion can be committed); SIGKILL ends it without any goodbye."""

import random
import sys
import threading
import time

from fsm_consumer import Consumer
from fsm_consumer.parallel import ParallelConsumer


def main():
    bootstrap, group, topic, log_path, total = sys.argv[1:6]
    total = int(total)
    log = open(log_path, "a", buffering=1)
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    consumer.subscribe([topic])
    rng = random.Random()

    def handler(record):
        time.sleep(rng.random() * 0.002)
        log.write(f"{record.partition} {record.offset}\n")

    with ParallelConsumer(consumer, handler, parallelism=8, commit_interval_ms=200) as pc:

        def stop_when_caught_up():  # the restarted run ends once the group's offsets reach the end
            while True:
                time.sleep(0.2)
                m = pc.metrics()
                parts = m["partitions"]
                if (
                    len(parts) == 4
                    and all(p["committed"] is not None and p["out"] == 0 for p in parts.values())
                    and sum(p["committed"] for p in parts.values()) >= total
                ):
                    pc.stop()
                    return

        threading.Thread(target=stop_when_caught_up, daemon=True).start()
        pc.run()
    consumer.close()
    print("finished", flush=True)


if __name__ == "__main__":
    main()

"""One share group member in its own process (so it can be frozen with SIGSTOP or killed with SIGKILL),
logging what it settled as JSON lines (what a share run watches), its consumer's history beside it
(``OUT.lib``, for ``fsm_consumer.history``'s share rules):

    python -m fsm_consumer.testing._share_member --bootstrap HOST:PORT --group G --topic T --name s0 \
        --out s0.jsonl [--mode implicit|explicit --release-every N --reject-every N --max-poll-records N \
        --work-ms MS]

A poll loop. Implicit mode: what a poll handed out is accepted by the next. Explicit mode: each record is
acknowledged: RELEASE at its first delivery when its offset is a multiple of ``--release-every`` (it comes
back counting up), REJECT when a multiple of ``--reject-every``, else ACCEPT. Lines: "ready" once subscribed,
"settled" with the offsets whose ACCEPT or REJECT the broker confirmed (the acknowledgement commit callback),
"closed". SIGTERM (or SIGINT) ends the loop; the consumer is closed (what it held is released).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from ..share import AcknowledgeType, ShareConsumer

__all__ = ["main"]


def _write(f: Any, lock: threading.Lock, event: str, **fields: Any) -> None:
    line = json.dumps({"t": round(time.monotonic() * 1000, 3), "event": event, **fields}) + "\n"
    with lock:
        if not f.closed:
            f.write(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for key in ("--bootstrap", "--group", "--topic", "--name", "--out"):
        ap.add_argument(key, required=True)
    ap.add_argument("--mode", choices=("implicit", "explicit"), default="implicit")
    ap.add_argument("--release-every", type=int, default=0)
    ap.add_argument("--reject-every", type=int, default=0)
    ap.add_argument("--max-poll-records", type=int, default=50)
    ap.add_argument("--work-ms", type=float, default=0.0)
    args = ap.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    lock = threading.Lock()
    given: dict[tuple[int, int], AcknowledgeType] = {}  # (partition, offset) -> the last acknowledgement of it
    with open(args.out, "a", encoding="utf-8", buffering=1) as f:

        def confirmed(offsets: dict[Any, set[int]], error: BaseException | None) -> None:
            if error is not None:
                return
            for tp, os_ in offsets.items():
                done = sorted(o for o in os_ if given.pop((tp.partition, o), None) is not AcknowledgeType.RELEASE)
                if done:
                    _write(f, lock, "settled", partition=tp.partition, offsets=done)

        def decide(partition: int, offset: int, count: int) -> AcknowledgeType:
            if args.release_every and offset % args.release_every == 0 and count == 1:
                return AcknowledgeType.RELEASE
            if args.reject_every and offset % args.reject_every == 0:
                return AcknowledgeType.REJECT
            return AcknowledgeType.ACCEPT

        consumer = ShareConsumer(
            args.topic,
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            client_id=args.name,
            share_acknowledgement_mode=args.mode,
            max_poll_records=args.max_poll_records,
            history_path=f"{args.out}.lib",
        )
        consumer.set_acknowledgement_commit_callback(confirmed)
        _write(f, lock, "ready", name=args.name)
        try:
            while not stop.is_set():
                for record in consumer.poll(timeout_ms=200):
                    if args.work_ms:
                        time.sleep(args.work_ms / 1000.0)
                    kind = (
                        decide(record.partition, record.offset, record.delivery_count)
                        if args.mode == "explicit"
                        else AcknowledgeType.ACCEPT
                    )
                    given[(record.partition, record.offset)] = kind
                    if args.mode == "explicit":
                        consumer.acknowledge(record, kind)
        except Exception as exc:  # noqa: BLE001 - reported in its lines, then closed
            _write(f, lock, "error", error=f"{type(exc).__name__}: {exc}")
        finally:
            consumer.close(timeout_ms=10_000)
            _write(f, lock, "closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""KafkaBroker's cluster ids: Kafka's format (a UUID in URL-safe base64, 22 characters), never beginning
with "-" (kafka-storage's command line took such an id for an option: a start in 64 failed)."""

from __future__ import annotations

import base64
import uuid

from fsm_consumer.broker._admin import new_cluster_id as _cluster_id


def test_cluster_ids_are_uuids_that_never_begin_with_a_dash():
    ids = [_cluster_id() for _ in range(5000)]  # ~78 of them would begin with "-" without the guard
    assert not any(i.startswith("-") for i in ids)
    for i in ids[:50]:
        assert len(i) == 22 and uuid.UUID(bytes=base64.urlsafe_b64decode(i + "=="))
    assert len(set(ids)) == len(ids)

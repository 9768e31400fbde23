"""The group's session timeout, read from the broker for the consumer protocol's lease (DescribeConfigs).

Under KIP-848 the broker owns the session timeout (``consumer.session.timeout.ms`` of the group, by default
the broker's ``group.consumer.session.timeout.ms``) and no heartbeat answer carries it. The member's lease
(the ``session`` timer of specs/consumer_membership.yaml) needs it, so it is asked for once the member has
joined, as a GROUP config (Apache Kafka 4.0+). A broker that will not say (an older one, or no
DESCRIBE_CONFIGS on the group) is warned about once and not asked again: the member then runs without a
lease, as the Java client always does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import kafka.errors as ke
from kafka.protocol.admin import DescribeConfigsRequest

from ..policy import Action, Backoffs, classify
from ._base import Outgoing

log = logging.getLogger("fsm_consumer.membership")

_GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
_KEY = "consumer.session.timeout.ms"


class SessionTimeoutLookup:
    """Asks the broker for the group's session timeout until it knows it or knows it cannot."""

    def __init__(self, group_id: str, retry_backoff_ms: float, retry_backoff_max_ms: float) -> None:
        self._group = group_id
        self.value_ms: float | None = None
        self.refused: str | None = None  # why the broker will not say (then never asked again)
        self._in_flight = False
        self._backoff = Backoffs(retry_backoff_ms, retry_backoff_max_ms)

    def poll(self, now: float, node: int | None, learned: Callable[[float], None]) -> list[Outgoing]:
        """The DescribeConfigs to send now, if any; ``learned(ms)`` is called when the answer names it."""
        if self.value_ms is not None or self.refused is not None or self._in_flight or node is None:
            return []
        if self._backoff.wait("describe", now) > 0:
            return []
        self._in_flight = True
        resource = DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=_GROUP_RESOURCE, resource_name=self._group, configuration_keys=[_KEY]
        )
        request = DescribeConfigsRequest(resources=[resource], include_synonyms=False)
        return [Outgoing(request, node, partial(self._on_answer, learned=learned))]

    def _on_answer(self, pending, now: float, learned: Callable[[float], None]) -> None:
        self._in_flight = False
        if pending.error is not None:
            if classify(pending.error) is Action.FATAL:
                self._refuse(f"{type(pending.error).__name__}: {pending.error}")
            else:
                self._backoff.failed("describe", now)  # the connection: asked again after a backoff
            return
        for result in pending.response.results:
            if result.error_code:
                said = f" ({result.error_message})" if result.error_message else ""
                self._refuse(ke.for_code(result.error_code).__name__ + said)
                return
            for config in result.configs:
                if config.name == _KEY and config.value and config.value.isdigit():
                    self.value_ms = float(config.value)
                    log.info("group %s: the broker's session timeout is %d ms", self._group, self.value_ms)
                    learned(self.value_ms)
                    return
        self._refuse(f"the answer has no {_KEY}")

    def _refuse(self, why: str) -> None:
        self.refused = why
        log.warning(
            "group %s: the broker did not give the group's session timeout (DescribeConfigs of %s: %s); "
            "without it this member cannot tell on its own that its session ran out while it was frozen or "
            "cut off from the coordinator, and may hand out records of partitions already given to another "
            "member until its next heartbeat is answered. Grant DESCRIBE_CONFIGS on the group to close that "
            "window (Apache Kafka 4.0+ answers it).",
            self._group,
            _KEY,
            why,
        )

"""Config ``api_version`` against the real (Tansu) broker: the release is learned, and a cap holds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from fsm_consumer.transport import ApiVersionTable, KafkaTransport, Pending

pytestmark = pytest.mark.integration


@pytest.fixture
def make_transport(broker) -> Iterator[Any]:
    made: list[KafkaTransport] = []

    def make(**config: Any) -> KafkaTransport:
        made.append(KafkaTransport({"bootstrap_servers": broker.bootstrap_servers, **config}))
        return made[-1]

    yield make
    for t in made:
        t.close()


def roundtrip(t: KafkaTransport, request: Any) -> Pending:
    p = t.send(request)
    end = time.monotonic() + 10
    while not p.done:
        assert time.monotonic() < end, f"not done: {p}"
        t.poll(100)
    assert p.error is None, repr(p.error)
    return p


def metadata(topic: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)


def test_broker_release_is_learned_from_the_handshake(make_transport, broker):
    t = make_transport()
    assert t.broker_release is None
    roundtrip(t, ApiVersionsRequest())
    release = t.broker_release
    assert isinstance(release, tuple) and len(release) >= 2 and release >= (3, 0)
    assert release == ApiVersionTable(broker.api_versions).broker_release  # (3, 9) for Tansu 0.6
    conn = t.connection(-1)
    assert conn is not None and dict(conn.versions.broker_versions) == broker.api_versions  # no cap: as is


def test_api_version_caps_every_request(make_transport, broker, make_topic):
    topic = make_topic()
    cap = BrokerVersionData(broker_version=(2, 0)).api_versions
    assert broker.api_versions[ApiKey.Metadata][1] > cap[ApiKey.Metadata][1]  # the cap really bites
    t = make_transport(api_version=(2, 0))
    p = roundtrip(t, metadata(topic))
    assert p.request.API_VERSION <= cap[ApiKey.Metadata][1] == 6
    assert p.request.API_VERSION == min(cap[ApiKey.Metadata][1], broker.api_versions[ApiKey.Metadata][1])
    assert [x.name for x in p.response.topics] == [topic] and p.response.topics[0].error_code == 0
    asked = roundtrip(t, ApiVersionsRequest())
    assert asked.request.API_VERSION <= cap[ApiKey.ApiVersions][1]
    conn = t.connection(-1)
    assert conn is not None
    assert all(hi <= cap[key][1] for key, (_, hi) in conn.versions.broker_versions.items())
    assert conn._handshake.api_versions_version <= cap[ApiKey.ApiVersions][1]  # the handshake was capped too
    # the release published is the broker's own, not the cap's
    assert t.broker_release == ApiVersionTable(broker.api_versions).broker_release


def test_an_uncapped_transport_uses_the_brokers_highest_metadata(make_transport, broker, make_topic):
    topic = make_topic()
    p = roundtrip(make_transport(), metadata(topic))
    assert p.request.API_VERSION == min(MetadataRequest.max_version, broker.api_versions[ApiKey.Metadata][1])

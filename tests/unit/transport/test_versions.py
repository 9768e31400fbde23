"""ApiVersionTable: picking versions and building requests."""

from __future__ import annotations

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest

from fsm_consumer.transport import (
    ApiVersionTable,
    TransportError,
    UnsupportedVersion,
    client_version_range,
    request_class,
)

# What a Kafka 4.0 broker advertises for a few APIs (api key -> (min, max)).
BROKER = {0: (0, 12), 1: (4, 17), 2: (1, 10), 3: (0, 13), 10: (0, 6), 18: (0, 4)}


@pytest.mark.parametrize("api", ["Fetch", "FetchRequest", ApiKey.Fetch, 1, FetchRequest, FetchRequest[7]])
def test_api_spellings_resolve_to_the_same_class(api):
    assert request_class(api) is FetchRequest


def test_unknown_apis():
    with pytest.raises(ValueError, match="unknown Kafka API"):
        request_class("Fetchh")
    with pytest.raises(ValueError, match="unknown Kafka API key"):
        request_class(999)
    with pytest.raises(TypeError):
        request_class(1.5)
    # A real API that kafka-python has no class for: no common version.
    with pytest.raises(UnsupportedVersion) as info:
        request_class(ApiKey.Vote)
    assert info.value.api_key == ApiKey.Vote


def test_client_range_comes_from_kafka_python():
    assert client_version_range("Fetch") == (0, FetchRequest.max_version)
    assert client_version_range(ApiKey.Metadata) == (0, MetadataRequest.max_version)


def test_pick_highest_common_version():
    table = ApiVersionTable(BROKER)
    assert table.pick_version("Fetch") == min(17, FetchRequest.max_version)
    assert table.pick_version(ApiKey.ListOffsets) == min(10, ListOffsetsRequest.max_version)
    assert table.pick_version(MetadataRequest) == min(13, MetadataRequest.max_version)


def test_client_max_bounds_the_choice():
    # A broker newer than kafka-python: we stay at what we can encode.
    table = ApiVersionTable({1: (4, 99)})
    assert table.pick_version("Fetch") == FetchRequest.max_version


def test_caller_bounds():
    table = ApiVersionTable(BROKER)
    assert table.pick_version("Fetch", max_version=12) == 12
    assert table.pick_version("Fetch", min_version=15) == 17
    with pytest.raises(UnsupportedVersion, match="no common FetchRequest version"):
        table.pick_version("Fetch", min_version=FetchRequest.max_version + 1)
    with pytest.raises(UnsupportedVersion):
        table.pick_version("Fetch", max_version=3)  # broker's floor is 4


def test_api_the_broker_lacks():
    table = ApiVersionTable(BROKER, node_id=4)
    with pytest.raises(UnsupportedVersion, match="does not support JoinGroupRequest") as info:
        table.pick_version("JoinGroup")
    assert info.value.api_key == ApiKey.JoinGroup
    assert info.value.node_id == 4


def test_disjoint_ranges():
    table = ApiVersionTable({3: (50, 60)})
    with pytest.raises(UnsupportedVersion, match="broker 50-60"):
        table.pick_version("Metadata")


def test_build_uses_picked_version_and_fields():
    table = ApiVersionTable(BROKER)
    request = table.build("Metadata", topics=None, allow_auto_topic_creation=False)
    assert isinstance(request, MetadataRequest)
    assert request.API_VERSION == table.pick_version("Metadata")
    assert request.topics is None and request.allow_auto_topic_creation is False
    assert table.build("Metadata", version=4).API_VERSION == 4


def test_from_api_versions_response():
    R = ApiVersionsResponse
    response = R(
        version=3,
        error_code=0,
        api_keys=[R.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in BROKER.items()],
    )
    table = ApiVersionTable.from_response(response, node_id=2)
    assert dict(table.broker_versions) == BROKER
    assert table.broker_release >= (3, 0)
    assert "node_id=2" in repr(table)


def test_from_rejected_api_versions_gives_retry_version():
    R = ApiVersionsResponse
    rejected = R(version=0, error_code=35, api_keys=[R.ApiVersion(api_key=18, min_version=0, max_version=2)])
    with pytest.raises(UnsupportedVersion) as info:
        ApiVersionTable.from_response(rejected)
    assert info.value.retry_version == 2
    # No ApiVersions entry at all: fall back to v0, as kafka-python does.
    with pytest.raises(UnsupportedVersion) as info:
        ApiVersionTable.from_response(R(version=0, error_code=35, api_keys=[]))
    assert info.value.retry_version == 0


def test_from_api_versions_other_error():
    with pytest.raises(TransportError, match="ClusterAuthorizationFailed"):
        ApiVersionTable.from_response(ApiVersionsResponse(version=0, error_code=31, api_keys=[]))


def test_broker_versions_are_read_only():
    table = ApiVersionTable(BROKER)
    with pytest.raises(TypeError):
        table.broker_versions[1] = (0, 0)

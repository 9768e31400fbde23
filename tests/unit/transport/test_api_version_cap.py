"""Config ``api_version`` (a broker release capping every request) and ``sock_chunk_bytes``."""

from __future__ import annotations

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.broker_version_data import BrokerVersionData
from kafka.protocol.metadata import MetadataRequest

from fsm_consumer._config import ConsumerConfig
from fsm_consumer.transport import ApiVersionTable, KafkaSettings, KafkaTransport, UnsupportedVersion
from fsm_consumer.transport._settings import _READ_CHUNK

METADATA, FETCH, API_VERSIONS = int(ApiKey.Metadata), int(ApiKey.Fetch), int(ApiKey.ApiVersions)


def release_table(release: tuple[int, ...]) -> dict[int, tuple[int, int]]:
    return dict(BrokerVersionData(broker_version=release).api_versions)


# -- ApiVersionTable.capped -------------------------------------------------------------------------


def test_capped_intersects_ranges_and_drops_what_the_cap_lacks():
    broker = ApiVersionTable({METADATA: (0, 12), FETCH: (4, 17), API_VERSIONS: (0, 4), 68: (0, 1)}, node_id=7)
    cap = {METADATA: (0, 6), FETCH: (0, 3), API_VERSIONS: (1, 2)}
    capped = broker.capped(cap)
    # Fetch 4-17 and 0-3 do not overlap: dropped; 68 is not in the cap: dropped
    assert dict(capped.broker_versions) == {METADATA: (0, 6), API_VERSIONS: (1, 2)}
    assert capped.pick_version(MetadataRequest) == 6
    with pytest.raises(UnsupportedVersion, match="does not support") as err:
        capped.pick_version(ApiKey.Fetch)
    assert err.value.node_id == 7  # the node is kept
    assert dict(broker.broker_versions)[FETCH] == (4, 17)  # the original is untouched


def test_capped_by_a_release_table_never_exceeds_it():
    broker = ApiVersionTable({key: (0, 99) for key in range(80)})
    cap = release_table((2, 0))
    capped = broker.capped(cap)
    assert dict(capped.broker_versions) == cap
    assert capped.pick_version(MetadataRequest) == cap[METADATA][1] == 6
    assert capped.broker_release == (2, 0)  # what the capped table looks like
    assert broker.capped({}).broker_versions == {}


# -- KafkaSettings from a plain dict ------------------------------------------------------------------


@pytest.mark.parametrize("value", [(2, 0), [2, 0], "2.0"])
def test_dict_api_version_becomes_the_release_table(value):
    s = KafkaSettings.from_config({"bootstrap_servers": "h:1", "api_version": value})
    assert s.api_version == (2, 0)
    assert dict(s.api_version_table) == release_table((2, 0))
    with pytest.raises(TypeError):
        s.api_version_table[METADATA] = (0, 99)  # kafka-python's shared data stays read-only


@pytest.mark.parametrize("value", [None, "auto"])
def test_no_api_version_means_no_cap(value):
    s = KafkaSettings.from_config({"api_version": value})
    assert s.api_version is None and s.api_version_table is None
    assert KafkaSettings.from_config({}).api_version_table is None


def test_an_unknown_patch_release_uses_the_release_below():
    s = KafkaSettings.from_config({"api_version": (3, 9, 7)})
    assert s.api_version == (3, 9, 7)
    assert dict(s.api_version_table) == release_table((3, 9))


@pytest.mark.parametrize("value", [(0, 9), (0, 8, 2), "x.y", "", (), (True, 0), (-1, 0), 3])
def test_bad_or_pre_api_versions_releases_are_refused(value):
    with pytest.raises(ValueError, match="api_version"):
        KafkaSettings.from_config({"api_version": value})


def test_sock_chunk_bytes_from_a_dict():
    assert KafkaSettings.from_config({}).sock_chunk_bytes == _READ_CHUNK
    assert KafkaSettings.from_config({"sock_chunk_bytes": 4096}).sock_chunk_bytes == 4096
    assert KafkaSettings.from_config({"sock.chunk.bytes": 8192}).sock_chunk_bytes == 8192  # dotted name
    for bad in (0, -5, "4096", True, 1.5):
        with pytest.raises(ValueError, match="sock_chunk_bytes"):
            KafkaSettings.from_config({"sock_chunk_bytes": bad})


# -- KafkaSettings from a ConsumerConfig -------------------------------------------------------------


def test_consumer_config_api_version_and_chunk_reach_the_transport():
    cfg = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:9999", api_version=(3, 9), sock_chunk_bytes=4096)
    t = KafkaTransport(cfg)
    try:
        assert t.settings.api_version == (3, 9)
        assert dict(t.settings.api_version_table) == release_table((3, 9))
        assert t.settings.sock_chunk_bytes == 4096
        assert len(t._read_buffer) == 4096  # one recv reads at most this much
        assert t.broker_release is None  # no connection has learned it yet
    finally:
        t.close()


def test_consumer_config_defaults_mean_no_cap():
    cfg = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:9999")
    s = KafkaSettings.from_config(cfg)
    assert s.api_version is None and s.api_version_table is None
    assert s.sock_chunk_bytes == cfg.sock_chunk_bytes


def test_consumer_config_string_release_is_capped_too():
    s = KafkaSettings.from_config(ConsumerConfig.from_kwargs(api_version="2.0"))
    assert s.api_version == (2, 0) and dict(s.api_version_table) == release_table((2, 0))

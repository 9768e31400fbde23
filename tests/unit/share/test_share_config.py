"""A ShareConsumer's settings: consumer-group keys refused naming what replaces them, its own keys checked."""

from __future__ import annotations

import pytest

from fsm_consumer import AcknowledgeType, ShareConsumer
from fsm_consumer.errors import ConfigError
from fsm_consumer.share import REFUSED, share_config


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_each_consumer_group_key_is_refused_naming_what_replaces_it(key):
    with pytest.raises(ConfigError) as raised:
        share_config(group_id="g", **{key: "x"})
    assert raised.value.key == key
    assert key in str(raised.value) and REFUSED[key].split(" ")[0] in str(raised.value)


def test_the_share_group_settings_are_named_for_the_start_and_isolation():
    with pytest.raises(ConfigError, match="share.auto.offset.reset"):
        share_config(group_id="g", auto_offset_reset="earliest")
    with pytest.raises(ConfigError, match="share.isolation.level"):
        share_config(group_id="g", isolation_level="read_committed")


def test_a_group_id_is_required():
    with pytest.raises(ConfigError, match="group_id") as raised:
        share_config(bootstrap_servers="localhost:9092")
    assert raised.value.key == "group_id"


@pytest.mark.parametrize(
    ("key", "value"), [("share_acknowledgement_mode", "manual"), ("share_acquire_mode", "record-limit")]
)
def test_the_share_keys_take_only_their_values(key, value):
    with pytest.raises(ConfigError, match=repr(value)) as raised:
        share_config(group_id="g", **{key: value})
    assert raised.value.key == key


def test_defaults_and_the_consumer_keys_pass_through():
    config, settings = share_config(group_id="g", max_poll_records=7, client_id="me")
    assert (settings.acknowledgement_mode, settings.acquire_mode) == ("implicit", "batch_optimized")
    assert (config.max_poll_records, config.client_id, config.group_id) == (7, "me", "g")
    assert config.enable_auto_commit is False  # nothing of the consumer's commit machinery runs
    _, explicit = share_config(group_id="g", share_acknowledgement_mode="explicit", share_acquire_mode="record_limit")
    assert (explicit.acknowledgement_mode, explicit.acquire_mode) == ("explicit", "record_limit")


def test_an_unknown_key_names_the_closest_one():
    with pytest.raises(ConfigError, match="max_poll_records"):
        share_config(group_id="g", max_poll_record=5)


def test_the_constructor_refuses_before_any_thread_starts():
    with pytest.raises(ConfigError, match="enable_auto_commit"):
        ShareConsumer("t", group_id="g", enable_auto_commit=True)


def test_acknowledge_types_are_the_wire_values():
    assert [int(t) for t in AcknowledgeType] == [1, 2, 3, 4]
    assert [t.name for t in AcknowledgeType] == ["ACCEPT", "RELEASE", "REJECT", "RENEW"]

"""ConsumerConfig: kafka-python's names and defaults; bad input names the key."""

import attrs
import kafka.errors
import pytest

from fsm_consumer._config import ConsumerConfig
from fsm_consumer.errors import ConfigError


def test_defaults_match_kafka_python_where_names_match():
    from kafka.consumer.group import KafkaConsumer

    ours = ConsumerConfig()
    theirs = KafkaConsumer.DEFAULT_CONFIG
    same = [
        "auto_offset_reset",
        "enable_auto_commit",
        "auto_commit_interval_ms",
        "fetch_min_bytes",
        "fetch_max_wait_ms",
        "fetch_max_bytes",
        "max_partition_fetch_bytes",
        "max_poll_records",
        "max_poll_interval_ms",
        "session_timeout_ms",
        "heartbeat_interval_ms",
        "isolation_level",
        "check_crcs",
        "request_timeout_ms",
        "retry_backoff_ms",
        "reconnect_backoff_ms",
        "reconnect_backoff_max_ms",
        "metadata_max_age_ms",
        "security_protocol",
        "ssl_check_hostname",
        "exclude_internal_topics",
        "connections_max_idle_ms",
        "max_in_flight_requests_per_connection",
    ]
    for key in same:
        assert getattr(ours, key) == theirs[key], key


def test_unknown_key_names_it_and_the_closest():
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_kwargs(max_poll_record=5)
    assert info.value.key == "max_poll_record"
    assert "did you mean 'max_poll_records'" in str(info.value)


def test_unknown_key_without_close_match():
    with pytest.raises(ConfigError, match="unknown config key 'zzz'$"):
        ConsumerConfig.from_kwargs(zzz=1)


@pytest.mark.parametrize(
    "key,value,allowed",
    [
        ("fetch_min_bytes", 0, "an integer >= 1"),
        ("fetch_min_bytes", True, "an integer >= 1"),
        ("auto_offset_reset", "first", "one of 'earliest', 'latest', 'none'"),
        ("isolation_level", "committed", "one of 'read_uncommitted', 'read_committed'"),
        ("enable_auto_commit", "yes", "True or False"),
        ("value_deserializer", 42, "a callable, an object with deserialize(topic, headers, data), or None"),
        ("group_id", "", "a non-empty string or None"),
        ("partition_assignment_strategy", ["sticky", "fastest"], "names range, roundrobin"),
        ("sasl_mechanism", "GSSAPI", "one of 'PLAIN'"),
    ],
)
def test_bad_value_names_key_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_kwargs(**{key: value})
    msg = str(info.value)
    assert info.value.key == key and repr(value if key != "partition_assignment_strategy" else "fastest") in msg
    assert allowed in msg


def test_cross_checks():
    with pytest.raises(ConfigError, match="heartbeat_interval_ms.*session_timeout_ms"):
        ConsumerConfig.from_kwargs(session_timeout_ms=3000, heartbeat_interval_ms=3000)
    # specs/membership.yaml's relation join_backoff_within_session: refused naming both keys
    with pytest.raises(ConfigError, match="retry_backoff_ms.*session_timeout_ms") as info:
        ConsumerConfig.from_kwargs(session_timeout_ms=10_000, heartbeat_interval_ms=1000, retry_backoff_ms=10_000)
    assert info.value.key == "retry_backoff_ms"
    ConsumerConfig.from_kwargs(session_timeout_ms=10_000, heartbeat_interval_ms=1000, retry_backoff_ms=9_999)
    with pytest.raises(ConfigError, match="group_instance_id.*group_id"):
        ConsumerConfig.from_kwargs(group_instance_id="a")
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        ConsumerConfig.from_kwargs(security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="sasl_plain_username"):
        ConsumerConfig.from_kwargs(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN")


def test_bootstrap_servers_forms():
    assert ConsumerConfig.from_kwargs(bootstrap_servers="a:1, b").bootstrap_servers == ("a:1", "b:9092")
    assert ConsumerConfig.from_kwargs(bootstrap_servers=["h:2"]).bootstrap_servers == ("h:2",)
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        ConsumerConfig.from_kwargs(bootstrap_servers="")


def test_kafka_python_only_keys_are_accepted_and_alias_maps():
    cfg = ConsumerConfig.from_kwargs(api_version=(2, 8), selector=object, receive_message_max_bytes=2048)
    assert cfg.receive_buffer_max == 2048


def test_frozen_and_secrets_not_in_repr():
    cfg = ConsumerConfig.from_kwargs(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="u",
        sasl_plain_password="hunter2",
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        cfg.group_id = "x"
    assert "hunter2" not in repr(cfg)
    assert cfg.get("sasl_plain_username") == "u" and cfg.replace(group_id="g").group_id == "g"


def test_errors_are_kafka_python_errors():
    assert issubclass(ConfigError, kafka.errors.KafkaError) and issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(
    "key, value, instead",
    [
        ("partition_assignment_strategy", ["range"], "group_remote_assignor"),
        ("session_timeout_ms", 10_000, "group.consumer.session.timeout.ms"),
        ("heartbeat_interval_ms", 1000, "group.consumer.heartbeat.interval.ms"),
    ],
)
def test_the_consumer_protocol_refuses_the_settings_the_broker_now_owns(key, value, instead):
    """As the Java client: with group_protocol="consumer" these are the broker's, and a value given is an error
    naming the key and what replaces it, never silently ignored."""
    with pytest.raises(ConfigError, match=instead) as caught:
        ConsumerConfig.from_kwargs(group_id="g", group_protocol="consumer", **{key: value})
    assert caught.value.key == key


def test_the_remote_assignor_needs_the_consumer_protocol_and_may_be_the_brokers_own():
    config = ConsumerConfig.from_kwargs(group_id="g", group_protocol="consumer", group_remote_assignor="range")
    assert (config.group_protocol, config.group_remote_assignor) == ("consumer", "range")
    assert ConsumerConfig.from_kwargs(group_id="g").group_protocol == "classic"  # the Java client's default
    with pytest.raises(ConfigError, match="needs group_protocol='consumer'"):
        ConsumerConfig.from_kwargs(group_id="g", group_remote_assignor="range")
    # a broker may be given its own assignors (group.consumer.assignors): the broker says if it knows the name
    custom = ConsumerConfig.from_kwargs(group_id="g", group_protocol="consumer", group_remote_assignor="rack-aware")
    assert custom.group_remote_assignor == "rack-aware"
    with pytest.raises(ConfigError, match="group_remote_assignor"):
        ConsumerConfig.from_kwargs(group_id="g", group_protocol="consumer", group_remote_assignor=" ")
    with pytest.raises(ConfigError, match="group_protocol"):
        ConsumerConfig.from_kwargs(group_id="g", group_protocol="next")


def test_client_id_none_is_the_default_and_typed_as_a_string():
    """kafka-python lets client_id=None through; here it means the default, so the id that names the
    machines, the background thread and the history is always a string."""
    from fsm_consumer._config import ConsumerConfig

    default = ConsumerConfig.from_kwargs().client_id
    assert default.startswith("fsm-consumer-")
    assert ConsumerConfig.from_kwargs(client_id=None).client_id == default
    assert ConsumerConfig.from_kwargs(client_id="mine").client_id == "mine"

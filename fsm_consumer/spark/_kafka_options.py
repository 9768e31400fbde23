"""The ``kafka.*`` options of an fsm_kafka read: the fsm_consumer ``Consumer``'s config keys written the Java
way (``kafka.security.protocol`` -> ``security_protocol``), values converted to the key's type, a few Java
client names translated (``kafka.sasl.jaas.config``, ``kafka.ssl.endpoint.identification.algorithm``, the
trust and key stores through ``_stores``), Spark's refusals kept."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from typing import Any

from ._option_values import KafkaOptionError, _bool, _long
from ._stores import OPTIONS as STORE_OPTIONS
from ._stores import StoreError, Stores, take

# kafka.* options Spark refuses (or that would break the read), with what to use instead
_KAFKA_REFUSED = {
    "group.instance.id": "the source reads without a consumer group",
    "auto.offset.reset": "set the source option startingOffsets instead",
    "enable.auto.commit": "the source never commits consumer offsets (see commitToGroup)",
    "key.deserializer": "keys are always read as bytes; deserialize the key column with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize the value column with DataFrame operations",
    "interceptor.classes": "consumer interceptors are not supported",
    "partition.assignment.strategy": "the source assigns partitions itself",
}
# config keys that take Python objects, which a string option cannot give
_OBJECT_KEYS = frozenset(
    {
        "ssl_context",
        "sasl_oauth_token_provider",
        "default_offset_commit_callback",
        "key_deserializer",
        "value_deserializer",
        "partition_assignment_strategy",
    }
)
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _config_types() -> dict[str, str]:
    import attrs

    from .._config import ConsumerConfig

    return {a.name: str(a.type) for a in attrs.fields(ConsumerConfig)}


def convert_option(option: str, key: str, value: str, kind: str) -> Any:
    """A string option as a config key's type (``kind``: the attrs type as text, "int | None"...), or the
    KafkaOptionError naming the option; the sink's producer settings go through it too."""
    text = str(value).strip()
    if kind == "bool":
        return _bool(option, text)
    if kind.startswith("int"):
        if kind.endswith("None") and text.lower() in ("", "none", "null"):
            return None
        return _long(option, text, minimum=-(2**63))
    if kind.startswith("float"):
        try:
            return float(text) if text.lower() not in ("inf", "infinity") else math.inf
        except ValueError:
            raise KafkaOptionError(option, f"{value!r} is not a number") from None
    if kind.endswith("None") and text == "":
        return None
    return text


def _jaas(value: str) -> dict[str, str]:
    """The username and password of a Java ``sasl.jaas.config`` (Plain or Scram login module)."""
    found = {k.lower(): v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS.findall(value)}
    if not {"username", "password"} <= set(found) or "oauthbearer" in value.lower():
        raise KafkaOptionError(
            "kafka.sasl.jaas.config",
            "only a PlainLoginModule or ScramLoginModule with "
            'username="..." password="..." can be translated; or set kafka.sasl.plain.username '
            "and kafka.sasl.plain.password",
        )
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def _stores(given: dict[str, str]) -> Stores | None:
    """The trust and key store options taken out of ``given`` (the kafka.* options), checked."""
    names = {option: option[len("kafka.") :] for option in given}
    java = {name: given[option] for option, name in names.items() if name in STORE_OPTIONS}
    for name in java:
        del given["kafka." + name]
    try:
        return take(java)
    except StoreError as exc:
        raise KafkaOptionError(exc.option, str(exc)) from None


def _kafka_params(given: Mapping[str, str]) -> tuple[str | None, dict[str, Any]]:
    """(bootstrap servers, the other Consumer keyword arguments) from the kafka.* options."""
    types = _config_types()
    servers = None
    params: dict[str, Any] = {}
    for option, value in given.items():
        name = option[len("kafka.") :]
        if name == "bootstrap.servers":
            servers = str(value).strip()
            continue
        if name in _KAFKA_REFUSED:
            raise KafkaOptionError(option, f"not allowed: {_KAFKA_REFUSED[name]}")
        if name == "sasl.jaas.config":
            params.update(_jaas(str(value)))
            continue
        if name == "ssl.endpoint.identification.algorithm":
            params["ssl_check_hostname"] = str(value).strip().lower() == "https"
            continue
        key = name.replace(".", "_")
        if key == "bootstrap_servers":
            servers = str(value).strip()
            continue
        if key in _OBJECT_KEYS:
            raise KafkaOptionError(
                option, f"config key {key!r} takes a Python object, which a string option cannot give"
            )
        if key not in types:
            options = sorted("kafka." + k.replace("_", ".") for k in types if k not in _OBJECT_KEYS)
            close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise KafkaOptionError(
                option,
                f"no fsm_consumer config key {key!r} (kafka.* options are the "
                f"consumer's config keys with dots for underscores){hint}",
            )
        params[key] = convert_option(option, key, value, types[key])
    return servers, params


def _check_consumer_config(servers: str, params: dict[str, Any]) -> None:
    """Build the config once, so a bad value fails here, named as the option it came from."""
    from .._config import ConsumerConfig

    try:
        ConsumerConfig.from_kwargs(**params, bootstrap_servers=servers)
    except ValueError as exc:  # a ConfigError, caught by its base: naming it would import kafka-python (_config)
        key = getattr(exc, "key", None)
        option = "kafka." + key.replace("_", ".") if key else "kafka.*"
        if key == "bootstrap_servers":
            option = "kafka.bootstrap.servers"
        raise KafkaOptionError(option, str(exc)) from None

"""API version negotiation against a broker's ApiVersions answer.

The client side of each range comes from kafka-python's request classes
(``Request.min_version``/``max_version``), so upgrading kafka-python widens
what we can speak without touching this module.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

# Importing these packages defines every request class, so that
# ApiMessage.__subclasses__() below sees them all.
import kafka.protocol.admin  # noqa: F401
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
import kafka.protocol.sasl  # noqa: F401
from kafka.errors import for_code
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

from .. import protocol as _protocol  # noqa: F401  (the messages kafka-python lacks: ConsumerGroupHeartbeat)
from ._errors import TransportError, UnsupportedVersion

__all__ = ["Api", "ApiVersionTable", "client_version_range", "request_class"]

# "Fetch", "FetchRequest", ApiKey.Fetch, 1 or a kafka-python request class.
Api = str | int | type[ApiMessage]

_UNSUPPORTED_VERSION = 35  # Kafka error code UNSUPPORTED_VERSION


@functools.cache
def _request_classes() -> Mapping[int, type[ApiMessage]]:
    found: dict[int, type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # Skip the per-version wrappers kafka-python derives from each class.
        if cls._class_version is None and cls.is_request():
            found[cls.API_KEY] = cls
    return MappingProxyType(found)


def request_class(api: Api) -> type[ApiMessage]:
    """The kafka-python request class (unversioned) for ``api``.

    Raises ValueError for a name or key Kafka does not define and
    UnsupportedVersion for a real API that kafka-python cannot encode.
    """
    if isinstance(api, type) and issubclass(api, ApiMessage):
        key = api.API_KEY
    elif isinstance(api, str):
        name = api.removesuffix("Request")
        try:
            key = ApiKey[name]
        except KeyError:
            raise ValueError(f"unknown Kafka API {api!r}") from None
    elif isinstance(api, int):
        try:
            key = ApiKey(api)
        except ValueError:
            raise ValueError(f"unknown Kafka API key {api}") from None
    else:
        raise TypeError(f"expected an API name, key or request class, got {api!r}")
    cls = _request_classes().get(key)
    if cls is None:
        raise UnsupportedVersion(f"kafka-python has no request class for api key {int(key)}", api_key=int(key))
    return cls


def client_version_range(api: Api) -> tuple[int, int]:
    """(min, max) versions kafka-python can encode for ``api``.

    kafka-python reports min 0 for every API: it ignores the schema's
    validVersions floor and leaves the broker's range to decide.
    """
    cls = request_class(api)
    return cls.min_version, cls.max_version


class ApiVersionTable:
    """The versions one broker supports, and the choice of version per request."""

    __slots__ = ("_broker", "_node_id")

    def __init__(self, broker_versions: Mapping[int, tuple[int, int]], *, node_id: int | None = None) -> None:
        self._broker = MappingProxyType({int(k): (lo, hi) for k, (lo, hi) in broker_versions.items()})
        self._node_id = node_id

    @classmethod
    def from_response(cls, response: Any, *, node_id: int | None = None) -> ApiVersionTable:
        """Build from a decoded ApiVersionsResponse.

        If the broker rejected our ApiVersions version, raises
        UnsupportedVersion whose ``retry_version`` is the highest ApiVersions
        version the broker listed (0 when it listed none), which is how
        kafka-python retries the handshake.
        """
        if response.error_code == _UNSUPPORTED_VERSION:
            retry = next((e.max_version for e in response.api_keys if e.api_key == ApiKey.ApiVersions), 0)
            raise UnsupportedVersion(
                f"broker rejected our ApiVersions version; it supports up to v{retry}",
                api_key=ApiKey.ApiVersions,
                node_id=node_id,
                retry_version=retry,
            )
        if response.error_code:
            raise TransportError(f"ApiVersions failed: {for_code(response.error_code).__name__}", node_id=node_id)
        return cls({e.api_key: (e.min_version, e.max_version) for e in response.api_keys}, node_id=node_id)

    @property
    def broker_versions(self) -> Mapping[int, tuple[int, int]]:
        return self._broker

    @property
    def broker_release(self) -> tuple[int, ...]:
        """Kafka release the version table looks like, e.g. (3, 9); for logs."""
        return infer_broker_version_from_api_versions(self._broker)

    def capped(self, cap: Mapping[int, tuple[int, int]]) -> ApiVersionTable:
        """This table narrowed to ``cap`` (a broker release's table, config ``api_version``).

        An API missing from ``cap``, or whose ranges do not overlap, is dropped: that release
        does not speak it, so pick_version refuses it as the broker not supporting it.
        """
        narrowed = {}
        for key, (lo, hi) in self._broker.items():
            limit = cap.get(key)
            if limit is not None and max(lo, limit[0]) <= min(hi, limit[1]):
                narrowed[key] = (max(lo, limit[0]), min(hi, limit[1]))
        return ApiVersionTable(narrowed, node_id=self._node_id)

    def pick_version(self, api: Api, *, min_version: int = 0, max_version: int | None = None) -> int:
        """Highest version both sides support, within [min_version, max_version].

        The bounds let a caller demand a feature (e.g. Fetch >= 4 for
        read_committed) or cap one it does not handle yet.
        """
        # Same rule as kafka-python's BrokerVersionData.api_version, which we
        # do not call: it raises AttributeError for ApiKey operands and can
        # return a version below the caller's min_version.
        cls = request_class(api)
        key = cls.API_KEY
        low = max(min_version, cls.min_version)
        high = cls.max_version if max_version is None else min(max_version, cls.max_version)
        broker = self._broker.get(key)
        if broker is None:
            raise UnsupportedVersion(f"broker does not support {cls.name}", api_key=key, node_id=self._node_id)
        version = min(high, broker[1])
        if version < max(low, broker[0]):
            raise UnsupportedVersion(
                f"no common {cls.name} version: client {low}-{high}, broker {broker[0]}-{broker[1]}",
                api_key=key,
                node_id=self._node_id,
            )
        return version

    def build(self, api: Api, version: int | None = None, **fields: Any) -> ApiMessage:
        """A kafka-python request for ``api`` at ``version`` (default: pick_version).

        Fields absent from ``fields`` get the schema defaults for that version.
        """
        cls = request_class(api)
        if version is None:
            version = self.pick_version(cls)
        return cls(version=version, **fields)

    def __repr__(self) -> str:
        return f"ApiVersionTable(node_id={self._node_id}, apis={len(self._broker)})"

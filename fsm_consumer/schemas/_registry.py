"""The schema registry as the deserializers see it: schemas by id and a subject's latest version, through
confluent-kafka's ``SchemaRegistryClient`` (Confluent's REST API, which Apicurio's ``ccompat`` and Karapace
speak too), with the registry's troubles turned into the errors of ``_errors``.

A registry that does not answer is retried with backoff for up to ``timeout_s`` (warned about once per outage,
as the transport warns of a broker), then ``RegistryUnavailableError``: the deserializer runs inside poll(),
so a registry outage must end that call, not hang it; the record's position stays and the next poll() retries.
Answers are cached for the client's life: a schema id names one schema for ever.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from ._errors import RegistryAuthError, RegistryUnavailableError, SchemaError, SchemaNotFoundError


def _transport_error() -> Any:
    """What confluent-kafka's client raises when the registry is not reached: httpx2's, else httpx's."""
    try:
        import httpx2

        return httpx2.TransportError
    except ImportError:  # pragma: no cover - depends on the install
        import httpx

        return httpx.TransportError


TransportError = _transport_error()

log = logging.getLogger("fsm_consumer.schemas")

_RETRIED_STATUS = {408, 429, 500, 502, 503, 504}
_FIRST_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 2.0


class Registry:
    """A schema registry at ``url`` (several, comma-separated, are tried in turn).

    ``basic_auth``: ``"user:password"``; ``bearer_token``: a static token; ``ca_location``,
    ``cert_location``, ``key_location``: TLS files (https URLs). ``timeout_s`` bounds one lookup, retries
    included. ``client``: a ``SchemaRegistryClient`` made elsewhere, used instead of one made from these.
    ``shared``: one confluent-kafka client per process for these settings, whichever ``Registry`` asks (making
    one loads the CA bundle, about 25 ms even for an http URL: a Spark task made two per partition); schemas by
    id are the same for ever, but its latest versions are then another Registry's answers too: call
    ``refresh_latest`` first where a fresh one matters."""

    def __init__(
        self,
        url: str | None = None,
        *,
        basic_auth: str | None = None,
        bearer_token: str | None = None,
        ca_location: str | None = None,
        cert_location: str | None = None,
        key_location: str | None = None,
        timeout_s: float = 10.0,
        client: Any = None,
        shared: bool = False,
    ) -> None:
        if client is None:
            if not url:
                raise ValueError("Registry needs url (e.g. http://127.0.0.1:8081) or client")
            conf = _client_conf(url, timeout_s, basic_auth, bearer_token, ca_location, cert_location, key_location)
            client = _shared_client(conf) if shared else SchemaRegistryClient(conf)
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.url = url or "(a given client)"
        self.timeout_s = timeout_s
        self._client = client
        self._cache: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._down_since: float | None = None

    def schema(self, schema_id: int, fmt: str | None = None) -> Schema:
        """The schema registered under ``schema_id`` (``fmt="serialized"``: Protobuf as a descriptor)."""
        return self._cached(("id", schema_id, fmt), lambda: self._client.get_schema(schema_id, fmt=fmt), schema_id)

    def latest(self, subject: str, fmt: str | None = None) -> RegisteredSchema:
        """The latest version under ``subject``, asked once per client (``refresh_latest`` asks again)."""
        return self._cached(("latest", subject, fmt), lambda: self._client.get_latest_version(subject, fmt=fmt), None)

    def version(self, subject: str, version: int, fmt: str | None = None) -> RegisteredSchema:
        """One version of ``subject``: a reference's schema."""
        return self._cached(
            ("version", subject, version, fmt), lambda: self._client.get_version(subject, version, fmt=fmt), None
        )

    def reader(self, subject: str, reader_id: int | None) -> tuple[int, Schema]:
        """A reader schema and its id: the one registered under ``reader_id``, else ``subject``'s latest."""
        if reader_id is not None:
            return reader_id, self.schema(reader_id)
        registered = self.latest(subject)
        return registered.schema_id or 0, registered.schema

    def refresh_latest(self) -> None:
        """Forget the latest versions asked before: the next ``latest`` asks the registry again."""
        with self._lock:
            for key in [k for k in self._cache if k[0] == "latest"]:
                del self._cache[key]
        clear = getattr(self._client, "clear_latest_caches", None)  # confluent-kafka's client keeps its own
        if clear is not None:
            clear()

    def _cached(self, key: tuple, ask, schema_id: int | None):
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        got = self._ask(ask, key, schema_id)
        with self._lock:
            self._cache[key] = got
        return got

    def _ask(self, ask, key: tuple, schema_id: int | None):
        what = _what(key)
        deadline = time.monotonic() + self.timeout_s
        backoff = _FIRST_BACKOFF_S
        while True:
            try:
                got = ask()
            except SchemaRegistryError as exc:
                status = exc.http_status_code
                if status == 404:
                    if key[0] == "id":
                        raise SchemaNotFoundError(
                            f"the schema registry at {self.url} has no schema with id {schema_id}: the record was "
                            "written against another registry, or its schema was deleted",
                            schema_id=schema_id,
                        ) from exc
                    raise SchemaNotFoundError(
                        f"the schema registry at {self.url} has no {what}", schema_id=schema_id
                    ) from exc
                if status in (401, 403):
                    raise RegistryAuthError(
                        f"the schema registry at {self.url} refused {what} ({status}: {exc.error_message}): "
                        "check basic_auth / bearer_token and the principal's access",
                        schema_id=schema_id,
                    ) from exc
                if status not in _RETRIED_STATUS:
                    raise SchemaError(
                        f"the schema registry at {self.url} answered {status} for {what}: {exc.error_message}",
                        schema_id=schema_id,
                    ) from exc
                reason = f"HTTP {status}"
            except TransportError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if self._down_since is not None:
                    log.warning(
                        "schema registry at %s answers again after %.1f s",
                        self.url,
                        time.monotonic() - self._down_since,
                    )
                    self._down_since = None
                return got
            now = time.monotonic()
            if self._down_since is None:
                self._down_since = now
                log.warning(
                    "schema registry at %s: %s asking for %s; retrying for up to %.0f s",
                    self.url,
                    reason,
                    what,
                    self.timeout_s,
                )
            if now >= deadline:
                raise RegistryUnavailableError(
                    f"the schema registry at {self.url} did not answer for {what} within {self.timeout_s:g} s "
                    f"({reason}); the record stays unread and the next poll() tries again",
                    schema_id=schema_id,
                )
            time.sleep(min(backoff, max(0.0, deadline - now)))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)


def _what(key: tuple) -> str:
    if key[0] == "id":
        return f"schema id {key[1]}"
    if key[0] == "latest":
        return f"the latest version of subject {key[1]!r}"
    return f"version {key[2]} of subject {key[1]!r}"


_shared: dict[tuple, SchemaRegistryClient] = {}
_shared_lock = threading.Lock()


def _shared_client(conf: dict) -> SchemaRegistryClient:
    key = tuple(sorted(conf.items()))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = SchemaRegistryClient(conf)
        return _shared[key]


def _client_conf(url, timeout_s, basic_auth, bearer_token, ca_location, cert_location, key_location) -> dict:
    # retries are ours, bounded by timeout_s; so is each request (the client's default waits for ever)
    conf: dict[str, Any] = {"url": url, "max.retries": 0, "timeout": timeout_s}
    if basic_auth:
        conf["basic.auth.user.info"] = basic_auth
    if bearer_token:
        conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
        conf["bearer.auth.token"] = bearer_token
        conf["bearer.auth.logical.cluster"] = ""
        conf["bearer.auth.identity.pool.id"] = ""
    if ca_location:
        conf["ssl.ca.location"] = ca_location
    if cert_location:
        conf["ssl.certificate.location"] = cert_location
    if key_location:
        conf["ssl.key.location"] = key_location
    return conf

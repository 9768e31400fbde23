"""What a connection says before it carries requests: the ApiVersions exchange (retried in the version a
v0 answer names, capped by config ``api_version``) and the SASL exchange (SaslHandshake, then
SaslAuthenticate tokens until the mechanism is done), with the errors worded for the user.

The connection owns the socket and the machine; this object owns the exchange's own state and tells the
connection its outcomes through the few methods of ``_Link``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kafka.errors import for_code
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from .._version import __version__
from ._base import Pending
from ._errors import AuthenticationError, TransportError, UnsupportedVersion
from ._sasl import SaslMechanism
from ._settings import KafkaSettings
from ._versions import ApiVersionTable

# ApiVersions v3+ must name the client (KIP-511); brokers reject empty names.
SOFTWARE_NAME = "fsm-consumer"
_ILLEGAL_SASL_STATE = 34  # IllegalSaslStateError.errno


class _Link(Protocol):
    """What the handshake needs of its connection."""

    node_id: int
    versions: ApiVersionTable | None

    def send_internal(self, request: ApiMessage, handler: Callable[[ApiMessage], None]) -> None: ...
    def io_failed(self, exc: TransportError) -> None: ...
    def authentication_failed(self, exc: AuthenticationError) -> None: ...
    def fire(self, trigger: str) -> None: ...
    def without(self, layer: str) -> str: ...


class Handshake:
    """One connection's ApiVersions and SASL exchanges; ``restart()`` before each new socket."""

    def __init__(
        self,
        link: _Link,
        settings: KafkaSettings,
        versions_known: Callable[[tuple[int, ...], ApiVersionTable], None] | None = None,
    ) -> None:
        self._link = link
        self._settings = settings
        # told the broker's release (before any cap) and the versions in use after each handshake
        self._versions_known = versions_known
        self._sasl: SaslMechanism | None = None
        self.api_versions_version = self._first_api_versions_version()

    def restart(self) -> None:
        self.api_versions_version = self._first_api_versions_version()

    def forget(self) -> None:
        """The socket closed: a SASL exchange under way is over."""
        self._sasl = None

    # -- ApiVersions --------------------------------------------------------------------------------
    def _first_api_versions_version(self) -> int:
        # config api_version caps the handshake too: it is a request like any other
        cap = self._settings.api_version_table
        limit = cap.get(ApiKey.ApiVersions) if cap is not None else None
        return ApiVersionsRequest.max_version if limit is None else min(ApiVersionsRequest.max_version, limit[1])

    def send_api_versions(self) -> None:
        version = self.api_versions_version
        if version >= 3:
            request = ApiVersionsRequest(
                version=version, client_software_name=SOFTWARE_NAME, client_software_version=__version__
            )
        else:
            request = ApiVersionsRequest(version=version)
        self._link.send_internal(request, self._on_api_versions)

    def _on_api_versions(self, response: ApiMessage) -> None:
        link = self._link
        try:
            table = ApiVersionTable.from_response(response, node_id=link.node_id)
        except UnsupportedVersion as exc:
            retry = exc.retry_version
            if retry is not None and 0 <= retry < self.api_versions_version:
                # The broker answered in v0 with the versions it speaks; ask again in one of them.
                self.api_versions_version = retry
                self.send_api_versions()
            else:
                link.io_failed(exc)
            return
        except TransportError as exc:
            link.io_failed(exc)
            return
        cap = self._settings.api_version_table
        link.versions = table if cap is None else table.capped(cap)
        if self._versions_known is not None:
            self._versions_known(table.broker_release, link.versions)  # the broker's own release, before any cap
        link.fire("versions_known")

    # -- SASL -----------------------------------------------------------------------------------------
    def start_sasl(self) -> None:
        link = self._link
        self._sasl = self._settings.new_sasl_mechanism()
        assert link.versions is not None
        try:
            # v0 would mean raw SASL tokens without SaslAuthenticate framing: not spoken here.
            version = link.versions.pick_version(SaslHandshakeRequest, min_version=1)
        except UnsupportedVersion as exc:
            link.authentication_failed(
                AuthenticationError(
                    f"SASL is not available: {exc.args[0]}: the listener does not speak SASL: use "
                    f"security_protocol={link.without('sasl')!r} or the broker's SASL port"
                )
            )
            return
        link.send_internal(SaslHandshakeRequest(version=version, mechanism=self._sasl.name), self._on_sasl_handshake)

    def _on_sasl_handshake(self, response: ApiMessage) -> None:
        assert self._sasl is not None
        if response.error_code:
            listed = list(response.mechanisms or ())
            offered = ", ".join(listed) or "none"
            error = for_code(response.error_code).__name__
            name = self._sasl.name
            # The mechanism is not what the broker objects to if it lists it (Tansu without SASL) or if
            # the listener takes no SASL at all (Kafka's PLAINTEXT and SSL listeners: ILLEGAL_SASL_STATE,
            # listing nothing).
            if name in listed or (not listed and response.error_code == _ILLEGAL_SASL_STATE):
                although = f" although it lists {name}" if name in listed else ""
                message = (
                    f"the broker answered SaslHandshake for {name} with {error}{although}: "
                    f"check that SASL is enabled on this listener (security_protocol="
                    f"{self._link.without('sasl')!r} if it is not)"
                )
            else:
                message = (
                    f"the broker does not enable SASL mechanism {name} ({error}; it lists: {offered}): "
                    f"set sasl_mechanism to one it lists"
                )
            self._link.authentication_failed(AuthenticationError(message))
            return
        try:
            token = self._sasl.initial()
        except AuthenticationError as exc:
            self._sasl_failed(exc)
            return
        self._send_sasl_token(token)

    def _send_sasl_token(self, token: bytes) -> None:
        link = self._link
        assert link.versions is not None
        try:
            version = link.versions.pick_version(SaslAuthenticateRequest)
        except UnsupportedVersion as exc:
            link.authentication_failed(AuthenticationError(f"SASL is not available: {exc}"))
            return
        link.send_internal(SaslAuthenticateRequest(version=version, auth_bytes=token), self._on_sasl_authenticate)

    def _on_sasl_authenticate(self, response: ApiMessage) -> None:
        assert self._sasl is not None
        if response.error_code:
            # The broker's message names the user at most; the password never travels back.
            detail = f": {response.error_message}" if response.error_message else ""
            failure = getattr(self._sasl, "failure", None)  # OAUTHBEARER: the server's error document
            detail += f" ({failure})" if failure is not None else ""
            self._sasl_failed(
                AuthenticationError(
                    f"SASL {self._sasl.name} authentication failed ({for_code(response.error_code).__name__}){detail}"
                )
            )
            return
        try:
            token = self._sasl.step(bytes(response.auth_bytes or b""))
        except AuthenticationError as exc:
            self._sasl_failed(exc)
            return
        if token is None:
            self._link.fire("authenticated")
        else:
            self._send_sasl_token(token)

    def _sasl_failed(self, exc: AuthenticationError) -> None:
        """A refused exchange: add the settings to check to the mechanism's or broker's words."""
        if self._settings.sasl_mechanism == "OAUTHBEARER":
            fix = "check the token that sasl_oauth_token_provider returns"
        else:
            fix = "check sasl_plain_username / sasl_plain_password"
        error = AuthenticationError(f"{exc.args[0] if exc.args else exc}: {fix}", node_id=self._link.node_id)
        error.__cause__ = exc.__cause__
        self._link.authentication_failed(error)


def set_version(pending: Pending, versions: ApiVersionTable) -> None:
    """Give ``pending``'s request the highest version both sides speak within its bounds (a version the
    caller fixed is the only one that will do); an ApiVersions request of v3+ gets the client's name
    (KIP-511). Raises ``UnsupportedVersion``."""
    request = pending.request
    low = max(pending.min_version, request._min_version or 0)
    highs = [v for v in (pending.max_version, request._max_version) if v is not None]
    high = min(highs) if highs else None
    if request.API_VERSION is not None:
        low = high = request.API_VERSION
    request.API_VERSION = versions.pick_version(type(request), min_version=low, max_version=high)
    if request.API_KEY == ApiKey.ApiVersions and request.API_VERSION >= 3 and not request.client_software_name:
        # the version is ours to pick, so is making it valid
        request.client_software_name, request.client_software_version = SOFTWARE_NAME, __version__

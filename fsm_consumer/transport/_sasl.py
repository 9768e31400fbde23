"""Sans-IO SASL client mechanisms: PLAIN (RFC 4616), SCRAM (RFC 5802/7677), OAUTHBEARER (RFC 7628).

A mechanism only turns server challenges into client responses; the
transport carries them in SaslAuthenticate requests. Usage::

    token = mech.initial()
    while True:
        server_bytes = <send token, receive auth_bytes>
        token = mech.step(server_bytes)
        if token is None:   # mech.done is now True
            break

kafka-python's ``ScramClient`` was not reused: it does not escape ``,``/``=``
in user names, fails with a KeyError on a server ``e=`` error, draws its
nonce from uuid4 with no way to inject one (so no RFC test vectors), and
raises untyped ValueErrors.

Passwords and bearer tokens are dropped as soon as they have been used and
never appear in a repr or an exception message.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ._errors import AuthenticationError

__all__ = ["OAuthBearerMechanism", "PlainMechanism", "SaslMechanism", "ScramMechanism"]


class SaslMechanism(Protocol):
    name: str

    def initial(self) -> bytes: ...

    def step(self, server_bytes: bytes) -> bytes | None: ...

    @property
    def done(self) -> bool: ...


class _State(enum.Enum):
    NEW = "new"
    AWAIT_SERVER_FIRST = "awaiting server-first"
    AWAIT_SERVER_FINAL = "awaiting server-final"
    AWAIT_SERVER_FAILURE = "awaiting the server's failure"
    DONE = "done"
    FAILED = "failed"


def _expect(actual: _State, wanted: _State, call: str) -> None:
    # Calling out of order is a bug in the caller, not an authentication failure.
    if actual is not wanted:
        raise RuntimeError(f"{call}() called while {actual.value}")


class PlainMechanism:
    """SASL/PLAIN: one message carrying the credentials in clear text."""

    name = "PLAIN"
    __slots__ = ("_username", "_password", "_authzid", "_state")

    def __init__(self, username: str, password: str, *, authzid: str = "") -> None:
        if "\0" in username or "\0" in password or "\0" in authzid:
            raise ValueError("PLAIN credentials must not contain NUL characters")
        self._username = username
        self._password: str | None = password
        self._authzid = authzid
        self._state = _State.NEW

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    def initial(self) -> bytes:
        _expect(self._state, _State.NEW, "initial")
        assert self._password is not None
        message = f"{self._authzid}\0{self._username}\0{self._password}".encode()
        self._password = None
        self._state = _State.AWAIT_SERVER_FINAL
        return message

    def step(self, server_bytes: bytes) -> None:
        """Accept the server's (empty) answer; PLAIN has no further round."""
        _expect(self._state, _State.AWAIT_SERVER_FINAL, "step")
        if server_bytes:
            self._state = _State.FAILED
            raise AuthenticationError(
                f"PLAIN: unexpected {len(server_bytes)}-byte server message for user {self._username!r}"
            )
        self._state = _State.DONE
        return None

    def __repr__(self) -> str:
        return f"PlainMechanism(username={self._username!r}, state={self._state.value!r})"


# RFC 7628 3.1 as Kafka's Java client checks it; the token is an RFC 6750 b64token.
_EXTENSION_KEY = re.compile(r"[A-Za-z]+\Z")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+\Z")
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*\Z")
_KVSEP = "\x01"


def _server_status(server_bytes: bytes) -> str:
    """The RFC 7628 error document's fields, for the error message (only the fields it defines)."""
    try:
        document = json.loads(server_bytes)
    except ValueError:
        return f"an unreadable {len(server_bytes)}-byte error message"
    if not isinstance(document, dict):
        return f"an unreadable {len(server_bytes)}-byte error message"
    fields = [f"status {document.get('status')!r}"]
    fields += [f"{key} {document[key]!r}" for key in ("scope", "openid-configuration") if key in document]
    return ", ".join(fields)


class OAuthBearerMechanism:
    """SASL/OAUTHBEARER (KIP-255): one message carrying a bearer token and optional extensions.

    ``token_provider`` has kafka-python's AbstractTokenProvider shape: ``token()`` returns the
    token, ``extensions()`` (optional) a dict of str to str. Both are called in ``initial()``,
    once per connection, so a reconnect picks up a refreshed token; the token is not kept.
    """

    name = "OAUTHBEARER"
    __slots__ = ("_provider", "_state", "_failure")

    def __init__(self, token_provider: Any) -> None:
        if not callable(getattr(token_provider, "token", None)):
            raise ValueError("OAUTHBEARER needs a token provider with a token() method")
        self._provider = token_provider
        self._state = _State.NEW
        self._failure: AuthenticationError | None = None

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    @property
    def failure(self) -> AuthenticationError | None:
        """Why the server refused the token (its error document), once it did."""
        return self._failure

    def initial(self) -> bytes:
        """``n,,^Aauth=Bearer <token>^A<key>=<value>^A...^A`` (^A is 0x01)."""
        _expect(self._state, _State.NEW, "initial")
        self._state = _State.FAILED  # until the message is built
        token = self._call("token")
        if not isinstance(token, str) or not _BEARER_TOKEN.match(token):
            # Never quote it: a malformed token may still be a secret.
            raise AuthenticationError(
                f"{self.name}: token() returned no RFC 6750 bearer token (a {type(token).__name__})"
            )
        pairs = "".join(f"{key}={value}{_KVSEP}" for key, value in sorted(self._extensions().items()))
        self._state = _State.AWAIT_SERVER_FINAL
        return f"n,,{_KVSEP}auth=Bearer {token}{_KVSEP}{pairs}{_KVSEP}".encode()

    def step(self, server_bytes: bytes) -> bytes | None:
        """Empty: accepted. Otherwise the server's error document: acknowledge it with a lone
        ``0x01`` as RFC 7628 3.2.3 requires; the exchange then fails (here if the server answers)."""
        if self._state is _State.AWAIT_SERVER_FAILURE:
            self._state = _State.FAILED
            assert self._failure is not None
            raise self._failure
        _expect(self._state, _State.AWAIT_SERVER_FINAL, "step")
        if not server_bytes:
            self._state = _State.DONE
            return None
        self._failure = AuthenticationError(
            f"{self.name}: the server refused the token: {_server_status(bytes(server_bytes))}"
        )
        self._state = _State.AWAIT_SERVER_FAILURE
        return _KVSEP.encode()

    def _call(self, method: str) -> Any:
        try:
            return getattr(self._provider, method)()
        except Exception as exc:  # any provider failure is this connection's authentication failure
            raise AuthenticationError(
                f"{self.name}: the token provider's {method}() failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _extensions(self) -> dict[str, str]:
        if not callable(getattr(self._provider, "extensions", None)):
            return {}
        extensions = self._call("extensions") or {}
        if not isinstance(extensions, Mapping):
            raise AuthenticationError(f"{self.name}: extensions() returned a {type(extensions).__name__}, not a dict")
        for key, value in extensions.items():
            if not isinstance(key, str) or key == "auth" or not _EXTENSION_KEY.match(key):
                raise AuthenticationError(
                    f"{self.name}: extension key {key!r} is not allowed (letters only, and not 'auth')"
                )
            if not isinstance(value, str) or not _EXTENSION_VALUE.match(value):
                raise AuthenticationError(
                    f"{self.name}: extension {key!r} has a value that is not printable ASCII, space, tab, CR or LF"
                )
        return dict(extensions)

    def __repr__(self) -> str:
        return f"OAuthBearerMechanism(state={self._state.value!r})"


_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_GS2_HEADER = b"n,,"  # no channel binding, no authzid
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER)  # b"biws"


def _default_nonce() -> str:
    return secrets.token_urlsafe(24)  # 192 random bits, [A-Za-z0-9_-] only


def _sasl_name(name: str) -> str:
    # RFC 5802 5.1: "=" and "," are escaped in user names. Like Kafka's Java
    # client we do not apply SASLprep (the broker does not either).
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: bytes, what: str) -> dict[str, bytes]:
    """Parse ``a=value,b=value`` into a dict; raise AuthenticationError if malformed."""
    attrs: dict[str, bytes] = {}
    for part in message.split(b","):
        key, sep, value = part.partition(b"=")
        if not sep or len(key) != 1 or not key.isalpha():
            raise AuthenticationError(f"malformed SCRAM {what} message")
        attrs.setdefault(key.decode("ascii"), value)
    return attrs


def _b64decode(value: bytes, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise AuthenticationError(f"SCRAM {what} is not valid base64") from None


class ScramMechanism:
    """SASL/SCRAM-SHA-256 or -512 with verification of the server's signature."""

    __slots__ = (
        "name",
        "_username",
        "_password",
        "_hash",
        "_nonce_factory",
        "_min_iterations",
        "_max_iterations",
        "_state",
        "_client_first_bare",
        "_nonce",
        "_server_signature",
    )

    def __init__(
        self,
        username: str,
        password: str,
        mechanism: str = "SCRAM-SHA-256",
        *,
        nonce_factory: Callable[[], str] = _default_nonce,
        min_iterations: int = 4096,
        max_iterations: int = 1_000_000,
    ) -> None:
        """``min_iterations`` is Kafka's own floor (and RFC 7677's advice);
        ``max_iterations`` stops a rogue server from making us burn CPU."""
        if mechanism not in _SCRAM_HASHES:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}; expected one of {sorted(_SCRAM_HASHES)}")
        self.name = mechanism
        self._username = username
        self._password: bytes | None = password.encode()
        self._hash = _SCRAM_HASHES[mechanism]
        self._nonce_factory = nonce_factory
        self._min_iterations = min_iterations
        self._max_iterations = max_iterations
        self._state = _State.NEW
        self._client_first_bare = b""
        self._nonce = b""
        self._server_signature = b""

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    def initial(self) -> bytes:
        """client-first-message: ``n,,n=<user>,r=<client nonce>``."""
        _expect(self._state, _State.NEW, "initial")
        nonce = self._nonce_factory()
        # RFC 5802: printable ASCII except ",".
        if not nonce or any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in nonce):
            raise ValueError("SCRAM nonce must be non-empty printable ASCII without ','")
        self._nonce = nonce.encode("ascii")
        self._client_first_bare = b"n=" + _sasl_name(self._username).encode() + b",r=" + self._nonce
        self._state = _State.AWAIT_SERVER_FIRST
        return _GS2_HEADER + self._client_first_bare

    def step(self, server_bytes: bytes) -> bytes | None:
        """Answer server-first with client-final; verify server-final (returns None)."""
        if self._state is _State.AWAIT_SERVER_FIRST:
            handler: Callable[[bytes], bytes | None] = self._client_final
        else:
            _expect(self._state, _State.AWAIT_SERVER_FINAL, "step")
            handler = self._verify_server_final
        try:
            return handler(bytes(server_bytes))
        except AuthenticationError as exc:
            self._state = _State.FAILED
            self._password = None
            raise AuthenticationError(f"{self.name} for user {self._username!r}: {exc}") from None

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first, "server-first")
        if "e" in attrs:
            raise AuthenticationError(f"server error {attrs['e'].decode(errors='replace')!r}")
        if "m" in attrs:
            raise AuthenticationError("server requires an unsupported SCRAM extension")
        try:
            nonce, salt_b64, iterations_text = attrs["r"], attrs["s"], attrs["i"]
        except KeyError as missing:
            raise AuthenticationError(f"server-first lacks attribute {missing}") from None
        # The server must extend our nonce, or it may be replaying an old exchange.
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationError("server nonce does not extend the client nonce")
        salt = _b64decode(salt_b64, "salt")
        if not salt:
            raise AuthenticationError("server sent an empty salt")
        if not iterations_text.isdigit():
            raise AuthenticationError("iteration count is not a number")
        iterations = int(iterations_text)
        if not self._min_iterations <= iterations <= self._max_iterations:
            raise AuthenticationError(
                f"iteration count {iterations} outside [{self._min_iterations}, {self._max_iterations}]"
            )

        without_proof = b"c=" + _CHANNEL_BINDING + b",r=" + nonce
        auth_message = self._client_first_bare + b"," + server_first + b"," + without_proof
        assert self._password is not None
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        self._password = None
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        client_signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=False))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._state = _State.AWAIT_SERVER_FINAL
        return without_proof + b",p=" + base64.b64encode(proof)

    def _verify_server_final(self, server_final: bytes) -> None:
        attrs = _attributes(server_final, "server-final")
        if "e" in attrs:
            raise AuthenticationError(f"server rejected the proof: {attrs['e'].decode(errors='replace')!r}")
        if "v" not in attrs:
            raise AuthenticationError("server-final lacks a verifier")
        # A server that cannot produce this signature does not hold our
        # credentials: it is not the broker we meant to talk to.
        if not hmac.compare_digest(_b64decode(attrs["v"], "server signature"), self._server_signature):
            raise AuthenticationError("server signature mismatch")
        self._state = _State.DONE
        return None

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()

    def __repr__(self) -> str:
        return f"ScramMechanism(mechanism={self.name!r}, username={self._username!r}, state={self._state.value!r})"

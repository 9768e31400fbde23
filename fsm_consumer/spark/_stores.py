"""Java's trust and key stores (``kafka.ssl.truststore.*``, ``kafka.ssl.keystore.*``) for the fsm_consumer
``Consumer``, which, like Python's ``ssl``, reads PEM files (``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``).

``take`` pulls the store options out of the ``kafka.*`` ones and checks them on the driver (a store that
cannot be read fails there, naming the option); ``ssl_settings`` turns them into the consumer's keys in
each process that makes a consumer (the store must be at its location on every executor, as for Spark's
own source). Types as Kafka's clients take them: ``PEM`` (a file at the location, or inline certificates
and key), ``PKCS12`` (read with ``cryptography``: its certificates, and for a key store its key, written
to PEM files of this process, 0600, the key encrypted with its password) and ``JKS``, which no Python
library reads well: an error that names the ``keytool`` command converting it to PKCS12. Without a type,
the file's first bytes tell (Kafka's default, JKS, would be refused for a PKCS12 file it could read).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Stores", "ssl_settings", "take"]

# the Java client's store settings (without "kafka."), what ``take`` consumes
OPTIONS = (
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
)
_TYPES = ("PEM", "PKCS12", "JKS")
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS


class StoreError(ValueError):
    """A store option that cannot be used; ``option`` names it (``kafka.``-prefixed)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Stores:
    """The store options given (the values as given; files are read per process)."""

    trust_location: str | None = None
    trust_type: str | None = None
    trust_password: str | None = None
    trust_pem: str | None = None  # ssl.truststore.certificates
    key_location: str | None = None
    key_type: str | None = None
    key_password: str | None = None  # the store's
    key_pem_key: str | None = None  # ssl.keystore.key
    key_pem_chain: str | None = None  # ssl.keystore.certificate.chain
    private_key_password: str | None = None  # ssl.key.password


def take(kafka: dict[str, Any]) -> Stores | None:
    """Remove the store options from ``kafka`` (Java names without the prefix, lower-cased) and check
    them; None when none was given."""
    given = {name: str(kafka.pop(name)) for name in OPTIONS if name in kafka}
    if not given:
        return None
    stores = Stores(
        trust_location=given.get("ssl.truststore.location"),
        trust_type=_type("ssl.truststore.type", given),
        trust_password=given.get("ssl.truststore.password"),
        trust_pem=given.get("ssl.truststore.certificates"),
        key_location=given.get("ssl.keystore.location"),
        key_type=_type("ssl.keystore.type", given),
        key_password=given.get("ssl.keystore.password"),
        key_pem_key=given.get("ssl.keystore.key"),
        key_pem_chain=given.get("ssl.keystore.certificate.chain"),
        private_key_password=given.get("ssl.key.password"),
    )
    if stores.trust_location and stores.trust_pem:
        raise StoreError(
            "kafka.ssl.truststore.certificates", "give either it or kafka.ssl.truststore.location, not both"
        )
    if (stores.key_pem_key is None) != (stores.key_pem_chain is None):
        raise StoreError(
            "kafka.ssl.keystore.key", "an inline PEM key store needs both kafka.ssl.keystore.key and .certificate.chain"
        )
    if stores.key_location and stores.key_pem_key:
        raise StoreError("kafka.ssl.keystore.key", "give either it or kafka.ssl.keystore.location, not both")
    ssl_settings(stores)  # read now, on the driver: a bad store fails at load(), naming its option
    return stores


def _type(option: str, given: dict[str, str]) -> str | None:
    value = given.get(option)
    if value is None:
        return None
    kind = value.strip().upper()
    if kind not in _TYPES:
        raise StoreError("kafka." + option, f"{value!r} is not one of {', '.join(_TYPES)}")
    return kind


_lock = threading.Lock()
_made: dict[Stores, dict[str, Any]] = {}  # per process: each store written once
_dir: Path | None = None


def ssl_settings(stores: Stores | None) -> dict[str, Any]:
    """The consumer keys for ``stores`` in this process (``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_password``)."""
    if stores is None:
        return {}
    with _lock:
        if stores not in _made:
            _made[stores] = _materialize(stores)
        return dict(_made[stores])


def _materialize(stores: Stores) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if stores.trust_pem:
        out["ssl_cafile"] = str(_write("trust", stores.trust_pem.encode()))
    elif stores.trust_location:
        out["ssl_cafile"] = _trust_file(stores)
    if stores.key_pem_key and stores.key_pem_chain:
        out["ssl_certfile"] = str(_write("chain", stores.key_pem_chain.encode()))
        out["ssl_keyfile"] = str(_write("key", stores.key_pem_key.encode()))
        if stores.private_key_password is not None:
            out["ssl_password"] = stores.private_key_password
    elif stores.key_location:
        out.update(_key_files(stores))
    return out


def _read(option: str, location: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise StoreError(option, f"cannot read {location!r}: {exc.strerror or exc}") from None


def _kind(option: str, location: str, data: bytes, given: str | None) -> str:
    """The store's type: as given, else from its first bytes; JKS (or JCEKS) refused with the way out."""
    sniffed = "JKS" if data[:4] in _JKS_MAGIC else "PEM" if data.lstrip().startswith(b"-----BEGIN") else "PKCS12"
    kind = given or sniffed
    if kind == "JKS" or data[:4] in _JKS_MAGIC:
        stem = location[: -len(".jks")] if location.lower().endswith(".jks") else location
        side = "truststore" if "truststore" in option else "keystore"
        raise StoreError(
            option,
            f"{location!r} is a Java KeyStore (JKS), which Python cannot read; convert it once with\n"
            f"  keytool -importkeystore -srckeystore {location} -destkeystore {stem}.p12 -deststoretype PKCS12\n"
            f"then set kafka.ssl.{side}.location={stem}.p12 and kafka.ssl.{side}.type=PKCS12",
        )
    return kind


def _trust_file(stores: Stores) -> str:
    option = "kafka.ssl.truststore.location"
    assert stores.trust_location is not None
    data = _read(option, stores.trust_location)
    if _kind(option, stores.trust_location, data, stores.trust_type) == "PEM":
        return stores.trust_location
    _, cert, extra = _pkcs12(option, stores.trust_location, data, stores.trust_password)
    from cryptography.hazmat.primitives.serialization import Encoding

    certs = ([cert] if cert is not None else []) + extra
    if not certs:
        raise StoreError(option, f"the PKCS12 store {stores.trust_location!r} holds no certificate")
    return str(_write("trust", b"".join(c.public_bytes(Encoding.PEM) for c in certs)))


def _key_files(stores: Stores) -> dict[str, Any]:
    option = "kafka.ssl.keystore.location"
    assert stores.key_location is not None
    data = _read(option, stores.key_location)
    password = stores.private_key_password if stores.private_key_password is not None else stores.key_password
    if _kind(option, stores.key_location, data, stores.key_type) == "PEM":
        # Kafka's PEM key store: the key and its certificate chain in one file
        out: dict[str, Any] = {"ssl_certfile": stores.key_location, "ssl_keyfile": stores.key_location}
        if password is not None:
            out["ssl_password"] = password
        return out
    key, cert, extra = _pkcs12(option, stores.key_location, data, stores.key_password)
    if key is None or cert is None:
        raise StoreError(option, f"the PKCS12 store {stores.key_location!r} holds no private key with its certificate")
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    secret = password or stores.key_password
    encryption = BestAvailableEncryption(secret.encode()) if secret else NoEncryption()
    out = {
        "ssl_certfile": str(_write("chain", b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *extra]))),
        "ssl_keyfile": str(_write("key", key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption))),
    }
    if secret:
        out["ssl_password"] = secret
    return out


def _pkcs12(option: str, location: str, data: bytes, password: str | None) -> tuple[Any, Any, list[Any]]:
    """(private key or None, certificate or None, the other certificates) of a PKCS12 store."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    tries = [password.encode()] if password else [None, b""]
    for secret in tries:
        try:
            store = pkcs12.load_pkcs12(data, secret)
        except ValueError:
            continue
        cert = store.cert.certificate if store.cert is not None else None
        return store.key, cert, [c.certificate for c in store.additional_certs]
    what = "the password is wrong" if password else "it needs its password (the .password option)"
    raise StoreError(option, f"cannot open the PKCS12 store {location!r}: {what}, or it is not PKCS12")


def _write(name: str, data: bytes) -> Path:
    """``data`` in a new file of this process's own directory (0700, removed at exit), readable by its
    user only."""
    global _dir
    if _dir is None:
        _dir = Path(tempfile.mkdtemp(prefix="fsm-kafka-stores-"))
        atexit.register(shutil.rmtree, _dir, True)
    fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".pem", dir=_dir)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return Path(path)

"""Java's trust and key stores as fsm_kafka options (kafka.ssl.truststore.*, kafka.ssl.keystore.*): PEM as
given, PKCS12 stores made by Java's own keytool read with cryptography, JKS refused with the keytool
command that converts it; a wrong password or a missing file named by its option. Without Spark's JVM."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12

pytest.importorskip("pyspark")

from fsm_consumer.spark._options import KafkaOptionError, parse  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "transport"))  # the test PKI
from pki import make_pki  # noqa: E402

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9093", "subscribe": "t", "kafka.security.protocol": "SSL"}
KEYTOOL = shutil.which("keytool")  # Java's, beside the Kafka broker's JDK
needs_keytool = pytest.mark.skipif(KEYTOOL is None, reason="no keytool (a JDK) on this machine")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"), "127.0.0.1", [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


def _keytool_trust_store(pki, directory: Path, kind: str) -> Path:
    """A trust store as a Java user has one: keytool -importcert of the CA into a PKCS12 or JKS store."""
    store = directory / f"trust.{'p12' if kind == 'PKCS12' else 'jks'}"
    subprocess.run(
        [KEYTOOL, "-importcert", "-noprompt", "-alias", "ca", "-file", str(pki["ca"]), "-keystore", str(store)]
        + ["-storetype", kind, "-storepass", "trust-secret"],
        check=True,
        capture_output=True,
    )
    return store


def _ca_subjects(cafile: str) -> list[str]:
    return [c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(Path(cafile).read_bytes())]


def test_a_pem_trust_store_is_the_ca_file(pki):
    opts = parse({**BASE, "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(pki["ca"])})
    assert opts.consumer_config()["ssl_cafile"] == str(pki["ca"])
    # without a type, the file's first bytes tell
    assert parse({**BASE, "kafka.ssl.truststore.location": str(pki["ca"])}).consumer_config()["ssl_cafile"] == str(
        pki["ca"]
    )
    inline = parse({**BASE, "kafka.ssl.truststore.certificates": pki["ca"].read_text()}).consumer_config()
    assert _ca_subjects(inline["ssl_cafile"]) == ["CN=Transport Test CA"]


@needs_keytool
def test_a_pkcs12_trust_store_made_by_keytool(pki, tmp_path):
    store = _keytool_trust_store(pki, tmp_path, "PKCS12")
    options = {**BASE, "kafka.ssl.truststore.location": str(store), "kafka.ssl.truststore.password": "trust-secret"}
    for typed in ({"kafka.ssl.truststore.type": "PKCS12"}, {}):
        cafile = parse({**options, **typed}).consumer_config()["ssl_cafile"]
        assert _ca_subjects(cafile) == ["CN=Transport Test CA"]
        assert Path(cafile).stat().st_mode & 0o077 == 0  # this user's only
        ssl.create_default_context(cafile=cafile)  # Python's ssl takes it
    with pytest.raises(KafkaOptionError) as caught:
        parse({**options, "kafka.ssl.truststore.password": "wrong"})
    assert caught.value.option == "kafka.ssl.truststore.location" and "the password is wrong" in str(caught.value)


@needs_keytool
def test_a_jks_store_is_refused_with_the_keytool_command_that_converts_it(pki, tmp_path):
    store = _keytool_trust_store(pki, tmp_path, "JKS")
    for typed in ({"kafka.ssl.truststore.type": "JKS"}, {}, {"kafka.ssl.truststore.type": "PKCS12"}):
        with pytest.raises(KafkaOptionError) as caught:
            parse({**BASE, "kafka.ssl.truststore.location": str(store), **typed})
        message = str(caught.value)
        assert caught.value.option == "kafka.ssl.truststore.location", message
        command = (
            f"keytool -importkeystore -srckeystore {store} -destkeystore {tmp_path / 'trust'}.p12 -deststoretype PKCS12"
        )
        assert command in message and "kafka.ssl.truststore.type=PKCS12" in message, message
    # the command as printed does convert it, and the result is read
    subprocess.run(
        command.replace("keytool", KEYTOOL, 1).split()
        + ["-srcstorepass", "trust-secret", "-deststorepass", "p12-secret"],
        check=True,
        capture_output=True,
    )
    converted = parse(
        {
            **BASE,
            "kafka.ssl.truststore.location": f"{tmp_path / 'trust'}.p12",
            "kafka.ssl.truststore.type": "PKCS12",
            "kafka.ssl.truststore.password": "p12-secret",
        }
    )
    assert _ca_subjects(converted.consumer_config()["ssl_cafile"]) == ["CN=Transport Test CA"]


def test_a_pkcs12_key_store_becomes_a_certificate_chain_and_an_encrypted_key(pki, tmp_path):
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key

    key = load_pem_private_key(pki["key"].read_bytes(), None)
    cert = x509.load_pem_x509_certificate(pki["cert"].read_bytes())
    ca = x509.load_pem_x509_certificate(pki["ca"].read_bytes())
    store = tmp_path / "client.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(b"client", key, cert, [ca], BestAvailableEncryption(b"ks")))
    config = parse(
        {
            **BASE,
            "kafka.ssl.keystore.location": str(store),
            "kafka.ssl.keystore.type": "PKCS12",
            "kafka.ssl.keystore.password": "ks",
        }
    ).consumer_config()
    assert config["ssl_password"] == "ks" and b"ENCRYPTED PRIVATE KEY" in Path(config["ssl_keyfile"]).read_bytes()
    assert len(x509.load_pem_x509_certificates(Path(config["ssl_certfile"]).read_bytes())) == 2  # cert and CA
    ssl.create_default_context().load_cert_chain(config["ssl_certfile"], config["ssl_keyfile"], config["ssl_password"])
    # Kafka's inline PEM key store
    inline = parse(
        {
            **BASE,
            "kafka.ssl.keystore.key": pki["key"].read_text(),
            "kafka.ssl.keystore.certificate.chain": pki["cert"].read_text(),
        }
    ).consumer_config()
    ssl.create_default_context().load_cert_chain(inline["ssl_certfile"], inline["ssl_keyfile"])


@pytest.mark.parametrize(
    "options, named, fragment",
    [
        ({"kafka.ssl.truststore.location": "/nowhere/trust.p12"}, "kafka.ssl.truststore.location", "cannot read"),
        (
            {"kafka.ssl.truststore.type": "BKS", "kafka.ssl.truststore.location": "x"},
            "kafka.ssl.truststore.type",
            "PEM, PKCS12, JKS",
        ),
        ({"kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}, "kafka.ssl.keystore.key", "certificate.chain"),
    ],
)
def test_bad_store_options_are_named(options, named, fragment):
    with pytest.raises(KafkaOptionError) as caught:
        parse({**BASE, **options})
    assert caught.value.option == named and fragment in str(caught.value), str(caught.value)

"""Security against Apache Kafka's own listeners: SASL_PLAINTEXT with PLAIN and SCRAM users, SSL with a
generated CA; a wrong password or an untrusted CA raised from the constructor or poll() within 2 s,
saying how to fix it."""

from __future__ import annotations

import ipaddress
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from cryptography import x509

from fsm_consumer import Consumer, TopicPartition
from fsm_consumer.broker import KafkaBroker, KafkaNotFoundError
from fsm_consumer.errors import AuthenticationFailedError

sys.path.insert(0, str(Path(__file__).parents[1] / "transport"))  # importlib mode: the test PKI

from pki import make_pki  # noqa: E402

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def _broker(**kw) -> KafkaBroker:
    try:
        return KafkaBroker(**kw)
    except KafkaNotFoundError as exc:
        if os.environ.get("FSM_REQUIRE_KAFKA") == "1":
            pytest.fail(f"Apache Kafka is required here (FSM_REQUIRE_KAFKA=1) but: {exc}")
        pytest.skip(f"Apache Kafka tests skipped: {exc}")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"), "127.0.0.1", [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


@pytest.fixture(scope="module")
def kafka_secure(pki):
    """One broker with a SASL_PLAINTEXT and an SSL listener besides PLAINTEXT."""
    broker = _broker(sasl_users=USERS, ssl_keystore=(pki["cert"], pki["key"]))
    try:
        yield broker
    finally:
        broker.stop()


def _consume_one(broker: KafkaBroker, **config) -> list[bytes]:
    from confluent_kafka import Producer

    topic = f"secure-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(topic, value=b"secured")
    assert producer.flush(10) == 0
    consumer = Consumer(auto_offset_reset="earliest", **config)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while not values and time.monotonic() < deadline:
            values = [r.value for recs in consumer.poll(timeout_ms=200).values() for r in recs]
        return values
    finally:
        consumer.close()


def _raised_within_two_seconds(api_version, **config) -> str:
    consumer = None
    started = time.monotonic()
    try:
        with pytest.raises(AuthenticationFailedError) as caught:
            consumer = Consumer(group_id="security-errors", api_version=api_version, **config)
            consumer.subscribe(["security-errors"])
            while time.monotonic() - started < 10:
                consumer.poll(timeout_ms=100)
        assert time.monotonic() - started < 2.0, "raised within 2 s"
        assert (consumer is None) == (api_version is None)
        return str(caught.value)
    finally:
        if consumer is not None:
            consumer.close(timeout_ms=2000)


@pytest.mark.parametrize("mechanism,user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "alice")])
def test_right_credentials_consume(kafka_secure, mechanism, user):
    assert _consume_one(
        kafka_secure,
        bootstrap_servers=kafka_secure.sasl_bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=USERS[user],
    ) == [b"secured"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("api_version", [None, (2, 8)], ids=["probed-by-the-constructor", "given"])
def test_a_wrong_password_is_raised_within_two_seconds(kafka_secure, mechanism, api_version):
    message = _raised_within_two_seconds(
        api_version,
        bootstrap_servers=kafka_secure.sasl_bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password="wrong-password",
    )
    assert "sasl_plain_username / sasl_plain_password" in message and "wrong-password" not in message


def test_tls_with_the_right_ca_consumes(kafka_secure, pki):
    assert _consume_one(
        kafka_secure,
        bootstrap_servers=kafka_secure.ssl_bootstrap_servers,
        security_protocol="SSL",
        ssl_cafile=str(pki["ca"]),
    ) == [b"secured"]


def test_a_java_pkcs12_trust_store_given_as_spark_options_consumes(kafka_secure, pki, tmp_path):
    """fsm_kafka's kafka.ssl.truststore.* options with a PKCS12 store made by Java's keytool: the consumer
    the executors make from them reads over TLS (tests/spark/test_stores.py checks the options)."""
    import shutil
    import subprocess

    pytest.importorskip("pyspark")
    from fsm_consumer.spark._options import parse

    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("no keytool (a JDK) on this machine")
    store = tmp_path / "trust.p12"
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", str(pki["ca"]), "-keystore", str(store)]
        + ["-storetype", "PKCS12", "-storepass", "trust-secret"],
        check=True,
        capture_output=True,
    )
    opts = parse(
        {
            "kafka.bootstrap.servers": kafka_secure.ssl_bootstrap_servers,
            "subscribe": "any",
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": str(store),
            "kafka.ssl.truststore.type": "PKCS12",
            "kafka.ssl.truststore.password": "trust-secret",
        }
    )
    assert _consume_one(kafka_secure, **opts.consumer_config()) == [b"secured"]


@pytest.mark.parametrize("api_version", [None, (2, 8)], ids=["probed-by-the-constructor", "given"])
def test_an_untrusted_ca_is_raised_within_two_seconds(kafka_secure, pki, api_version):
    message = _raised_within_two_seconds(
        api_version,
        bootstrap_servers=kafka_secure.ssl_bootstrap_servers,
        security_protocol="SSL",
        ssl_cafile=str(pki["other_ca"]),
    )
    assert (
        "TLS handshake with" in message and "set ssl_cafile to the CA that signed the broker's certificate" in message
    )

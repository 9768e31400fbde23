"""Test certificates: a CA, a server certificate it signed, and an unrelated CA (PEM files)."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, issuer: str, public_key, signing_key, *, ca: bool, sans: list[x509.GeneralName]):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    return builder.sign(signing_key, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: Path, server_name: str, sans: list[x509.GeneralName]) -> dict[str, Path]:
    """``ca``, ``other_ca``, ``cert`` (the server's, for ``sans``) and ``key`` (PKCS#8, unencrypted)."""
    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _cert("Transport Test CA", "Transport Test CA", ca_key.public_key(), ca_key, ca=True, sans=[])
    other = _cert("Some Other CA", "Some Other CA", other_key.public_key(), other_key, ca=True, sans=[])
    server = _cert(server_name, "Transport Test CA", server_key.public_key(), ca_key, ca=False, sans=sans)
    paths = {
        "ca": directory / "ca.pem",
        "other_ca": directory / "other-ca.pem",
        "cert": directory / "server.pem",
        "key": directory / "server.key",
    }
    paths["ca"].write_bytes(_pem(ca))
    paths["other_ca"].write_bytes(_pem(other))
    paths["cert"].write_bytes(_pem(server))
    paths["key"].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths

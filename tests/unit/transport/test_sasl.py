"""SASL mechanisms: RFC 7677 vector, a SCRAM-SHA-512 server round trip, PLAIN."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest

from fsm_consumer.transport import AuthenticationError, PlainMechanism, ScramMechanism

# RFC 7677 section 3. Note the server-final below is the RFC's; the variant
# ending "dOoBb/mK3AhCKBQ=" that circulates is corrupt (see test_forged_...).
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_client(**kwargs) -> ScramMechanism:
    return ScramMechanism("user", "pencil", "SCRAM-SHA-256", nonce_factory=lambda: RFC_NONCE, **kwargs)


def test_rfc7677_scram_sha256_vector():
    mech = rfc_client()
    assert mech.initial() == RFC_CLIENT_FIRST
    assert mech.step(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not mech.done
    assert mech.step(RFC_SERVER_FINAL) is None
    assert mech.done


def test_forged_server_signature_is_rejected():
    mech = rfc_client()
    mech.initial()
    mech.step(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationError, match="signature mismatch"):
        mech.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dOoBb/mK3AhCKBQ=")
    assert not mech.done
    with pytest.raises(RuntimeError):  # a failed exchange cannot be resumed
        mech.step(RFC_SERVER_FINAL)


class ScramServer:
    """Minimal RFC 5802 server: stores only StoredKey/ServerKey, as brokers do."""

    def __init__(self, username: str, password: str, hash_name: str, iterations: int = 4096):
        self.username = username
        self.hash_name = hash_name
        self.iterations = iterations
        self.salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), self.salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        self.stored_key = hashlib.new(hash_name, client_key).digest()
        self.server_key = self._hmac(salted, b"Server Key")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash_name).digest()

    def first(self, client_first: bytes) -> bytes:
        assert client_first.startswith(b"n,,")
        self.client_first_bare = client_first[3:]
        attrs = dict(part.split(b"=", 1) for part in self.client_first_bare.split(b","))
        assert attrs[b"n"].decode() == self.username
        self.nonce = attrs[b"r"] + base64.b64encode(os.urandom(12))
        self.server_first = b"r=" + self.nonce + b",s=" + base64.b64encode(self.salt) + b",i=%d" % self.iterations
        return self.server_first

    def final(self, client_final: bytes) -> bytes:
        without_proof, _, proof_attr = client_final.rpartition(b",")
        assert without_proof == b"c=biws,r=" + self.nonce
        proof = base64.b64decode(proof_attr.removeprefix(b"p="))
        auth_message = self.client_first_bare + b"," + self.server_first + b"," + without_proof
        client_signature = self._hmac(self.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=False))
        if hashlib.new(self.hash_name, client_key).digest() != self.stored_key:
            return b"e=invalid-proof"
        return b"v=" + base64.b64encode(self._hmac(self.server_key, auth_message))


def test_scram_sha512_round_trip_with_right_password():
    server = ScramServer("alice", "s3cret,=pw", "sha512")
    mech = ScramMechanism("alice", "s3cret,=pw", "SCRAM-SHA-512")
    client_final = mech.step(server.first(mech.initial()))
    assert client_final is not None
    assert mech.step(server.final(client_final)) is None
    assert mech.done


def test_scram_sha512_wrong_password_fails_without_leaking_it():
    server = ScramServer("alice", "right-password", "sha512")
    mech = ScramMechanism("alice", "hunter2-wrong", "SCRAM-SHA-512")
    server_final = server.final(mech.step(server.first(mech.initial())))
    assert server_final == b"e=invalid-proof"
    with pytest.raises(AuthenticationError, match="invalid-proof") as info:
        mech.step(server_final)
    assert "hunter2" not in str(info.value)
    assert not mech.done


def test_scram_rejects_server_that_does_not_know_the_password():
    # An impostor answers as if the password were different: mutual auth fails.
    real = ScramServer("alice", "pw", "sha256")
    impostor = ScramServer("alice", "other", "sha256")
    mech = ScramMechanism("alice", "pw", "SCRAM-SHA-256")
    client_final = mech.step(real.first(mech.initial()))
    impostor.client_first_bare, impostor.server_first, impostor.nonce = (
        real.client_first_bare,
        real.server_first,
        real.nonce,
    )
    impostor.stored_key = real.stored_key  # accepts the proof, but signs with its own key
    with pytest.raises(AuthenticationError, match="signature mismatch"):
        mech.step(impostor.final(client_final))


def test_scram_escapes_user_name():
    mech = ScramMechanism("a=b,c", "pw", nonce_factory=lambda: "abc")
    assert mech.initial() == b"n,,n=a=3Db=2Cc,r=abc"


@pytest.mark.parametrize(
    "server_first, match",
    [
        (b"e=other-error", "other-error"),
        (b"r=rOprNGfwEbeRWgbNEkqO", "lacks attribute"),
        (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=!!!,i=4096", "base64"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=many", "not a number"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1", "iteration count"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999", "iteration count"),
        (b"m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "extension"),
        (b"garbage", "malformed"),
        (b"\xff\xfe", "malformed"),
    ],
)
def test_scram_rejects_bad_server_first(server_first, match):
    mech = rfc_client()
    mech.initial()
    with pytest.raises(AuthenticationError, match=match):
        mech.step(server_first)


def test_scram_server_final_without_verifier_fails():
    mech = rfc_client()
    mech.initial()
    mech.step(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationError, match="verifier"):
        mech.step(b"x=1")


def test_scram_repr_and_state_hide_the_password():
    mech = rfc_client()
    assert "pencil" not in repr(mech)
    mech.initial()
    mech.step(RFC_SERVER_FIRST)
    # The password is discarded once the salted key is derived.
    assert mech._password is None
    assert "pencil" not in repr(mech)


def test_scram_calls_out_of_order_are_bugs():
    mech = rfc_client()
    with pytest.raises(RuntimeError):
        mech.step(RFC_SERVER_FIRST)
    mech.initial()
    with pytest.raises(RuntimeError):
        mech.initial()


def test_scram_validates_arguments():
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        ScramMechanism("u", "p", "SCRAM-SHA-1")
    with pytest.raises(ValueError, match="nonce"):
        ScramMechanism("u", "p", nonce_factory=lambda: "has,comma").initial()


def test_default_nonces_are_unique_and_valid():
    firsts = {ScramMechanism("u", "p").initial() for _ in range(50)}
    assert len(firsts) == 50
    assert all(f.startswith(b"n,,n=u,r=") and len(f) > len(b"n,,n=u,r=") + 20 for f in firsts)


def test_plain_initial_and_success():
    mech = PlainMechanism("alice", "pw")
    assert mech.name == "PLAIN"
    assert mech.initial() == b"\0alice\0pw"
    assert not mech.done
    assert mech.step(b"") is None
    assert mech.done
    assert "pw" not in repr(mech) and "alice" in repr(mech)


def test_plain_with_authzid_and_unexpected_server_data():
    mech = PlainMechanism("alice", "pw", authzid="admin")
    assert mech.initial() == b"admin\0alice\0pw"
    with pytest.raises(AuthenticationError) as info:
        mech.step(b"surprise")
    assert "pw" not in str(info.value)
    assert not mech.done


def test_plain_rejects_nul_without_echoing_password():
    with pytest.raises(ValueError) as info:
        PlainMechanism("alice", "p\0w-secret")
    assert "secret" not in str(info.value)

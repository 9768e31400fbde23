"""SASL/OAUTHBEARER (RFC 7628, KIP-255): the mechanism and its settings (the exchange through KafkaTransport
against a scripted loopback server is in tests/integration/transport/test_transport_oauthbearer.py)."""

from __future__ import annotations

from typing import Any

import pytest

from fsm_consumer._config import ConsumerConfig
from fsm_consumer.transport import AuthenticationError, KafkaSettings, OAuthBearerMechanism

TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.SeCrEt-SiGnAtUrE"
ERROR_DOC = b'{"status":"invalid_token","scope":"kafka","openid-configuration":"https://idp/.well-known"}'


class Provider:
    """kafka-python's AbstractTokenProvider shape; counts token() calls."""

    def __init__(self, token: Any = TOKEN, extensions: Any = None) -> None:
        self._token = token
        self._extensions = extensions
        self.calls = 0

    def token(self) -> Any:
        self.calls += 1
        return self._token

    def extensions(self) -> Any:
        return self._extensions if self._extensions is not None else {}


class TokenOnly:
    def token(self) -> str:
        return TOKEN


def secret_free(*texts: str) -> bool:
    return all(TOKEN not in text and "SeCrEt" not in text for text in texts)


# -- the mechanism ------------------------------------------------------------------------------------


def test_initial_message_bytes_exactly():
    mech = OAuthBearerMechanism(TokenOnly())
    assert mech.name == "OAUTHBEARER"
    assert mech.initial() == b"n,,\x01auth=Bearer " + TOKEN.encode() + b"\x01\x01"
    assert not mech.done
    assert mech.step(b"") is None and mech.done


def test_extensions_are_sorted_key_value_pairs():
    mech = OAuthBearerMechanism(Provider(extensions={"traceId": "x y", "logicalCluster": "lkc-1"}))
    assert mech.initial() == (
        b"n,,\x01auth=Bearer " + TOKEN.encode() + b"\x01logicalCluster=lkc-1\x01traceId=x y\x01\x01"
    )


def test_the_token_is_fetched_per_exchange_not_at_construction():
    provider = Provider()
    settings = KafkaSettings.from_config(
        {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": provider}
    )
    first, second = settings.new_sasl_mechanism(), settings.new_sasl_mechanism()
    assert isinstance(first, OAuthBearerMechanism) and provider.calls == 0
    first.initial()
    second.initial()
    assert provider.calls == 2  # one per connection: a reconnect picks up a refreshed token


@pytest.mark.parametrize(
    "extensions,match",
    [
        ({"auth": "x"}, "'auth'"),
        ({"bad-key": "x"}, "'bad-key'"),
        ({"": "x"}, "''"),
        ({"ok": "caf\u00e9"}, "'ok'"),
        ({"ok": ""}, "'ok'"),
        ({"ok": "a\x01b"}, "'ok'"),
        ({"ok": 5}, "'ok'"),
        (["ok"], "list"),
    ],
)
def test_bad_extensions_are_refused(extensions, match):
    mech = OAuthBearerMechanism(Provider(extensions=extensions))
    with pytest.raises(AuthenticationError, match=match) as err:
        mech.initial()
    assert "OAUTHBEARER" in str(err.value) and secret_free(str(err.value))


@pytest.mark.parametrize("token", ["", "has space", "a\x01b", b"bytes-token", None, "SeCrEt\n"])
def test_a_malformed_token_is_refused_without_quoting_it(token):
    mech = OAuthBearerMechanism(Provider(token=token))
    with pytest.raises(AuthenticationError, match="OAUTHBEARER") as err:
        mech.initial()
    assert secret_free(str(err.value), repr(err.value), repr(mech))


def test_a_failing_provider_is_an_authentication_error():
    class Broken:
        def token(self) -> str:
            raise RuntimeError("identity provider unreachable")

    with pytest.raises(AuthenticationError, match="token\\(\\) failed: RuntimeError: identity provider") as err:
        OAuthBearerMechanism(Broken()).initial()
    assert isinstance(err.value.__cause__, RuntimeError)


def test_a_provider_without_token_is_a_config_error():
    with pytest.raises(ValueError, match="token"):
        OAuthBearerMechanism(object())


def test_server_error_document_is_acknowledged_then_fails_with_its_status():
    mech = OAuthBearerMechanism(Provider(extensions={"traceId": "t"}))
    mech.initial()
    assert mech.step(ERROR_DOC) == b"\x01"  # RFC 7628 3.2.3: the client's dummy response
    assert not mech.done
    failure = mech.failure
    assert isinstance(failure, AuthenticationError)
    assert "OAUTHBEARER" in str(failure) and "'invalid_token'" in str(failure) and "'kafka'" in str(failure)
    with pytest.raises(AuthenticationError) as err:
        mech.step(b"")  # whatever the server says next, the exchange has failed
    assert err.value is failure and not mech.done
    assert secret_free(str(failure), repr(failure), repr(mech))
    with pytest.raises(RuntimeError):
        mech.step(b"")  # a third step is a caller bug


def test_an_unreadable_server_answer_still_fails():
    mech = OAuthBearerMechanism(TokenOnly())
    mech.initial()
    assert mech.step(b"not json") == b"\x01"
    assert "unreadable 8-byte" in str(mech.failure)


def test_repr_never_shows_the_token():
    mech = OAuthBearerMechanism(TokenOnly())
    message = mech.initial()
    assert TOKEN.encode() in message
    assert secret_free(repr(mech)) and repr(mech) == "OAuthBearerMechanism(state='awaiting server-final')"


# -- settings -----------------------------------------------------------------------------------------


def test_settings_accept_oauthbearer_without_username_and_hide_the_provider():
    provider = Provider()
    for config in (
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": provider,
            "ssl_check_hostname": False,
        },
        ConsumerConfig.from_kwargs(
            security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=provider
        ),
    ):
        s = KafkaSettings.from_config(config)
        assert s.sasl_mechanism == "OAUTHBEARER" and s.sasl_oauth_token_provider is provider
        assert s.sasl_plain_username is None and "Provider" not in repr(s)
        assert isinstance(s.new_sasl_mechanism(), OAuthBearerMechanism)
    with pytest.raises(ValueError, match="sasl_oauth_token_provider"):
        KafkaSettings.from_config({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"})
    with pytest.raises(ValueError, match="sasl_oauth_token_provider"):
        KafkaSettings.from_config(
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token_provider": object(),
            }
        )

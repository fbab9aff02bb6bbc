"""SCRAM credentials and the server side of the exchange (odradek.security.scram),
driven by scramp's client as a Kafka client would drive it: RFC 5802 end to end, a
wrong password and an unknown user refused, credentials made from a salted password
(AlterUserScramCredentials) equal to those made from the password, Kafka's text form."""

from __future__ import annotations

import hashlib

import pytest
from scramp import ScramClient

from odradek.security.scram import (
    AuthenticationFailed,
    ScramCredential,
    ScramExchange,
    from_password,
    from_salted_password,
)


def login(mechanism: str, users: dict[str, ScramCredential], user: str,
          password: str) -> str | None:
    client = ScramClient([mechanism], user, password)
    server = ScramExchange(mechanism, users.get)
    server_first = server.first(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.final(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server too
    return server.user


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_user_logs_in_with_the_right_password_only(mechanism: str):
    users = {"alice": from_password(mechanism, "alice-secret")}
    assert login(mechanism, users, "alice", "alice-secret") == "alice"
    with pytest.raises(AuthenticationFailed):
        login(mechanism, users, "alice", "wrong")
    with pytest.raises(AuthenticationFailed, match="unknown user"):
        login(mechanism, users, "mallory", "alice-secret")


def test_garbage_is_an_authentication_failure_not_a_crash():
    server = ScramExchange("SCRAM-SHA-256", {}.get)
    for junk in (b"", b"\xff\xfe", b"n,,", b"x,y,z", b"n,,n=,r="):
        with pytest.raises(AuthenticationFailed):
            ScramExchange("SCRAM-SHA-256", {}.get).first(junk)
    with pytest.raises(AuthenticationFailed):
        server.final(b"c=biws,r=abc,p=xyz")  # final before first


@pytest.mark.parametrize("mechanism,name", [("SCRAM-SHA-256", "sha256"),
                                            ("SCRAM-SHA-512", "sha512")])
def test_the_salted_password_gives_the_same_credential_as_the_password(mechanism, name):
    salt, iterations = b"0123456789abcdef", 4096
    made = from_password(mechanism, "pw", iterations, salt)
    salted = hashlib.pbkdf2_hmac(name, b"pw", salt, iterations)
    assert from_salted_password(mechanism, salt, salted, iterations) == made


def test_kafkas_text_form_round_trips_and_bounds_are_kafkas():
    cred = from_password("SCRAM-SHA-512", "pw", 8192)
    text = cred.to_text()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert ScramCredential.from_text("SCRAM-SHA-512", text) == cred
    with pytest.raises(ValueError):
        from_password("SCRAM-SHA-256", "pw", 1000)
    with pytest.raises(ValueError):
        from_password("SCRAM-SHA-1", "pw")

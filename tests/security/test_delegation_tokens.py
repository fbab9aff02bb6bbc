"""Delegation tokens' rules (security.delegation_tokens) and the SCRAM login with a token
(Kafka's ``tokenauth=true`` extension), as units: Kafka 4.4's lifetimes, who may renew,
expire and see a token, and a token's login as its owner until it expires."""

from __future__ import annotations

import dataclasses

import scramp

from odradek.security import delegation_tokens as rules
from odradek.security.sasl import ScramAuthenticator, TokenLogin
from odradek.security.scram import from_password, split_extensions

LIFETIMES = rules.Lifetimes(max_lifetime_ms=7_000, expiry_time_ms=1_000)


def token() -> rules.TokenInfo:
    error, made = rules.create("User:alice", "User:alice", ["User:bob"], -1, 10_000,
                               LIFETIMES)
    assert error == rules.NONE and made is not None
    return made


def test_a_new_token_lives_its_expiry_time_up_to_its_maximum():
    made = token()
    assert (made.issued_ms, made.expiry_ms, made.max_ms) == (10_000, 11_000, 17_000)
    assert len(made.token_id) == 22 and not made.token_id.startswith("-")
    _, shorter = rules.create("User:a", "User:a", [], 500, 10_000, LIFETIMES)
    assert shorter is not None and (shorter.expiry_ms, shorter.max_ms) == (10_500, 10_500)
    assert rules.create("User:a", "User:a", ["Group:g"], -1, 0, LIFETIMES) == (
        rules.INVALID_PRINCIPAL_TYPE, None)


def test_renewal_by_owner_or_renewer_moves_the_expiry_never_past_the_maximum():
    made = token()
    assert rules.renew(made, "User:carol", -1, 10_500, LIFETIMES)[0] == \
        rules.DELEGATION_TOKEN_OWNER_MISMATCH
    assert rules.renew(None, "User:alice", -1, 10_500, LIFETIMES)[0] == \
        rules.DELEGATION_TOKEN_NOT_FOUND
    _, renewed = rules.renew(made, "User:bob", -1, 10_500, LIFETIMES)
    assert renewed is not None and renewed.expiry_ms == 11_500
    _, asked = rules.renew(made, "User:alice", 200, 10_500, LIFETIMES)
    assert asked is not None and asked.expiry_ms == 10_700
    _, late = rules.renew(dataclasses.replace(made, expiry_ms=17_000), "User:alice", -1, 16_500,
                          LIFETIMES)
    assert late is not None and late.expiry_ms == 17_000
    assert rules.renew(made, "User:alice", -1, 11_001, LIFETIMES)[0] == \
        rules.DELEGATION_TOKEN_EXPIRED


def test_expiry_now_or_later_by_owner_or_renewer():
    made = token()
    assert rules.expire(made, "User:alice", -1, 10_500) == (rules.NONE, None, 10_500)
    error, kept, expiry = rules.expire(made, "User:bob", 100, 10_500)
    assert (error, expiry) == (rules.NONE, 10_600) and kept is not None
    assert kept.expiry_ms == 10_600
    assert rules.expire(made, "User:carol", -1, 10_500)[0] == \
        rules.DELEGATION_TOKEN_OWNER_MISMATCH
    assert rules.expire(made, "User:alice", 100, 12_000)[0] == rules.DELEGATION_TOKEN_EXPIRED
    # An expired token may still be removed at once.
    assert rules.expire(made, "User:alice", -1, 12_000)[0] == rules.NONE


def test_who_sees_a_token():
    made = token()
    never = lambda _: False  # noqa: E731
    assert rules.visible(made, "User:alice", None, never, never)
    assert rules.visible(made, "User:bob", None, never, never)
    assert not rules.visible(made, "User:carol", None, never, never)
    assert rules.visible(made, "User:carol", None, lambda t: t == made.token_id, never)
    assert rules.visible(made, "User:carol", None, never, lambda o: o == "User:alice")
    assert rules.visible(made, "User:alice", ["User:bob"], never, never)
    assert not rules.visible(made, "User:alice", ["User:carol"], never, never)


def test_kafkas_scram_extensions_are_split_from_the_client_first_message():
    assert split_extensions("n,,n=tok,r=abc,tokenauth=true") == (
        "n,,n=tok,r=abc", {"tokenauth": "true"})
    assert split_extensions("n,a=x,n=u,r=abc") == ("n,a=x,n=u,r=abc", {})


def login(server: ScramAuthenticator, user: str, password: str, extension: str = ""
          ) -> str | None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    first = client.get_client_first() + extension
    client.client_first_bare = first.split(",", 2)[2]
    answer, _ = server.step(first.encode())
    client.set_server_first(answer.decode())
    final, principal = server.step(client.get_client_final().encode())
    client.set_server_final(final.decode())
    return principal


def test_a_token_logs_in_as_its_owner_with_its_expiry():
    mac = rules.hmac_text(rules.token_hmac("secret", "tok-1"))
    credential = from_password("SCRAM-SHA-256", mac)
    tokens = {"tok-1": TokenLogin(credential, "alice", 123_456)}
    users = {"tok-1": from_password("SCRAM-SHA-256", "a user's password")}
    server = ScramAuthenticator("SCRAM-SHA-256", users.get, tokens.get)
    assert login(server, "tok-1", mac, ",tokenauth=true") == "alice"
    assert server.token_authenticated and server.credential_expires_at_ms == 123_456
    # Without the extension the same name is a user's (with the user's password).
    plain = ScramAuthenticator("SCRAM-SHA-256", users.get, tokens.get)
    assert login(plain, "tok-1", "a user's password") == "tok-1"
    assert not plain.token_authenticated

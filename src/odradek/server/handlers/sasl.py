"""SASL on SASL_PLAINTEXT and SASL_SSL listeners (KIP-43, KIP-152, KIP-368) and the SCRAM
credential APIs (KIP-554).

- SaslHandshake v0-1: the client names a mechanism among ``sasl.enabled.mechanisms`` of
  its listener; anything else is UNSUPPORTED_SASL_MECHANISM and the connection closes.
  After v0 (deprecated, still served by Kafka 4) the tokens come as bare frames
  (server.network.connection's ``_raw_sasl_token``); after v1 in SaslAuthenticate requests.
- SaslAuthenticate v0-2: the tokens of the chosen mechanism; success makes the session
  authenticated with its principal and, with ``connections.max.reauth.ms``, a lifetime the
  client must re-authenticate within (the same principal only); failure answers
  SASL_AUTHENTICATION_FAILED and closes the connection.
- Before authentication a connection may send ApiVersions, SaslHandshake and
  SaslAuthenticate only (server.network.connection closes it otherwise), as Kafka.
- DescribeUserScramCredentials / AlterUserScramCredentials: list, add and delete SCRAM
  credentials; the client sends the salted password (never the password).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security.acls import Operation, ResourceType
from odradek.security.oauth import (
    OAUTHBEARER,
    OAuthBearerAuthenticator,
    OAuthSettings,
    validator_for,
)
from odradek.security.sasl import (
    PLAIN,
    PlainAuthenticator,
    ScramAuthenticator,
    TokenLogin,
    parse_jaas,
    plain_users,
)
from odradek.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    AuthenticationFailed,
    ScramCredential,
    from_salted_password,
)
from odradek.server.handlers.base import (
    CLUSTER,
    Api,
    allowed,
    respond,
)
from odradek.server.security.documents import DocumentError

if TYPE_CHECKING:
    from odradek.server.broker import Broker

log = logging.getLogger(__name__)

MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}


def enabled_mechanisms(broker: Broker, listener: str) -> list[str]:
    return [m for m in str(broker.config.for_listener(
        listener, "sasl.enabled.mechanisms")).split(",") if m]


async def handshake(broker: Broker, request: Request) -> bytes:
    session = request.session
    if session is None or not session.listener.sasl:
        return respond(request, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})
    mechanisms = enabled_mechanisms(broker, session.listener.name)
    mechanism = request.body.mechanism
    if mechanism not in mechanisms or mechanism not in (PLAIN, OAUTHBEARER, *MECHANISM_CODES):
        session.close_after_response = f"unsupported SASL mechanism {mechanism!r}"
        return respond(request, {"error_code": ErrorCode.unsupported_sasl_mechanism,
                                 "mechanisms": mechanisms})
    if session.authenticated and session.mechanism not in (None, mechanism):
        session.close_after_response = "re-authentication must use the same mechanism"
        return respond(request, {"error_code": ErrorCode.illegal_sasl_state,
                                 "mechanisms": mechanisms})
    session.mechanism = mechanism
    session.authenticator = _authenticator(broker, session.listener.name, mechanism)
    if mechanism == OAUTHBEARER:
        await session.authenticator.ready()  # the JWKS, fetched in a thread the first time
    # v0: the tokens follow as bare frames, not in SaslAuthenticate requests.
    session.raw_sasl = request.api_version == 0
    return respond(request, {"error_code": 0, "mechanisms": mechanisms})


def _authenticator(broker: Broker, listener: str, mechanism: str) -> Any:
    if mechanism == PLAIN:
        jaas = broker.config.for_listener(listener, "plain.sasl.jaas.config")
        return PlainAuthenticator(plain_users(jaas) if jaas else {})
    if mechanism == OAUTHBEARER:
        jaas = broker.config.for_listener(listener, "oauthbearer.sasl.jaas.config")
        try:
            settings = OAuthSettings.from_lookup(
                lambda name: broker.config.for_listener(listener, name),
                parse_jaas(jaas)[1] if jaas else None)
        except ValueError as exc:  # every token is refused until the setting is mended
            log.error("listener %s: OAUTHBEARER is misconfigured: %s", listener, exc)
            return OAuthBearerAuthenticator(None)
        return OAuthBearerAuthenticator(validator_for(settings) if settings.jwks_url else None)

    def lookup(user: str) -> ScramCredential | None:
        assert broker.credentials is not None  # set by Broker.start, before any request
        return broker.credentials.get(user, mechanism)

    def token(token_id: str) -> TokenLogin | None:
        assert broker.tokens is not None  # set by Broker.start, before any request
        return broker.tokens.login(token_id, mechanism)

    return ScramAuthenticator(mechanism, lookup, token)


async def authenticate(broker: Broker, request: Request) -> bytes:
    session = request.session
    authenticator = getattr(session, "authenticator", None)
    if authenticator is None:
        if session is not None:
            session.close_after_response = "SaslAuthenticate without a SaslHandshake"
        return respond(request, {"error_code": ErrorCode.illegal_sasl_state,
                                 "error_message": "SaslAuthenticate before SaslHandshake",
                                 "auth_bytes": b"", "session_lifetime": 0})
    try:
        answer, user = authenticator.step(bytes(request.body.auth_bytes))
    except AuthenticationFailed as exc:
        session.authenticator = None
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        session.close_after_response = f"SASL {authenticator.mechanism}: {exc}{cause}"
        return respond(request, {"error_code": ErrorCode.sasl_authentication_failed,
                                 "error_message": str(exc), "auth_bytes": b"",
                                 "session_lifetime": 0})
    lifetime = 0
    if user is not None:
        principal = f"User:{user}"
        # Authenticated already (on a SASL listener that is only by SASL): a
        # re-authentication (KIP-368), which must keep the principal.
        if session.authenticated and session.principal != principal:
            session.close_after_response = "re-authentication changed the principal"
            return respond(request, {
                "error_code": ErrorCode.sasl_authentication_failed,
                "error_message": f"Cannot change principals during re-authentication "
                                 f"from {session.principal}: {principal}",
                "auth_bytes": b"", "session_lifetime": 0})
        lifetime = session.complete(user, broker.config, authenticator)
    return respond(request, {"error_code": 0, "error_message": None, "auth_bytes": answer,
                             "session_lifetime": lifetime})


# --- SCRAM credentials (KIP-554) --------------------------------------------------------


async def describe_credentials(broker: Broker, request: Request) -> bytes:
    if not allowed(broker, request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER):
        # Kafka's getErrorResponse: the error at the top and once per user asked (with
        # no user name in it).
        refused = {"error_code": ErrorCode.cluster_authorization_failed,
                   "error_message": "Cluster authorization failed."}
        return respond(request, {"throttle_time": 0, **refused, "results": [
            {**refused, "user": "", "credential_infos": []}
            for _ in request.body.users or ()]})
    assert broker.credentials is not None  # set by Broker.start, before any request
    stored = broker.credentials.users()
    asked = request.body.users
    names = sorted(stored) if not asked else [u.name for u in asked]  # null or []: all
    results = []
    for name in names:
        if names.count(name) > 1:
            results.append(_user_error(name, ErrorCode.duplicate_resource,
                                       "Cannot describe SCRAM credentials for the same user "
                                       "twice in a single request"))
        elif name not in stored:
            results.append(_user_error(name, ErrorCode.resource_not_found,
                                       "Attempt to describe a user credential that does "
                                       "not exist"))
        else:
            results.append({"user": name, "error_code": 0, "error_message": None,
                            "credential_infos": [
                                {"mechanism": MECHANISM_CODES[m], "iterations": c.iterations}
                                for m, c in sorted(stored[name].items())]})
    return respond(request, {"throttle_time": 0, "error_code": 0, "error_message": None,
                             "results": results})


def _user_error(name: str, code: int, message: str) -> dict[str, Any]:
    return {"user": name, "error_code": code, "error_message": message,
            "credential_infos": []}


async def alter_credentials(broker: Broker, request: Request) -> bytes:
    body = request.body
    if not allowed(broker, request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER):
        users = list(dict.fromkeys(i.name for i in [*body.deletions, *body.upsertions]))
        return respond(request, {"throttle_time": 0, "results": [
            {"user": u, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": "Cluster authorization failed."} for u in users]})
    seen: dict[tuple[str, int], int] = {}
    for item in [*body.deletions, *body.upsertions]:
        seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1
    errors: dict[str, tuple[int, str]] = {}
    upserts, deletions = [], []
    assert broker.credentials is not None  # set by Broker.start, before any request
    stored = broker.credentials.users()
    for item in body.deletions:
        mechanism = MECHANISM_NAMES.get(item.mechanism)
        error = _check(item, mechanism, seen)
        if error is None and mechanism not in stored.get(item.name, {}):
            error = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does "
                                         "not exist")
        if error is not None:
            errors.setdefault(item.name, error)
        else:
            assert mechanism is not None  # else _check gave an error
            deletions.append((item.name, mechanism))
    for item in body.upsertions:
        mechanism = MECHANISM_NAMES.get(item.mechanism)
        error = _check(item, mechanism, seen)
        if error is None and not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            error = (ErrorCode.unacceptable_credential,
                     f"Iterations {item.iterations} must be between {MIN_ITERATIONS} and "
                     f"{MAX_ITERATIONS} for {mechanism}")
        if error is None and (not item.salt or not item.salted_password):
            error = (ErrorCode.unacceptable_credential, "Credential must have a salt and a salted "
                                              "password")
        if error is not None:
            errors.setdefault(item.name, error)
        else:
            assert mechanism is not None  # else _check gave an error
            upserts.append((item.name, from_salted_password(
                mechanism, bytes(item.salt), bytes(item.salted_password), item.iterations)))
    # A user with any error has none of its changes applied, as Kafka.
    users = list(dict.fromkeys(i.name for i in [*body.deletions, *body.upsertions]))
    try:
        await broker.credentials.apply([(u, c) for u, c in upserts if u not in errors],
                                       [(u, m) for u, m in deletions if u not in errors])
    except DocumentError as exc:  # nothing was saved
        for user in users:
            errors.setdefault(user, (ErrorCode.unknown_server_error, str(exc)))
    return respond(request, {"throttle_time": 0, "results": [
        {"user": u, "error_code": errors.get(u, (0, None))[0],
         "error_message": errors.get(u, (0, None))[1]} for u in users]})


def _check(item: Any, mechanism: str | None, seen: dict[tuple[str, int], int]
           ) -> tuple[int, str] | None:
    if not item.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if seen[(item.name, item.mechanism)] > 1:
        return (ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request")
    return None


APIS = (
    Api(17, "SaslHandshake", 0, 1, handshake),
    Api(36, "SaslAuthenticate", 0, 2, authenticate),
    Api(50, "DescribeUserScramCredentials", 0, 0, describe_credentials),
    Api(51, "AlterUserScramCredentials", 0, 0, alter_credentials),
)

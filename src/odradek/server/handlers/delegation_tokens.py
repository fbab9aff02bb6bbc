"""Delegation tokens (KIP-48): CreateDelegationToken v1-3, RenewDelegationToken v1-2,
ExpireDelegationToken v1-2 and DescribeDelegationToken v1-3, the versions Kafka 4.4
serves. Any broker answers them (the tokens live in a document every broker follows:
server.security.tokens); the rules are security.delegation_tokens'.

As in Kafka, none is served to a session that could not prove who it is or that logged
in with a token itself: PLAINTEXT listeners, SSL without a client certificate, and
token-authenticated sessions get DELEGATION_TOKEN_REQUEST_NOT_ALLOWED. A broker
without ``delegation.token.secret.key`` answers DELEGATION_TOKEN_AUTH_DISABLED. Making a
token for another owner takes CREATE_TOKENS on that user; seeing others' tokens,
DESCRIBE on the token or DESCRIBE_TOKENS on its owner.

Timestamps of refusals are Kafka's: -1 where its broker refuses (not allowed, not
authorized, a renewer that is no user), 0 where its controller does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.codec import Request
from odradek.security import delegation_tokens as rules
from odradek.security.acls import Operation, ResourceType
from odradek.server.handlers.base import Api, allowed, respond
from odradek.server.network.session import ANONYMOUS
from odradek.server.security.documents import DocumentError
from odradek.server.security.tokens import TokenStore, now_ms

if TYPE_CHECKING:
    from odradek.server.broker import Broker

BROKER_REFUSAL_MS = -1  # DelegationTokenManager.ErrorTimestamp


def _may_manage_tokens(request: Request) -> bool:
    """Kafka's allowTokenRequests."""
    session = request.session
    if session is None:
        return True  # in-process callers (tests) speak for the broker
    return not (session.token_authenticated or session.listener.protocol == "PLAINTEXT"
                or (session.listener.protocol == "SSL" and session.principal == ANONYMOUS))


def _principal(request: Request) -> str:
    return request.session.principal if request.session is not None else ANONYMOUS


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def _store(broker: Broker) -> TokenStore:
    assert broker.tokens is not None  # set by Broker.start, before any request
    return broker.tokens


async def create(broker: Broker, request: Request) -> bytes:
    body = request.body
    requester = _principal(request)
    owner_name = getattr(body, "owner_principal_name", None)
    owner = (f"{body.owner_principal_type}:{owner_name}" if owner_name else requester)
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in body.renewers]
    store = _store(broker)

    def answer(error: int, token: rules.TokenInfo | None = None,
               refused_ms: int = 0) -> bytes:
        owner_type, name = _split(owner)
        requester_type, requester_name = _split(requester)
        data: dict[str, Any] = {
            "throttle_time": 0, "error_code": error, "principal_type": owner_type,
            "principal_name": name, "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester_name,
            "issue_timestamp": refused_ms, "expiry_timestamp": refused_ms,
            "max_timestamp": refused_ms, "token_id": "", "hmac": b""}
        if token is not None:
            data.update(issue_timestamp=token.issued_ms, expiry_timestamp=token.expiry_ms,
                        max_timestamp=token.max_ms, token_id=token.token_id,
                        hmac=store.hmac(token.token_id))
        return respond(request, data)

    if not _may_manage_tokens(request):
        return answer(ErrorCode.delegation_token_request_not_allowed,
                      refused_ms=BROKER_REFUSAL_MS)
    if owner != requester and not allowed(broker, request, Operation.CREATE_TOKENS,
                                          ResourceType.USER, owner):
        return answer(ErrorCode.delegation_token_authorization_failed,
                      refused_ms=BROKER_REFUSAL_MS)
    if any(rules.principal_type(r) != rules.USER_TYPE for r in renewers):
        return answer(ErrorCode.invalid_principal_type, refused_ms=BROKER_REFUSAL_MS)
    if not store.enabled:
        return answer(ErrorCode.delegation_token_auth_disabled)
    error, token = rules.create(owner, requester, renewers,
                                int(body.max_lifetime.total_seconds() * 1000), now_ms(),
                                store.lifetimes)
    if token is None:
        return answer(error)
    try:
        await store.put(token)
    except DocumentError:
        return answer(ErrorCode.unknown_server_error)
    return answer(ErrorCode.none, token)


def _expiry_answer(request: Request, error: int, expiry_ms: int = 0) -> bytes:
    """Renew's and Expire's answer: an error and the token's expiry."""
    return respond(request, {"throttle_time": 0, "error_code": error,
                             "expiry_timestamp": expiry_ms})


def _refused(request: Request, store: TokenStore) -> bytes | None:
    """Renew's and Expire's refusals before the token is looked at, as Kafka's."""
    if not _may_manage_tokens(request):
        return _expiry_answer(request, ErrorCode.delegation_token_request_not_allowed,
                              BROKER_REFUSAL_MS)
    if not store.enabled:
        return _expiry_answer(request, ErrorCode.delegation_token_auth_disabled)
    return None


async def renew(broker: Broker, request: Request) -> bytes:
    store = _store(broker)
    if (refusal := _refused(request, store)) is not None:
        return refusal
    period_ms = int(request.body.renew_period.total_seconds() * 1000)
    error, token = rules.renew(store.by_hmac(request.body.hmac), _principal(request),
                               period_ms, now_ms(), store.lifetimes)
    if token is None:
        return _expiry_answer(request, error)
    try:
        await store.put(token)
    except DocumentError:
        return _expiry_answer(request, ErrorCode.unknown_server_error)
    return _expiry_answer(request, ErrorCode.none, token.expiry_ms)


async def expire(broker: Broker, request: Request) -> bytes:
    store = _store(broker)
    if (refusal := _refused(request, store)) is not None:
        return refusal
    token = store.by_hmac(request.body.hmac)
    period_ms = int(request.body.expiry_time_period.total_seconds() * 1000)
    error, kept, expiry_ms = rules.expire(token, _principal(request), period_ms, now_ms())
    if error != rules.NONE:
        return _expiry_answer(request, error)
    assert token is not None  # else DELEGATION_TOKEN_NOT_FOUND
    try:
        if kept is None:
            await store.remove([token.token_id])
        else:
            await store.put(kept)
    except DocumentError:
        return _expiry_answer(request, ErrorCode.unknown_server_error)
    return _expiry_answer(request, ErrorCode.none, expiry_ms)


async def describe(broker: Broker, request: Request) -> bytes:
    store = _store(broker)

    def answer(error: int, tokens: Sequence[rules.TokenInfo] = ()) -> bytes:
        return respond(request, {"throttle_time": 0, "error_code": error, "tokens": [
            _described(store, t) for t in tokens]})

    if not _may_manage_tokens(request):
        return answer(ErrorCode.delegation_token_request_not_allowed)
    if not store.enabled:
        return answer(ErrorCode.delegation_token_auth_disabled)
    asked = request.body.owners
    if asked is not None and not asked:
        return answer(ErrorCode.none)
    owners = (None if asked is None
              else [f"{o.principal_type}:{o.principal_name}" for o in asked])
    requester = _principal(request)
    return answer(ErrorCode.none, [t for t in store.tokens() if rules.visible(
        t, requester, owners,
        lambda token_id: allowed(broker, request, Operation.DESCRIBE,
                                 ResourceType.DELEGATION_TOKEN, token_id),
        lambda owner: allowed(broker, request, Operation.DESCRIBE_TOKENS,
                              ResourceType.USER, owner))])


def _described(store: TokenStore, token: rules.TokenInfo) -> dict[str, Any]:
    owner_type, owner = _split(token.owner)
    requester_type, requester = _split(token.requester)
    return {"principal_type": owner_type, "principal_name": owner,
            "token_requester_principal_type": requester_type,
            "token_requester_principal_name": requester,
            "issue_timestamp": token.issued_ms, "expiry_timestamp": token.expiry_ms,
            "max_timestamp": token.max_ms, "token_id": token.token_id,
            "hmac": store.hmac(token.token_id),
            "renewers": [dict(zip(("principal_type", "principal_name"), _split(r),
                                  strict=True)) for r in token.renewers]}


APIS = (
    Api(38, "CreateDelegationToken", 1, 3, create),
    Api(39, "RenewDelegationToken", 1, 2, renew),
    Api(40, "ExpireDelegationToken", 1, 2, expire),
    Api(41, "DescribeDelegationToken", 1, 3, describe),
)

"""Security decisions: Kafka's ACL model and authorization rule (``acls``), SCRAM
credentials and exchanges (``scram``), the server side of the SASL mechanisms (``sasl``,
``oauth``).

Pure but for one thing: ``oauth`` reads the identity provider's JWKS (HTTP or a file),
on a thread of its own. The listeners' TLS, the sessions and the stores that keep ACLs
and credentials are the server's (``server.network.tls``, ``server.network.session``,
``server.security.authorizer``, ``server.security.credentials``).
"""

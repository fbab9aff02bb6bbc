"""Security decisions with no I/O: Kafka's ACL model and authorization rule (``acls``).

The listeners' TLS, SASL and the stores that keep ACLs and credentials build on these
(issue 18); nothing here opens a socket or a file.
"""

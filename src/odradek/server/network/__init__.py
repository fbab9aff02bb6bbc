"""The broker's network side: how clients and other brokers reach it, and how it reaches
them.

- ``connection``: one client connection (an ``asyncio.BufferedProtocol``), its requests
  answered in order, record bytes sent by ``sendfile``;
- ``session``: who is on the other end of a connection (listener, address, principal);
- ``tls``: the SSL and SASL_SSL listeners' ``ssl.SSLContext`` and the principal of a
  client certificate;
- ``inter_broker``: how this broker connects to the others (follower fetchers,
  transaction markers) over the inter-broker listener and its security.
"""

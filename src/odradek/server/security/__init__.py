"""The broker's binding of the security rules (``odradek.security``) to its requests,
and where it keeps their state.

- ``documents``: the security state's documents (ACLs, SCRAM credentials, client
  quotas): a file of the data directory, or a znode every broker of a cluster follows;
- ``authorizer``: the ACL authorizer (``authorizer.class.name``);
- ``credentials``: SCRAM credentials;
- ``quotas``: client quotas and the throttles they earn.
"""

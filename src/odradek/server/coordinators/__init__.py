"""The group and transaction coordinators' runtimes: they act on what the pure
coordinators of ``odradek.coordinator`` decide.

- ``coordinator_runtime``: what both share (a coordinator per partition of an internal
  topic coordinated here, routing, a future per request, appends, timers);
- ``groups``: the group side (``GroupRuntime``, ``__consumer_offsets``);
- ``transactions``: the transaction side (``TxnRuntime``, ``__transaction_state``, the
  markers).
"""

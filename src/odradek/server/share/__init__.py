"""Share groups' records on the partition leader (KIP-932, "queues for Kafka"): the
share partitions (``partitions.py``: which records of a partition each share group has
handed out, to whom, until when, and what came back), their share sessions
(``sessions.py``) and the ShareFetch / ShareAcknowledge flow (``fetching.py``).
Membership and assignment are the group coordinator's (coordinator/share_group.py);
the durable state is the share coordinator's (server/coordinators/share_state.py).
"""

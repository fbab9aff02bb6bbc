"""What a transaction error becomes for the client that gets it: the rules by API version
(KIP-588's PRODUCER_FENCED and KIP-890's TRANSACTION_ABORTABLE, which older clients do not
know) and what a partition leader answers a produce its transaction's coordinator
refused. The coordinators (coordinator/transactions.py) answer in the newest codes; the
handlers apply these rules, each in this one place.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

# KIP-588: requests older than these versions cannot be told PRODUCER_FENCED and get
# INVALID_PRODUCER_EPOCH instead (api key -> first version that knows PRODUCER_FENCED).
PRODUCER_FENCED_SINCE_VERSION = {
    22: 4,  # InitProducerId
    24: 2,  # AddPartitionsToTxn
    25: 2,  # AddOffsetsToTxn
    26: 2,  # EndTxn
}


# KIP-890: requests older than these versions cannot be told TRANSACTION_ABORTABLE (a
# transaction that can only be aborted: a write for a partition, or offsets for a group,
# not in it) and get INVALID_TXN_STATE instead, as Kafka's brokers answer them.
TRANSACTION_ABORTABLE_SINCE_VERSION = {
    0: 11,  # Produce
    22: 5,  # InitProducerId
    24: 4,  # AddPartitionsToTxn (v4's verify-only answers too, as Kafka 4.4 gives them)
    25: 4,  # AddOffsetsToTxn
    26: 4,  # EndTxn
    28: 4,  # TxnOffsetCommit
}


# What a partition leader answers a produce its verification refused (Kafka's
# ReplicaManager and AddPartitionsToTxnManager): retriable coordinator trouble becomes
# NOT_ENOUGH_REPLICAS (which older clients retry without a metadata refresh), a fenced
# producer INVALID_PRODUCER_EPOCH, an unknown one OUT_OF_ORDER_SEQUENCE_NUMBER, and a
# refused inter-broker call INVALID_TXN_STATE (the client must not see it).
_PRODUCE_VERIFICATION_ERRORS: dict[int, int] = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.network_exception: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
    ErrorCode.unknown_producer_id: ErrorCode.out_of_order_sequence_number,
    ErrorCode.cluster_authorization_failed: ErrorCode.invalid_txn_state,
}


def produce_verification_error(code: int) -> int:
    """The produce answer of a verification's code (before ``error_for_version``)."""
    return _PRODUCE_VERIFICATION_ERRORS.get(code, code)


def error_for_version(error_code: int, api_key: int, api_version: int) -> int:
    """The error code to send to a client of this API version (KIP-588, KIP-890)."""
    if error_code == ErrorCode.producer_fenced and api_version < PRODUCER_FENCED_SINCE_VERSION.get(
            api_key, 0):
        return ErrorCode.invalid_producer_epoch
    if (error_code == ErrorCode.transaction_abortable
            and api_version < TRANSACTION_ABORTABLE_SINCE_VERSION.get(api_key, 0)):
        return ErrorCode.invalid_txn_state
    return error_code

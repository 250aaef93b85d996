"""The OpenAPI 3.1 document of the controller's HTTP API, served at GET /openapi.json.

Written by hand next to the handlers it describes (`quorum.controller_server`,
`quorum.broker_rpc`); `tests/integration/test_controller_api.py` checks that every route
the server has is described here. Broker RPC bodies are msgpack maps with the fields
given by the schemas (`application/x-msgpack`).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from quorum import admin_api as api
from common.limits import MAX_RECORDS_PER_USER_OP

JSON: Final = "application/json"
MSGPACK: Final = "application/x-msgpack"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: list[str] | None = None, **props: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _arr(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


INT: Final = {"type": "integer"}
STR: Final = {"type": "string"}
BOOL: Final = {"type": "boolean"}
IDS: Final = _arr(INT)
NULLABLE_INT: Final = {"type": ["integer", "null"]}
NULLABLE_STR: Final = {"type": ["string", "null"]}
CONFIGS: Final = {"type": "object", "additionalProperties": STR}

SCHEMAS: Final[dict[str, Any]] = {
    # DescribeQuorum (Kafka API 55; issue 28): offsets are metadata record offsets, times
    # wall-clock ms (-1 unknown); quorum.quorum_describe says how each maps onto pysyncobj's Raft
    "QuorumReplica": _obj(None, replica_id=INT, log_end_offset=INT, last_fetch_timestamp=INT,
                          last_caught_up_timestamp=INT),
    "Quorum": _obj(None, topic=STR, partition=INT, leader_id=INT, leader_epoch=INT, high_watermark=INT,
                   voters=_arr(_ref("QuorumReplica")), observers=_arr(_ref("QuorumReplica"))),
    "GroupSummary": _obj(None, group_id=STR, protocol_type=STR, coordinator=INT),
    "GroupMember": _obj(None, member_id=STR, group_instance_id=NULLABLE_STR, client_id=STR, client_host=STR,
                        assignment=_arr(_obj(None, topic=STR, partition=INT))),
    "GroupPartitionOffset": _obj(None, topic=STR, partition=INT, committed_offset=NULLABLE_INT,
                                 metadata=NULLABLE_STR, log_end_offset=NULLABLE_INT,
                                 lag={**NULLABLE_INT, "description": "log_end_offset - committed_offset"},
                                 member_id=NULLABLE_STR),
    "Group": _obj(None, group_id=STR, state={"enum": ["Empty", "PreparingRebalance", "CompletingRebalance",
                                                      "Stable"]},
                  protocol_type=STR, protocol=STR, coordinator=INT, members=_arr(_ref("GroupMember")),
                  offsets=_arr(_ref("GroupPartitionOffset"))),
    "GroupDeleted": _obj(None, group_id=STR, deleted=BOOL),
    "ResetGroupOffsets": _obj(["topic", "to"], topic=STR, partitions=IDS,
                              to={"enum": ["earliest", "latest", "offset", "timestamp", "shift"]},
                              value={**INT, "description": "the offset, the timestamp (ms) or the shift"},
                              execute={**BOOL, "description": "false (default): only show the plan"}),
    "GroupOffsetsReset": _obj(None, group_id=STR, topic=STR, dry_run=BOOL, offsets=_arr(_obj(
        None, partition=INT, committed_offset=NULLABLE_INT, new_offset=INT))),
    # KIP-664: kafka-transactions.sh's list, describe, describe-producers, abort, find-hanging
    "TransactionListing": _obj(None, transactional_id=STR, coordinator=INT, producer_id=INT,
                               state={**STR, "description": "Kafka's TransactionState, e.g. Ongoing"}),
    "Transaction": _obj(None, coordinator_id=INT, transactional_id=STR, producer_id=INT, producer_epoch=INT,
                        state=STR, transaction_timeout_ms=INT,
                        transaction_start_time_ms={**NULLABLE_INT, "description": "null: none ongoing"},
                        transaction_duration_ms=NULLABLE_INT,
                        partitions=_arr(_obj(None, topic=STR, partition=INT))),
    "ProducerState": _obj(None, producer_id=INT, producer_epoch=INT,
                          coordinator_epoch={**NULLABLE_INT, "description": "null: the leader knows none"},
                          last_sequence=INT, last_timestamp=INT,
                          current_transaction_start_offset={**NULLABLE_INT, "description": "null: no open "
                                                            "transaction"}),
    "PartitionProducers": _obj(None, topic=STR, partition=INT, broker_id=NULLABLE_INT,
                               producers=_arr(_ref("ProducerState"))),
    "AbortTransaction": _obj(None, start_offset={**INT, "minimum": 0, "description": "the open transaction "
                                                 "starting here (its producer comes from DescribeProducers)"},
                             producer_id=INT, producer_epoch=INT,
                             coordinator_epoch={**INT, "description": "with producer_id and producer_epoch, "
                                                "instead of start_offset (Kafka's form for brokers before 3.0); "
                                                "-1 is sent as 0"}),
    "TransactionAborted": _obj(None, topic=STR, partition=INT, producer_id=INT, producer_epoch=INT,
                               coordinator_epoch=INT, aborted=BOOL),
    "HangingTransaction": _obj(None, topic=STR, partition=INT, producer_id=INT, producer_epoch=INT,
                               coordinator_epoch=NULLABLE_INT, last_sequence=INT, last_timestamp=INT,
                               current_transaction_start_offset=INT, duration_minutes=INT),
    "Error": _obj(["error", "message", "field"], error={**STR, "description": "Kafka error name, e.g. "
                  "INVALID_REPLICATION_FACTOR"}, message=STR,
                  field={**NULLABLE_STR, "description": "the request field at fault, e.g. configs.retention.ms"}),
    "Voter": _obj(None, node_id=INT, quorum_address=STR, api_address=STR, role={"enum": ["leader", "follower"]},
                  connected=BOOL, match_index=NULLABLE_INT),
    "Cluster": _obj(None, cluster_id=STR, node_id=INT, active_controller=NULLABLE_INT, is_active=BOOL,
                    controller_epoch=INT, term=INT, commit_index=INT, last_applied=INT,
                    metadata_offset=INT, log_start_offset=INT, voters=_arr(_ref("Voter"))),
    "Listener": _obj(None, name=STR, host=STR, port=INT),
    "Broker": _obj(None, broker_id=INT, broker_epoch=INT, incarnation_id=STR, rack=NULLABLE_STR,
                   state={"enum": ["FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN"]}, fenced=BOOL,
                   in_controlled_shutdown=BOOL, listeners=_arr(_ref("Listener")), heartbeat_age_ms=NULLABLE_INT,
                   offline_replicas={**INT, "description": "replicas this registration could not open"}),
    "ShutdownRequested": _obj(None, broker_id=INT, broker_epoch=INT, incarnation_id=STR, rack=NULLABLE_STR,
                              state={"enum": ["FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN"]}, fenced=BOOL,
                              in_controlled_shutdown=BOOL, listeners=_arr(_ref("Listener")),
                              heartbeat_age_ms=NULLABLE_INT, shutdown_requested=BOOL,
                              offline_replicas={**INT, "description": "replicas this registration could not open"}),
    "Partition": _obj(None, partition=INT, leader={**INT, "description": "-1: offline"}, leader_epoch=INT,
                      partition_epoch=INT, replicas=IDS, isr=IDS, elr=IDS,
                      leader_recovery_state={"enum": ["RECOVERED", "RECOVERING"]},
                      under_replicated={**BOOL, "description": "ISR smaller than the replica set"},
                      offline={**BOOL, "description": "no leader"},
                      offline_replicas={**IDS, "description": "replicas whose broker could not open them "
                                        "(offline there until that broker restarts)"}),
    "Topic": _obj(None, name=STR, topic_id=STR, configs=CONFIGS, partitions=_arr(_ref("Partition")),
                  metadata_offset={**NULLABLE_INT, "description": "writes only: offset of the last record"}),
    "TopicSummary": _obj(None, name=STR, topic_id=STR, partitions=INT, offline_partitions=INT,
                         under_replicated_partitions=INT),
    "CreateTopic": _obj(["name"], name={**STR, "maxLength": 249, "pattern": "^[a-zA-Z0-9._-]+$"},
                        partitions={**INT, "minimum": -1, "maximum": MAX_RECORDS_PER_USER_OP,
                                    "description": "default: num.partitions; with assignments: omit (or -1)"},
                        replication_factor={**INT, "minimum": -1, "description": "default: "
                                            "default.replication.factor; with assignments: omit (or -1)"},
                        configs=CONFIGS,
                        assignments={**_arr(_obj(["partition", "replicas"], partition=INT, replicas=IDS)),
                                     "description": "manual replica assignments (Kafka's): partitions 0..n-1, "
                                     "each once, the same number of distinct registered brokers each, at least "
                                     "one of them active; the first replica is the preferred leader. Errors: "
                                     "INVALID_REPLICA_ASSIGNMENT, or INVALID_REQUEST with partitions or "
                                     "replication_factor"},
                        validate_only={**BOOL, "description": "check everything, create nothing: answers "
                                       "200 ValidatedTopic"}),
    "ValidatedTopic": _obj(None, name=STR, validate_only=BOOL, partitions=INT, replication_factor=INT,
                           configs=CONFIGS, assignments=_arr(_obj(None, partition=INT, replicas=IDS))),
    "CreatePartitions": _obj(["count"], count={**INT, "minimum": 1, "description": "the new total"},
                             assignments={**_arr(IDS), "description": "manual replicas of each new partition, "
                                          "in order (as many lists as new partitions, each of the topic's "
                                          "replication factor)"},
                             validate_only={**BOOL, "description": "check everything, add nothing: answers "
                                            "ValidatedPartitions"}),
    "ValidatedPartitions": _obj(None, name=STR, validate_only=BOOL, count=INT,
                                assignments=_arr(_obj(None, partition=INT, replicas=IDS))),
    "TopicConfigs": _obj(None, name=STR, configs=CONFIGS, metadata_offset=NULLABLE_INT),
    "BrokerConfigs": _obj(None, broker_id=NULLABLE_INT, configs=CONFIGS, metadata_offset=NULLABLE_INT),
    "GroupConfigs": _obj(None, group_id=STR, configs=CONFIGS, metadata_offset=NULLABLE_INT),
    "AlterConfigs": _obj(None, configs={"type": "object", "additionalProperties": NULLABLE_STR,
                                        "description": "null deletes the key"},
                         ops=_arr(_obj(["name", "op"], name=STR, op={"enum": ["SET", "DELETE", "APPEND", "SUBTRACT"]},
                                       value=NULLABLE_STR)),
                         replace={"type": "object", "additionalProperties": STR,
                                  "description": "the whole new set: keys not named go back to their default"},
                         validate_only={"type": "boolean", "description": "validate, change nothing"}),
    "Elections": _obj(["type"], type={"enum": list(api.ELECTION_TYPES)},
                      partitions={"oneOf": [{"type": "null"}, _arr(_obj(["topic", "partition"], topic=STR,
                                                                          partition=INT))],
                                  "description": "null: every partition whose leader is not the wanted one"}),
    "ElectionResults": _obj(None, results=_arr(_obj(None, topic=STR, partition=INT, error=STR, message=NULLABLE_STR)),
                            metadata_offset=NULLABLE_INT),
    "Deleted": _obj(None, name=STR, deleted=BOOL, metadata_offset=NULLABLE_INT),
    # ACLs (issue 29): Kafka's enum names (any case) or codes; quorum.acl_routes
    "Acl": _obj(["resource_type", "resource_name", "principal", "operation"],
                resource_type={**STR, "description": "TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER"},
                resource_name={**STR, "description": "kafka-cluster for CLUSTER; * matches every name"},
                pattern_type={**STR, "description": "LITERAL (default) or PREFIXED; filters also ANY, MATCH"},
                principal={**STR, "description": "Type:name, e.g. User:alice; User:* is every user"},
                host={**STR, "description": "an address, or * (default)"},
                operation={**STR, "description": "ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, "
                           "CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ..."},
                permission_type={**STR, "description": "ALLOW (default) or DENY"}),
    "AclFilter": _obj(None, resource_type=STR, resource_name=STR, pattern_type=STR, principal=STR, host=STR,
                      operation=STR, permission_type=STR),
    "Acls": _obj(None, acls=_arr(_ref("Acl"))),
    "CreateAcls": _obj(["acls"], acls=_arr(_ref("Acl"))),
    "DeleteAcls": _obj(["filters"], filters=_arr(_ref("AclFilter"))),
    "AclResults": _obj(None, metadata_offset=NULLABLE_INT, results=_arr(_obj(
        None, error=NULLABLE_STR, message=NULLABLE_STR, deleted=_arr(_ref("Acl"))))),
    # SCRAM credentials (issue 29, KIP-554): quorum.scram_routes
    "AlterScramCredentials": _obj(None, deletions=_arr(_obj(["name", "mechanism"], name=STR, mechanism={
        "description": "SCRAM-SHA-256, SCRAM-SHA-512, or Kafka's code (1, 2)"})), upsertions=_arr(_obj(
            ["name", "mechanism", "iterations", "salt", "salted_password"], name=STR,
            mechanism={"description": "SCRAM-SHA-256, SCRAM-SHA-512, or Kafka's code (1, 2)"},
            iterations={**INT, "description": "4096 to 16384"}, salt={**STR, "description": "base64"},
            salted_password={**STR, "description": "base64 of Hi(password, salt, iterations) (RFC 5802)"}))),
    "ScramResults": _obj(None, metadata_offset=NULLABLE_INT, results=_arr(_obj(
        None, user=STR, error=NULLABLE_STR, message=NULLABLE_STR))),
    "ScramCredentials": _obj(None, results=_arr(_obj(None, user=STR, error=NULLABLE_STR, message=NULLABLE_STR,
                                                     credentials=_arr(_obj(None, mechanism=STR, iterations=INT))))),
    # KIP-455: kafka-reassign-partitions.sh's plan file
    "Reassignments": _obj(["partitions"], version={"enum": [1]}, partitions=_arr(_obj(
        ["topic", "partition", "replicas"], topic=STR, partition=INT,
        replicas={"oneOf": [{"type": "null"}, _arr(INT)], "description": "null cancels the reassignment"},
        log_dirs=_arr({"enum": ["any"]})))),
    "ReassignmentResults": _obj(None, results=_arr(_obj(None, topic=STR, partition=INT, error=STR,
                                                        message=NULLABLE_STR)), metadata_offset=NULLABLE_INT),
    "OngoingReassignments": _obj(None, version=INT, partitions=_arr(_obj(
        None, topic=STR, partition=INT, replicas=_arr(INT), adding_replicas=_arr(INT),
        removing_replicas=_arr(INT), target_replicas=_arr(INT)))),
    "DeleteRecords": _obj(["offset"], offset={**INT, "minimum": -1, "description": "the new log start offset; "
                                              "-1: the high watermark"},
                          timeout_ms={**INT, "minimum": 0, "description": "how long the leader waits for every "
                                      "replica to follow (default 30000)"}),
    "RecordsDeleted": _obj(None, topic=STR, partition=INT,
                           low_watermark={**INT, "description": "the lowest log start offset among the replicas"}),
    # Broker RPCs (msgpack). Every answer carries error_code (Kafka's) and error_message.
    "RpcError": _obj(None, error_code=INT, error_message=NULLABLE_STR, field=NULLABLE_STR,
                     controller_id=NULLABLE_INT, controller_address=NULLABLE_STR),
    "BrokerRegistrationRequest": _obj(["broker_id", "incarnation_id", "listeners"], broker_id=INT,
                                      incarnation_id=STR, listeners=_arr(_ref("Listener")), rack=NULLABLE_STR,
                                      cluster_id=NULLABLE_STR),
    "BrokerRegistrationResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR, broker_epoch=INT),
    "BrokerHeartbeatRequest": _obj(["broker_id", "broker_epoch", "current_metadata_offset"], broker_id=INT,
                                   broker_epoch=INT, current_metadata_offset=INT, want_fence=BOOL,
                                   want_shut_down=BOOL),
    "BrokerHeartbeatResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR, is_caught_up=BOOL,
                                    is_fenced=BOOL, should_shut_down=BOOL,
                                    shutdown_requested={**BOOL, "description": "an operator asked this broker "
                                                        "to shut down (POST /v1/brokers/{id}/shutdown): begin a "
                                                        "controlled shutdown as on SIGTERM"}),
    "AlterPartitionRequest": _obj(["broker_id", "broker_epoch", "topics"], broker_id=INT, broker_epoch=INT,
                                  topics=_arr(_obj(None, topic_id=STR, partitions=_arr(_obj(
                                      None, partition_index=INT, leader_epoch=INT, partition_epoch=INT,
                                      leader_recovery_state=INT,
                                      new_isr_with_epochs=_arr(_obj(None, broker_id=INT, broker_epoch=INT))))))),
    "AlterPartitionResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR, topics=_arr(_obj(
        None, topic_id=STR, partitions=_arr(_obj(None, partition_index=INT, error_code=INT,
                                                 error_message=NULLABLE_STR, leader_id=INT, leader_epoch=INT,
                                                 isr=IDS, leader_recovery_state=INT, partition_epoch=INT))))),
    "DescribeQuorumRequest": _obj(None),  # no fields: the metadata log's one partition
    # UpdateFeatures (KIP-584; issue 28): quorum.feature_routes, quorum.feature_control
    "FeatureUpdate": _obj(["feature", "max_version_level"], feature=STR,
                          max_version_level={**INT, "description": "0 removes (disables) the feature"},
                          upgrade_type={"enum": ["upgrade", "safe_downgrade", "unsafe_downgrade", 1, 2, 3],
                                        "description": "default upgrade; a lower level needs a downgrade type"}),
    "UpdateFeatures": _obj(["updates"], updates=_arr(_ref("FeatureUpdate")), validate_only=BOOL),
    "FeaturesUpdated": _obj(None, finalized={"type": "object", "additionalProperties": INT},
                            validate_only=BOOL, metadata_offset=NULLABLE_INT),
    "Features": _obj(None, epoch={**INT, "description": "the metadata offset the levels were read at (Kafka's "
                                                      "finalized features epoch)"},
                     features=_arr(_obj(None, feature=STR, supported_min_version=INT, supported_max_version=INT,
                                        finalized_version_level={**INT, "description": "0: not finalized"}))),
    "UpdateFeaturesRequest": _ref("UpdateFeatures"),
    "UpdateFeaturesResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR,
                                   finalized={"type": "object", "additionalProperties": INT}, metadata_offset=INT),
    # KIP-853: the voter set and changes to it (quorum.voter_routes)
    "VoterEntry": _obj(None, node_id=INT, directory_id=STR, raft_address=STR, api_address=NULLABLE_STR),
    "Voter": _obj(None, node_id=INT, directory_id=STR, raft_address=STR, api_address=NULLABLE_STR, role=STR),
    "Voters": _obj(None, voters=_arr(_ref("Voter")), observers=_arr(_ref("Voter"))),
    "VoterSet": _obj(None, voters=_arr(_ref("VoterEntry"))),
    "AddVoter": _obj(["voter_id", "api_address"], voter_id=INT, api_address=STR, directory_id=STR, raft_address=STR),
    "ReplicaPeers": _obj(["voters"], voters=_arr(STR)),
    "Replica": _obj(None, node_id=INT, directory_id=STR, raft_address=STR, api_address=STR, is_voter=BOOL),
    "AddRaftVoterRequest": _obj(["voter_id", "directory_id", "api_address"], cluster_id=NULLABLE_STR, voter_id=INT,
                                directory_id=STR, api_address=STR, raft_address=NULLABLE_STR),
    "RemoveRaftVoterRequest": _obj(["voter_id", "directory_id"], cluster_id=NULLABLE_STR, voter_id=INT,
                                   directory_id=STR),
    "UpdateRaftVoterRequest": _obj(["voter_id", "directory_id"], cluster_id=NULLABLE_STR, voter_id=INT,
                                   directory_id=STR, api_address=NULLABLE_STR, raft_address=NULLABLE_STR),
    "RaftVoterResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR, voter_ids=IDS),
    "DescribeQuorumResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR, topic=STR, partition=INT,
                                   leader_id=INT, leader_epoch=INT, high_watermark=INT,
                                   voters=_arr(_ref("QuorumReplica")), observers=_arr(_ref("QuorumReplica"))),
    "AllocateProducerIdsRequest": _obj(["broker_id", "broker_epoch"], broker_id=INT, broker_epoch=INT),
    "AllocateProducerIdsResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR,
                                        producer_id_start=INT, producer_id_len=INT),
    "MetadataFetchRequest": _obj(["offset"], offset={**INT, "minimum": 0, "description": "next offset wanted"},
                                 max_wait_ms={**INT, "minimum": 0, "maximum": api.LONG_POLL_MAX_WAIT_MS},
                                 max_records={**INT, "minimum": 1, "maximum": api.MAX_FETCH_RECORDS},
                                 broker_id=INT),
    "MetadataFetchResponse": _obj(None, error_code=INT, error_message=NULLABLE_STR,
                                  records=_arr({"type": "array", "description": "[offset, record map]"}),
                                  last_offset=INT, log_start_offset=INT,
                                  snapshot={"type": ["string", "null"], "contentEncoding": "binary",
                                            "description": "metadata.snapshot bytes when offset < log_start_offset"},
                                  snapshot_offset=NULLABLE_INT),
}


def _body(schema: str, media: str = JSON) -> dict[str, Any]:
    return {"required": True, "content": {media: {"schema": _ref(schema)}}}


def _ok(schema: str | dict[str, Any], media: str = JSON, status: str = "200") -> dict[str, Any]:
    body = _ref(schema) if isinstance(schema, str) else schema
    out: dict[str, Any] = {status: {"description": "OK", "content": {media: {"schema": body}}}}
    if media == JSON:
        out["4XX"] = {"description": "bad input: unknown field, wrong type, unknown topic (404), "
                      "body too large (413), missing/wrong token (401/403)",
                      "content": {JSON: {"schema": _ref("Error")}}}
        out["5XX"] = {"description": "no active controller (503), outcome unknown (504)",
                      "content": {JSON: {"schema": _ref("Error")}}}
    return out


def _op(summary: str, responses: dict[str, Any], body: dict[str, Any] | None = None,
        write: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = body
    if write:
        op["security"] = [{"adminToken": []}, {}]
    return op


NAME_PARAM: Final = {"name": "name", "in": "path", "required": True, "schema": STR}
ID_PARAM: Final = {"name": "id", "in": "path", "required": True, "schema": INT}
PARTITION_PARAM: Final = {"name": "partition", "in": "path", "required": True, "schema": INT}
GROUP_PARAM: Final = {"name": "id", "in": "path", "required": True, "schema": STR, "description": "the group id"}


def _rpc(summary: str, name: str, active_only: bool = True) -> dict[str, Any]:
    note = (" Answered by the active controller only; others answer error_code 41 NOT_CONTROLLER "
            "with controller_id and controller_address.") if active_only else " Answered by every controller."
    return {"post": _op(summary + note, _ok(f"{name}Response", MSGPACK), _body(f"{name}Request", MSGPACK))}


PATHS: Final[dict[str, Any]] = {
    "/v1/cluster": {"get": _op("Quorum and metadata log state as this controller sees it.", _ok("Cluster"))},
    "/v1/brokers": {"get": _op("Registered brokers.", _ok(_arr(_ref("Broker"))))},
    "/v1/quorum": {"get": _op(
        "DescribeQuorum (Kafka API 55), answered by the active controller (forwarded there): the leader and "
        "its Raft epoch, the high watermark, each voter's and observer's (broker's) log end offset and last "
        "fetch / caught-up times.", _ok("Quorum"))},
    "/v1/quorum/voters": {
        "get": _op("The voter set as this controller's log holds it (KIP-853): ids, directory ids, quorum and "
                   "API addresses, which leads; and the observers the leader is catching up.", _ok("Voters")),
        "post": _op("AddRaftVoter: the new controller (running, an observer) is asked who it is at api_address, "
                    "caught up, then made a voter; answered once a majority of the new set committed it. 409 "
                    "DUPLICATE_VOTER, 504 REQUEST_TIMED_OUT (not running, not caught up, another directory id, "
                    "an earlier change pending), 400 INVALID_REQUEST; the set is unchanged by any refusal.",
                    _ok("VoterSet"), _body("AddVoter"), write=True),
    },
    "/v1/quorum/voters/{id}": {
        "parameters": [ID_PARAM, {"name": "directory_id", "in": "query", "required": True, "schema": STR}],
        "delete": _op("RemoveRaftVoter: removing the active controller hands leadership over first. 404 "
                      "VOTER_NOT_FOUND (not a voter with that directory id, or the last voter), 504 "
                      "REQUEST_TIMED_OUT (the remaining voters would have no reachable majority).",
                      _ok("VoterSet"), write=True),
    },
    "/v1/quorum/replica": {
        "get": _op("This controller's node id, directory id and addresses, and whether it is a voter.",
                   _ok("Replica")),
        "post": _op("What an add asks of the new controller: it is told the current voters' quorum addresses "
                    "(an observer then connects to them) and answers as the GET does. No token: a hint.",
                    _ok("Replica"), _body("ReplicaPeers")),
    },
    "/v1/features": {
        "get": _op("Finalized features (KIP-584): each supported feature's range and finalized level, and the "
                   "epoch; a log written before feature records answers what it behaves as.", _ok("Features")),
        "post": _op("UpdateFeatures on the active controller (forwarded there): every update checked first, the "
                    "first refusal refuses all (400 INVALID_UPDATE_VERSION with Kafka's message, INVALID_REQUEST "
                    "for duplicates); enabling eligible.leader.replicas.version writes the cluster-level "
                    "min.insync.replicas if unset, disabling it clears every partition's ELR; validate_only "
                    "writes nothing.", _ok("FeaturesUpdated"), _body("UpdateFeatures"), write=True),
    },
    "/v1/brokers/configs": {
        "get": _op("The cluster-wide dynamic broker configs (BROKER resource \"\").", _ok("BrokerConfigs")),
        "patch": _op("Change the cluster-wide dynamic broker configs, same body as a topic's; only Kafka's "
                     "dynamic keys tidelog applies live (400 INVALID_REQUEST otherwise, INVALID_CONFIG for an "
                     "unknown key or bad value).", _ok("BrokerConfigs"), _body("AlterConfigs"), write=True),
    },
    "/v1/brokers/{id}/configs": {
        "parameters": [ID_PARAM],
        "get": _op("A broker's own dynamic configs (as stored; DescribeConfigs shows the effective ones).",
                   _ok("BrokerConfigs")),
        "patch": _op("Change a broker's own dynamic configs (the same rules as the cluster default).",
                     _ok("BrokerConfigs"), _body("AlterConfigs"), write=True),
    },
    "/v1/brokers/{id}": {"parameters": [ID_PARAM], "get": _op("One broker.", _ok("Broker"))},
    "/v1/brokers/{id}/shutdown": {"parameters": [ID_PARAM], "post": _op(
        "Ask the broker to shut down: answered 202 at once; the active controller tells the broker on its "
        "next heartbeat and the broker runs the same controlled shutdown as on SIGTERM (watch its state in "
        "GET /v1/brokers/{id}). No body. Soft state: after a controller failover, ask again.",
        _ok("ShutdownRequested", status="202"), write=True)},
    "/v1/topics": {
        "get": _op("Topics with partition counts.", _ok(_arr(_ref("TopicSummary")))),
        "post": _op("Create a topic; answered once committed (201), or with validate_only what it would "
                    "create (200, nothing written).",
                    {**_ok("Topic", status="201"), **_ok("ValidatedTopic")}, _body("CreateTopic"), write=True),
    },
    "/v1/topics/{name}": {
        "parameters": [NAME_PARAM],
        "get": _op("A topic and its partitions.", _ok("Topic")),
        "delete": _op("Delete a topic.", _ok("Deleted"), write=True),
    },
    "/v1/topics/{name}/partitions": {
        "parameters": [NAME_PARAM],
        "post": _op("Grow a topic to `count` partitions (with validate_only: only check, answering "
                    "ValidatedPartitions).", {**_ok("ValidatedPartitions"), "200": {
                        "description": "OK", "content": {JSON: {"schema": {"oneOf": [
                            _ref("Topic"), _ref("ValidatedPartitions")]}}}}},
                    _body("CreatePartitions"), write=True),
    },
    "/v1/topics/{name}/configs": {
        "parameters": [NAME_PARAM],
        "get": _op("A topic's explicitly set configs.", _ok("TopicConfigs")),
        "patch": _op("Change topic configs: exactly one of `configs` (set, or null to delete), `ops` "
                     "(IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT) and `replace` (AlterConfigs).",
                     _ok("TopicConfigs"), _body("AlterConfigs"), write=True),
    },
    "/v1/topics/{name}/partitions/{partition}/delete-records": {
        "parameters": [NAME_PARAM, PARTITION_PARAM],
        "post": _op("DeleteRecords on the partition's leader: move the log start offset to `offset` and wait for "
                    "every replica to follow; 400 OFFSET_OUT_OF_RANGE beyond the high watermark (nothing "
                    "applied), 504 REQUEST_TIMED_OUT when a replica did not follow in time.",
                    _ok("RecordsDeleted"), _body("DeleteRecords"), write=True),
    },
    "/v1/acls": {
        "get": _op("DescribeAcls: the ACLs matching the filter given as query parameters (AclFilter's fields; "
                   "absent: any).", _ok("Acls")),
        "post": _op("CreateAcls: one result per ACL, error INVALID_REQUEST for one Kafka refuses; an ACL equal "
                    "to an existing one succeeds without a change.", _ok("AclResults"), _body("CreateAcls"),
                    write=True),
    },
    "/v1/acls/delete": {"post": _op("DeleteAcls: one result per filter, listing the ACLs it removed.",
                                    _ok("AclResults"), _body("DeleteAcls"), write=True)},
    "/v1/scram-credentials": {
        "get": _op("DescribeUserScramCredentials (KIP-554): every user with a credential, or those named by "
                   "repeated ?user= (RESOURCE_NOT_FOUND / DUPLICATE_RESOURCE per user).", _ok("ScramCredentials")),
        "post": _op("AlterUserScramCredentials (KIP-554): one result per user; a user named twice gets "
                    "DUPLICATE_RESOURCE and no change.", _ok("ScramResults"), _body("AlterScramCredentials"),
                    write=True),
    },
    "/v1/elections": {"post": _op("Preferred or unclean leader election.", _ok("ElectionResults"),
                                  _body("Elections"), write=True)},
    "/v1/reassignments": {
        "get": _op("Ongoing partition reassignments (ListPartitionReassignments); ?topic=T narrows.",
                   _ok("OngoingReassignments")),
        "post": _op("Reassign partitions (AlterPartitionReassignments, KIP-455): one result per entry; a 4xx "
                    "naming partitions[i].replicas when no entry was accepted.", _ok("ReassignmentResults"),
                    _body("Reassignments"), write=True),
    },
    "/v1/groups": {"get": _op("Consumer groups (ListGroups on every unfenced broker).",
                              _ok(_arr(_ref("GroupSummary"))))},
    "/v1/groups/{id}": {
        "parameters": [GROUP_PARAM],
        "get": _op("A consumer group from its coordinator: state, members, and per partition the committed "
                   "offset, the log end offset (high watermark) and the lag.", _ok("Group")),
        "delete": _op("Delete an empty group and its committed offsets (409 NON_EMPTY_GROUP while it has "
                      "members, 404 GROUP_ID_NOT_FOUND).", _ok("GroupDeleted"), write=True),
    },
    "/v1/groups/{id}/offsets": {
        "parameters": [GROUP_PARAM],
        "post": _op("Reset an inactive group's committed offsets of one topic, as kafka-consumer-groups "
                    "--reset-offsets: a dry run unless execute is true; 409 NON_EMPTY_GROUP while it has members.",
                    _ok("GroupOffsetsReset"), _body("ResetGroupOffsets"), write=True),
    },
    "/v1/groups/{id}/configs": {  # KIP-848's per-group configs (quorum/group_config_routes.py)
        "parameters": [GROUP_PARAM],
        "get": _op("A group's own configs, as stored (consumer.session.timeout.ms, consumer.heartbeat.interval.ms).",
                   _ok("GroupConfigs")),
        "patch": _op("Change a group's own configs (400 INVALID_CONFIG for an unknown key or a value that is not a "
                     "positive int).", _ok("GroupConfigs"), _body("AlterConfigs"), write=True),
    },
    "/v1/transactions": {
        "parameters": [{"name": "duration_filter", "in": "query", "schema": INT,
                        "description": "ms: only transactions running longer (KIP-994)"}],
        "get": _op("Transactions (ListTransactions on every unfenced broker), by coordinator.",
                   _ok(_arr(_ref("TransactionListing"))))},
    "/v1/transactions/{id}": {
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": STR,
                        "description": "the transactional id"}],
        "get": _op("A transactional id from its coordinator (DescribeTransactions); 404 "
                   "TRANSACTIONAL_ID_NOT_FOUND.", _ok("Transaction")),
    },
    "/v1/topics/{name}/partitions/{partition}/producers": {
        "parameters": [NAME_PARAM, PARTITION_PARAM, {"name": "broker_id", "in": "query", "schema": INT,
                                                     "description": "a replica's view instead of the leader's"}],
        "get": _op("Active producers of a partition and their open transactions (DescribeProducers).",
                   _ok("PartitionProducers")),
    },
    "/v1/topics/{name}/partitions/{partition}/abort-transaction": {
        "parameters": [NAME_PARAM, PARTITION_PARAM],
        "post": _op("Abort a hanging transaction as kafka-transactions abort: WriteTxnMarkers (abort) on the "
                    "partition's leader for the producer whose open transaction starts at start_offset; 400 "
                    "INVALID_REQUEST (field start_offset) when none does.", _ok("TransactionAborted"),
                    _body("AbortTransaction"), write=True),
    },
    "/v1/hanging-transactions": {
        "parameters": [{"name": "topic", "in": "query", "schema": STR},
                       {"name": "partition", "in": "query", "schema": INT, "description": "needs topic"},
                       {"name": "broker_id", "in": "query", "schema": INT,
                        "description": "every partition with a replica there (topic or broker_id is required)"},
                       {"name": "max_transaction_timeout", "in": "query", "schema": INT,
                        "description": "minutes (default 15): only transactions open longer are candidates"}],
        "get": _op("Open transactions that no coordinator will end, as kafka-transactions find-hanging: open "
                   "longer than max_transaction_timeout, and their producer's coordinator does not list the "
                   "partition.", _ok(_arr(_ref("HangingTransaction")))),
    },
    "/metrics": {"get": _op("Prometheus text format 0.0.4.", _ok(STR, "text/plain"))},
    "/openapi.json": {"get": _op("This document.", _ok({"type": "object"}))},
    "/rpc/broker-registration": _rpc("BrokerRegistration: broker_epoch is its RegisterBroker record's offset.",
                                     "BrokerRegistration"),
    "/rpc/broker-heartbeat": _rpc("BrokerHeartbeat.", "BrokerHeartbeat"),
    "/rpc/alter-partition": _rpc("AlterPartition from a partition leader.", "AlterPartition"),
    "/rpc/allocate-producer-ids": _rpc("AllocateProducerIds.", "AllocateProducerIds"),
    "/rpc/describe-quorum": _rpc("DescribeQuorum for a broker a client asked (the answer of GET /v1/quorum).",
                                 "DescribeQuorum"),
    "/rpc/update-features": _rpc("UpdateFeatures for a broker a client asked (the body of POST /v1/features).",
                                 "UpdateFeatures"),
    "/rpc/add-raft-voter": {"post": _op("AddRaftVoter for a broker a client asked (KIP-853).", _ok(
        "RaftVoterResponse", MSGPACK), _body("AddRaftVoterRequest", MSGPACK))},
    "/rpc/remove-raft-voter": {"post": _op("RemoveRaftVoter for a broker a client asked (KIP-853).", _ok(
        "RaftVoterResponse", MSGPACK), _body("RemoveRaftVoterRequest", MSGPACK))},
    "/rpc/update-raft-voter": {"post": _op("UpdateRaftVoter (KIP-853): accepted when it changes nothing.", _ok(
        "RaftVoterResponse", MSGPACK), _body("UpdateRaftVoterRequest", MSGPACK))},
    "/rpc/metadata-fetch": _rpc(
        "Committed metadata records from `offset`, long-polling up to max_wait_ms when there are none, "
        "or a snapshot when `offset` is below the retained log start.", "MetadataFetch", active_only=False),
}


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may not modify the shared one)."""
    return copy.deepcopy({
        "openapi": "3.1.0",
        "info": {"title": "tidelog controller API", "version": "1",
                 "description": "Admin API (JSON) and broker RPCs (msgpack) of a tidelog controller. Reads "
                                "are served from this controller's committed image; writes on a non-active "
                                "controller are forwarded to the active one."},
        "paths": PATHS,
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer",
                                                          "description": "admin.token, when set"}}},
    })

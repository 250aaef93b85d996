"""Limits shared by more than one module, in one place, each with its unit (common.units).

What belongs where (issue 26; style.md rule 9):

- a value an operator can set is a config: its default lives in the config table
  (`common.config.BROKER_KEYS`, `common.topic_config`) and code reads it from there
  (`common.config.default_int`), never restates it;
- a fixed limit used by two or more modules lives here, grouped by concern, with a
  one-line reason for its value; modules import it, never copy it;
- a fixed limit of one algorithm, used by one module only, stays in that module, named,
  with its unit and its reason (for example `broker.server.MAX_IN_FLIGHT`): moving it here
  would only separate it from the code it bounds.

`tests/unit/test_limits.py` keeps it so: no two modules define a limit of the same name and
value, no module restates a name defined here, and no module restates a config default it
names.
"""

from __future__ import annotations

from typing import Final

from common.units import KIB, MIB, SECOND_MS, SECONDS

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# --- Kafka's own field and format limits
MAX_TOPIC_NAME_LENGTH: Final = 249  # characters; Kafka's Topic.MAX_NAME_LENGTH
MAX_REPLICATION_FACTOR: Final = 2**15 - 1  # replicas; Kafka's replication factor is an int16 field
PORT_MAX: Final = 65535  # a TCP port is 16 bits
MAX_VARLONG_BYTES: Final = 10  # bytes; a zigzag varlong carries 64 bits in 7-bit groups
# The smallest classic (non-flexible) topic entry: an empty name (int16) and no partitions
# (int32); a peer's array count is checked against the bytes left at this size each.
MIN_CLASSIC_TOPIC_BYTES: Final = 6  # bytes

# --- Vectorised (numpy) scans of record bytes: the log cleaner's and the Spark reader's
# Zero bytes after the scanned bytes, so that a read starting at the last position (two 8-byte
# words of a key, or a varint's continuation bytes) never leaves the buffer.
SCAN_PADDING: Final = 2 * 8  # bytes

# --- Sockets and reads
READ_SIZE: Final = 64 * KIB  # one read of a socket or of stdin: a few frames, never a whole log
# Connecting over loopback: a dead peer refuses at once, only a cut link (a chaos firewall)
# waits for this.
CONNECT_TIMEOUT: Final = 1 * SECONDS

# --- Event loops
STALL_LOG_MS: Final = 250  # ms; a controller's or broker's event-loop stall this long is logged (sessions are at risk)

# --- The controllers' admin operations
# Metadata records one admin operation may write, one per partition of a topic creation, a
# leader election or a reassignment: Kafka's QuorumController.MAX_RECORDS_PER_USER_OP (its
# MAX_RECORDS_PER_BATCH), which createTopics, electLeaders and alterPartitionReassignments all
# bound their record lists with.
MAX_RECORDS_PER_USER_OP: Final = 10_000  # records (partitions)

# --- The controllers' admin HTTP API, as its clients see it
# One answer, forwarded by a controller or read by a client: a topic with thousands of partitions.
MAX_ADMIN_ANSWER_BYTES: Final = 64 * MIB
# An answer with one result line per partition (elections, reassignments) of a large cluster.
MAX_PARTITION_RESULTS_BYTES: Final = 8 * MIB
# One admin write from a client (a broker's handler, a test): the controller it reaches may
# forward it (quorum.admin_api.FORWARD_TIMEOUT, 50 s: a 10,000-partition create behind others
# on a busy controller) and then wait to apply it (FORWARD_APPLY_WAIT, 5 s) before answering;
# the client waits for both.
ADMIN_WRITE_TIMEOUT: Final = 55 * SECONDS
# The admin server's own Kafka calls to brokers (group and transaction views): one call, and
# the largest answer read (a group or transaction listing of a large cluster).
ADMIN_BROKER_CALL_TIMEOUT: Final = 10 * SECONDS
MAX_ADMIN_BROKER_ANSWER_BYTES: Final = 16 * MIB
# One small answer of a controller's admin server read by a node or a broker (a topic creation's
# result, a controller's quorum status at a peer's start).
MAX_CONTROLLER_ANSWER_BYTES: Final = 1 * MIB
# How long a broker's admin write (an ACL, a SCRAM credential) waits, once the controllers
# committed it, for this broker's own image to have it before answering: read-your-writes.
ADMIN_APPLY_WAIT_MS: Final = 30 * SECOND_MS

# --- Chaos faults
COMMAND_TIMEOUT_S: Final = 10.0  # one kernel tool run (iptables, ip, tc) by a nemesis
# A chaos proxy (the hold nemesis, the link-delay proxy) reaching the destination it stands for
PROXY_CONNECT_TIMEOUT: Final = 5 * SECONDS

# --- Kafka clients we write (producer, consumer, admin, Spark reader)
CLIENT_RETRY_BACKOFF: Final = 0.1 * SECONDS  # Kafka's retry.backoff.ms default (100 ms)
# Setting up a connection to a broker over any network (not CONNECT_TIMEOUT's loopback one):
# Kafka's clients' socket.connection.setup.timeout.ms default (10 s).
CLIENT_CONNECT_TIMEOUT: Final = 10 * SECONDS
# An answer, beyond the request's own timeout_ms / max_wait_ms: Kafka's clients' request.timeout.ms
# default (30 s).
CLIENT_REQUEST_TIMEOUT: Final = 30 * SECONDS

# --- Harnesses: local clusters, tests, chaos runs
READY_TIMEOUT: Final = 30 * SECONDS  # a local cluster's nodes answer their readiness probes
POLL_INTERVAL: Final = 0.05 * SECONDS  # a test's bounded poll of a process or an admin read
KILL_WAIT: Final = 5 * SECONDS  # a SIGKILLed process is reaped well within this
WATCH_INTERVAL: Final = 0.5 * SECONDS  # a foreground command looks at what it watches this often
# One read of one local node (an admin API read, a readiness probe, a Metadata request): a paused
# or cut-off node must not stall the wait or the chaos step that asked.
NODE_READ_TIMEOUT: Final = 2 * SECONDS
CHAOS_POLL_S: Final = 0.2 * SECONDS  # a chaos workload or scenario step polls this often
# Harvested log lines carry wall-clock milliseconds, the events they are compared with the
# harness's or the client's clock: a checker allows this much between the two.
CLOCK_SLACK_S: Final = 1.0 * SECONDS

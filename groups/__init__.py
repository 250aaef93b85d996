"""Consumer groups, pure: `__consumer_offsets` records in Kafka's schemas, the classic group
state machine and the rules of the group APIs (join, sync, heartbeat, leave, offsets). No I/O:
the broker's coordinator runtime (broker/group_coordinator/) owns sockets, timers and appends."""

PURE = True  # every module of this package is a pure core: no sockets, threads, clocks or files

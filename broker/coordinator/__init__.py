"""The broker's coordinator runtime (Kafka 4's coordinator-common): partitioned state machines
over an internal topic, pending vs committed state, batched acks=all appends, timers.

`runtime.CoordinatorRuntime` is the runtime; `replica_writer.ReplicaPartitionWriter` binds it
to this broker's replica manager. The group coordinator (`broker.group_coordinator`) runs on
it; the transaction and share-group coordinators are meant to.
"""

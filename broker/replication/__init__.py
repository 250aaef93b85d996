"""Replication, in one place.

Pure rules (no I/O, no clocks): the leader's high watermark and follower fetch state
(`high_watermark`), the ISR changes it proposes to the controller (`isr_policy`), and the
follower's truncation by leader epoch (`truncation`, KIP-101/279). `partition` is Kafka's
Partition over them (state, no I/O of its own).

Shells: the follower's fetchers (`replica_fetcher`, one `kafka_connection` per leader; what
each round must look at is the pure `fetch_rounds`, what each Fetch names `fetch_session_handler`) and
AlterPartition to the controller (`alter_partition_manager`). The broker's ReplicaManager
(`broker/replica_manager.py`) owns the hosted partitions and feeds the rules `now_ms`,
offsets and OffsetForLeaderEpoch answers.

This file imports nothing, so importing a pure rule loads no shell.
"""

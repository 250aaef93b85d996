"""Pure replication rules (no I/O, no clocks): the leader's high watermark and follower
fetch state (`high_watermark`), the ISR changes it proposes to the controller
(`isr_policy`), and the follower's truncation by leader epoch (`truncation`, KIP-101/279).

The broker shell (`broker/replica_manager.py` and the replica fetcher) owns the state and
feeds these functions `now_ms`, offsets and OffsetForLeaderEpoch answers.
"""

"""The broker's group coordinator: the shell around the pure `groups/` core.

`runtime.GroupCoordinator` owns the `__consumer_offsets` partitions this broker leads
(loading, appending with acks=all, the session/rebalance timers); `handlers` turns decoded
group API requests into calls on it; `offsets_topic` creates the topic and answers
FindCoordinator.
"""

"""The broker's group coordinator: the shell around the pure `groups/` core.

`runtime.GroupCoordinator` runs the `groups/` rules on the coordinator runtime
(`broker.coordinator`: one state per `__consumer_offsets` partition led here, acks=all
appends batched per partition, answers at commit, a timer per group's next deadline);
`handlers` turns decoded group API requests into calls on it; `offsets_topic` creates the
topic and answers FindCoordinator.
"""

"""The broker's group coordinator: the shell around the pure `groups/` core.

`runtime.GroupCoordinator` runs the `groups/` rules on the coordinator runtime
(`broker.coordinator`: one state per `__consumer_offsets` partition led here, acks=all
appends batched per partition, answers at commit, a timer per group's next deadline);
`offsets_topic` creates the topic and answers FindCoordinator. The group APIs' handlers,
which turn decoded requests into calls on it, are `broker.handlers.groups`.
"""

"""The controller node: the Raft metadata quorum, the active controller and the admin API."""

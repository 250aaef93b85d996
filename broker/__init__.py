"""The broker node: log storage, the Kafka wire protocol and the replica manager."""

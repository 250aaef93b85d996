"""tidelog: a Kafka-compatible, KRaft-style streaming log. Shared glue: CLI, config, logging."""

__version__ = "0.1.0"

"""The shared vocabulary: what every package may import and what imports none of them.

Kafka's wire codecs and record-batch format, the one error-code enum, units and named
limits, the node and topic config schemas, and the broker<->controller RPC messages.
"""

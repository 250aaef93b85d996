"""The CLI's shell of `common.transaction_admin`: its steps driven over a blocking KafkaClient.

    with KafkaClient(bootstrap) as client:
        admin = TransactionAdmin(client)
        admin.run(ta.list_transactions(admin.cluster()))
        admin.run(ta.describe_transaction("orders-app-1"))

A broker that cannot be reached is answered to the step as `Unreachable` (the step turns it
into BROKER_NOT_AVAILABLE); a Backoff sleeps Kafka's retry.backoff.ms.
"""

from __future__ import annotations

import time
from typing import Any

from common import transaction_admin as ta
from common.broker_connection import BrokerUnavailable
from common.kafka_client import KafkaClient
from common.limits import CLIENT_RETRY_BACKOFF
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition


class TransactionAdmin:
    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    def cluster(self) -> ta.Cluster:
        """Brokers, leaders and replicas of every topic, from one Metadata request."""
        info = self.client.metadata(None)
        partitions = {TopicPartition(name, p): ta.PartitionView(part.leader, part.replicas)
                      for name, topic in info.topics.items() if topic.error_code == 0
                      for p, part in topic.partitions.items()}
        return ta.Cluster(tuple(sorted(info.brokers)), partitions, frozenset(info.topics))

    def _send(self, call: ta.Call) -> Any:
        api_key = ApiKey(call.api_key)
        broker = None if call.broker_id == ta.ANY_BROKER else call.broker_id
        try:
            return self.client.call(broker, api_key, call.version, call.request, lambda r, v: call.encode_body(),
                                    lambda body, v: call.decode_body(body))
        except BrokerUnavailable as exc:
            return ta.Unreachable(str(exc))

    def run(self, steps: ta.Steps) -> Any:
        """Drive a step generator to its result; TransactionToolError as it raises them."""
        if not self.client.brokers:  # a Call names brokers by id: learn their addresses first
            self.client.metadata([])
        try:
            step = next(steps)
            while True:  # bounded: every step function has a bounded number of calls
                if isinstance(step, ta.Backoff):
                    time.sleep(CLIENT_RETRY_BACKOFF)
                    step = steps.send(None)
                else:
                    step = steps.send(self._send(step))
        except StopIteration as done:
            return done.value

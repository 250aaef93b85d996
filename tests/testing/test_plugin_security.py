"""The plugin's `security=` marker (issue 29), as its users meet it: a pytester suite whose tests
ask for a SASL_SSL, SSL or SASL_PLAINTEXT cluster and produce and consume with the config the
fixtures hand them (confluent-kafka, kafka-python, aiokafka), against real one-node clusters."""

from __future__ import annotations

import pytest

from tests.testing.test_plugin import ONE_NODE, _sources, no_node_left, run  # noqa: F401 (_sources: autouse)

pytest_plugins = ["pytester"]

INNER = """
    import asyncio
    import time
    import pytest
    import kafka
    import aiokafka
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    def confluent_round_trip(config, topic):
        producer = Producer({**config, "acks": "all"})
        for i in range(5):
            producer.produce(topic, value=b"c%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer({**config, "group.id": "g-" + topic, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got = []
        for _ in range(300):
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                got.append(message.value())
            if len(got) == 5:
                break
        consumer.close()
        assert got == [b"c%d" % i for i in range(5)]

    def kafka_python_round_trip(config, topic):
        producer = kafka.KafkaProducer(acks="all", **config)
        producer.send(topic, b"kp").get(timeout=30)
        producer.close()
        consumer = kafka.KafkaConsumer(topic, group_id="kp-" + topic, auto_offset_reset="earliest",
                                       consumer_timeout_ms=30000, **config)
        assert next(iter(consumer)).value == b"kp"
        consumer.close()

    def aiokafka_round_trip(config, topic):
        async def go():
            producer = aiokafka.AIOKafkaProducer(**config)
            await producer.start()
            try:
                await producer.send_and_wait(topic, b"ak")
            finally:
                await producer.stop()
            consumer = aiokafka.AIOKafkaConsumer(topic, group_id="ak-" + topic, auto_offset_reset="earliest",
                                                 **config)
            await consumer.start()
            try:
                return (await asyncio.wait_for(consumer.getone(), 30)).value
            finally:
                await consumer.stop()
        assert asyncio.run(go()) == b"ak"

    def refused(config, error):
        # librdkafka retries a refused connection until list_topics' timeout: wait instead for the
        # refusal itself (error_cb, served by poll), then ask for metadata for as long as this
        # loopback broker, which just served the round trips, takes to answer
        errors = []
        admin = AdminClient({**config, "socket.timeout.ms": 3000, "error_cb": errors.append})
        deadline = time.monotonic() + 10
        while not any(e.code() == error for e in errors):  # bounded by the deadline
            assert time.monotonic() < deadline, f"not refused in 10 s; errors: {[e.str() for e in errors]}"
            admin.poll(0.05)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=1)

    def plaintext_client_refused(config):
        # the secured port speaks only its protocol: a PLAINTEXT client there is hung up on and
        # gets no metadata
        refused({"bootstrap.servers": config["bootstrap.servers"]}, KafkaError._ALL_BROKERS_DOWN)

    @pytest.mark.tidelog(security="SASL_SSL")
    def test_sasl_ssl(tidelog_cluster, tidelog_client_config, tidelog_bootstrap, tidelog_topic):
        assert tidelog_client_config == tidelog_cluster.client_config()
        assert tidelog_client_config["security.protocol"] == "SASL_SSL"
        assert tidelog_client_config["bootstrap.servers"] != tidelog_bootstrap  # the secured listener
        topic = tidelog_topic()
        confluent_round_trip(tidelog_client_config, topic)
        python = tidelog_cluster.python_client_config()
        assert python["security_protocol"] == "SASL_SSL" and python["ssl_context"] is not None
        kafka_python_round_trip(python, tidelog_topic())
        aiokafka_round_trip(tidelog_cluster.python_client_config(), tidelog_topic())
        plaintext_client_refused(tidelog_client_config)
        refused({**tidelog_client_config, "sasl.password": "wrong"}, KafkaError._AUTHENTICATION)

    @pytest.mark.tidelog(security="SSL")
    def test_ssl(tidelog_cluster, tidelog_client_config, tidelog_topic):
        assert tidelog_client_config["security.protocol"] == "SSL"
        assert "ssl.certificate.location" in tidelog_client_config  # mutual TLS: the client's principal
        topic = tidelog_topic()
        confluent_round_trip(tidelog_client_config, topic)
        kafka_python_round_trip(tidelog_cluster.python_client_config(), tidelog_topic())

    @pytest.mark.tidelog(security="SASL_PLAINTEXT")
    def test_sasl_plaintext(tidelog_cluster, tidelog_client_config, tidelog_topic):
        assert tidelog_client_config["security.protocol"] == "SASL_PLAINTEXT"
        assert "ssl_context" not in tidelog_cluster.python_client_config()
        topic = tidelog_topic()
        confluent_round_trip(tidelog_client_config, topic)
        kafka_python_round_trip(tidelog_cluster.python_client_config(), tidelog_topic())

    def test_plaintext_default(tidelog_cluster, tidelog_client_config, tidelog_bootstrap):
        assert tidelog_client_config == {"bootstrap.servers": tidelog_bootstrap}
        assert tidelog_cluster.python_client_config() == {"bootstrap_servers": tidelog_bootstrap}
"""


def test_security_marker(pytester: pytest.Pytester) -> None:
    pytester.makeini(ONE_NODE)
    pytester.makepyfile(test_inner=INNER)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=4)
    no_node_left(pytester.path)


def test_unknown_security_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(ONE_NODE)
    pytester.makepyfile(test_inner="""
        import pytest

        @pytest.mark.tidelog(security="KERBEROS")
        def test_never_runs(tidelog_cluster):
            pass
    """)
    result = run(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*security must be one of SASL_SSL, SSL, SASL_PLAINTEXT*KERBEROS*"])
    no_node_left(pytester.path)

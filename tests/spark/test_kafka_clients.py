"""spark/kafka_clients.py: our fixed settings win, and librdkafka's refusals name the option.

Creating a client contacts no broker, so these run without a cluster.
"""

from __future__ import annotations

import pytest

from spark import kafka_clients
from spark.options import OptionError, parse_sink_options, parse_source_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}  # nothing listens there; nothing is sent


def test_an_unknown_setting_is_an_error_naming_the_option() -> None:
    options = parse_source_options({**BOOT, "subscribe": "t", "kafka.no.such.setting": "5"}, streaming=False)
    with pytest.raises(OptionError, match="option 'kafka.no.such.setting' rejected by librdkafka"):
        kafka_clients.consumer(options, "driver")


def test_librdkafka_settings_pass_through() -> None:
    options = parse_source_options({**BOOT, "subscribe": "t", "kafka.fetch.max.bytes": "1048576",
                                    "kafka.client.id": "mine"}, streaming=False)
    kafka_clients.consumer(options, "executor").close()
    kafka_clients.admin(options)  # consumer-only settings are left out of the admin client
    sink = parse_sink_options({**BOOT, "topic": "t", "kafka.linger.ms": "50"}, streaming=False)
    kafka_clients.producer(sink, lambda err, msg: None).flush(0)


def test_the_sources_own_settings_win() -> None:
    config = {**kafka_clients.CONSUMER_DEFAULTS, "enable.partition.eof": False, **kafka_clients.CONSUMER_FIXED}
    assert config["enable.partition.eof"] is True and config["auto.offset.reset"] == "error"
    assert kafka_clients.PRODUCER_DEFAULTS["acks"] == "all" and kafka_clients.PRODUCER_DEFAULTS["enable.idempotence"]

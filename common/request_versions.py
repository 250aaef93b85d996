"""The version of each Kafka API our own clients send: the replica fetcher (broker), the
command-line Kafka client (common.kafka_client) and the Spark reader (spark.fetch_client).

One definition, so the three speak the same dialect to our brokers and to Kafka's: each is the
newest version before the API turned flexible (Metadata 9, ListOffsets 6, Fetch 12 add tagged
fields), which carries everything these clients ask for (Fetch v11: KIP-392's rack id and
the fetch sessions; ListOffsets v5: the leader epoch; Metadata v8: the authorized operations).
"""

from __future__ import annotations

from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

METADATA_VERSION: Final = 8
LIST_OFFSETS_VERSION: Final = 5
FETCH_VERSION: Final = 11

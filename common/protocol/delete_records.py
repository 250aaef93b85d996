"""DeleteRecords (key 21), v0–v2: its messages are kio's generated ones (`messages.py`); what
stays here are the two sentinels Kafka's DeleteRecords classes name.

v1 is v0 (it only changed throttling); v2 is the first flexible version. An offset of -1
(`HIGH_WATERMARK`) means "up to the high watermark". The response's low_watermark is the
lowest log start offset among the partition's live replicas once the request completed.
"""

from __future__ import annotations

from typing import Final

HIGH_WATERMARK: Final = -1  # DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK: Final = -1  # DeleteRecordsResponse.INVALID_LOW_WATERMARK

"""Control records: the commit and abort markers that end a transaction in a partition.

    batch = marker_batch(commit=True, producer_id=7, producer_epoch=2, coordinator_epoch=0, timestamp_ms=now)
    marker = decode_marker(key, value)     # EndTransactionMarker(ABORT|COMMIT, coordinator_epoch)

Kafka's format (ControlRecordType, EndTransactionMarker): a control batch (attributes bit 5,
always transactional too) holds exactly one record. Its key is `version int16, type int16`
(version 0; ABORT = 0, COMMIT = 1; KRaft's own types 2-6 never reach a partition log); its
value is `version int16, coordinator_epoch int32` (version 0). The batch carries the ending
producer's id and epoch and no sequence. Readers skip a type they do not know, as Kafka's
ControlRecordType.UNKNOWN.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from common.record_batch import NO_SEQUENCE
from common.records import build_batch

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

CONTROL_KEY_VERSION: Final = 0
MARKER_VALUE_VERSION: Final = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.type is ControlType.COMMIT


def encode_marker(marker: EndTransactionMarker) -> tuple[bytes, bytes]:
    """The control record's (key, value) bytes."""
    return (_KEY.pack(CONTROL_KEY_VERSION, int(marker.type)),
            _VALUE.pack(MARKER_VALUE_VERSION, marker.coordinator_epoch))


def control_type(key: bytes | None) -> ControlType | None:
    """The type a control record's key names; None for a type a partition log does not hold
    (or a key too short to name one), which readers skip."""
    if key is None or len(key) < _KEY.size:
        return None
    _, code = _KEY.unpack_from(key)
    try:
        return ControlType(code)
    except ValueError:
        return None


def decode_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """The end-transaction marker a control record holds; None when it is not one (an unknown
    type). ValueError when it names ABORT or COMMIT but its value is malformed."""
    kind = control_type(key)
    if kind is None:
        return None
    if value is None or len(value) < _VALUE.size:
        raise ValueError(f"a {kind.name} marker needs a value of {_VALUE.size} bytes or more")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTransactionMarker(kind, coordinator_epoch)


def marker_batch(*, commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                 timestamp_ms: int, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """One control batch ending `producer_id`'s transaction (what a leader appends for a
    WriteTxnMarkers entry)."""
    key, value = encode_marker(EndTransactionMarker(ControlType.COMMIT if commit else ControlType.ABORT,
                                                    coordinator_epoch))
    return build_batch([(key, value)], base_offset=base_offset, base_timestamp=timestamp_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE,
                       partition_leader_epoch=partition_leader_epoch, is_transactional=True, is_control=True)

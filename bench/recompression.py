"""Leader append throughput with a topic's compression.type: batches produced in one codec,
stored in another (one decompress + one compress per batch, no per-record work), beside
`producer` (stored as sent) on the same batches.

    python bench/recompression.py [--total-mib 32] [--rounds 3]

Each figure is produced MB/s (the batches' bytes as sent) through `PartitionLog.append`,
best of `--rounds`; records are ~1 KiB of JSON-like text, 16 KiB batches.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from broker.log.partition_log import PartitionLog
from common.record_batch import CompressionType
from common.records import build_batch
from common.log_config import LogConfig
from common.units import KIB, MIB

BATCH_BYTES = 16 * KIB
# (codec the producer sends, topic compression.type)
CASES = [
    (CompressionType.NONE, "producer"), (CompressionType.NONE, "lz4"),
    (CompressionType.NONE, "zstd"), (CompressionType.NONE, "snappy"), (CompressionType.NONE, "gzip"),
    (CompressionType.LZ4, "producer"), (CompressionType.LZ4, "zstd"),
    (CompressionType.ZSTD, "uncompressed"),
]


def make_batch(codec: CompressionType, rng: random.Random) -> bytes:
    records = []
    size = 0
    while size < BATCH_BYTES:
        user, item, agent = rng.randrange(10**6), rng.randrange(10**4), "Mozilla/5.0 " * 70
        value = f'{{"user": {user}, "event": "page_view", "path": "/items/{item}", "ua": "{agent}"}}'.encode()
        records.append((b"user-%06d" % rng.randrange(10**6), value))
        size += len(value) + 20
    return build_batch(records, base_timestamp=1_700_000_000_000, compression=codec)


def run(directory: Path, batch: bytes, count: int, compression_type: str) -> float:
    shutil.rmtree(directory, ignore_errors=True)
    log = PartitionLog(directory / "bench-0", LogConfig(compression_type=compression_type), now_ms=0)
    start = time.perf_counter()
    for i in range(count):
        log.append(batch, now_ms=i, leader_epoch=0)
    elapsed = time.perf_counter() - start
    log.close()
    shutil.rmtree(directory, ignore_errors=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=32, help="uncompressed bytes per case")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidelog-recompress-"))
    count = max(1, args.total_mib * MIB // BATCH_BYTES)
    print(f"{count} batches of ~{BATCH_BYTES // KIB} KiB uncompressed per case, best of {args.rounds}")
    print(f"{'produced':>10} {'stored':>12} {'batch bytes':>12} {'MB/s sent':>10} {'batches/s':>10}")
    try:
        for codec, compression_type in CASES:
            batch = make_batch(codec, random.Random(1))
            best = min(run(root / "case", batch, count, compression_type) for _ in range(args.rounds))
            print(f"{codec.name.lower():>10} {compression_type:>12} {len(batch):>12} "
                  f"{count * len(batch) / best / 1e6:>10.1f} {count / best:>10.0f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

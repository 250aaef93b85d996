"""A broker's request-handler context over a real ReplicaManager and log directory, with
nothing else wired (no groups, transactions, authorizer): what the Fetch path's unit tests
need. The logs are shut down when the `with` block ends, however it ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.handlers.context import BrokerContext
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from common.log_config import LogConfig
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from tests.log_helpers import NOW


@contextmanager
def replica_context(tmp_path: Path, image: MetadataImage, broker_id: int = 1) -> Iterator[BrokerContext]:
    """Broker `broker_id` hosting what `image` assigns it, at NOW."""
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(broker_id, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, image, broker_id), image)
    try:
        yield BrokerContext(broker_id, replicas, lambda: image, ("127.0.0.1", 9092), None, None, None, None,
                            None, None, None, None, None, None, None, None)  # type: ignore[arg-type]
    finally:
        log_manager.shutdown()

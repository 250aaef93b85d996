"""A controller's directory id (KIP-853): a Kafka Uuid made once, at the first start of its
metadata dir, and kept in that dir's `meta.properties` as Kafka keeps `directory.id`.

The voter set names each voter by (node id, directory id): a controller whose disk was
replaced comes back with a new directory id, and the quorum tells it from the voter it was
(an id reused with another directory id is refused, `quorum.voter_set`).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Final

from quorum.durable_journal import write_durably
from quorum.voter_set import ZERO_DIRECTORY_ID, VoterChangeError, check_directory_id, directory_id_from_bytes

logger = logging.getLogger(__name__)

META_FILE: Final = "meta.properties"
KEY: Final = "directory.id"


def load_or_create(data_dir: Path, *, durable: bool = True) -> str:
    """This metadata dir's directory id, made (random, durable) when it has none yet."""
    path = data_dir / META_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    if text is not None:
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == KEY:
                try:
                    return check_directory_id(value.strip(), KEY)
                except VoterChangeError as exc:
                    raise OSError(f"{path}: {exc.message}") from None
        raise OSError(f"{path} has no {KEY} line")
    directory_id = ZERO_DIRECTORY_ID
    while directory_id == ZERO_DIRECTORY_ID:  # bounded: a zero uuid4 is (practically) never drawn
        directory_id = directory_id_from_bytes(uuid.uuid4().bytes)
    data_dir.mkdir(parents=True, exist_ok=True)
    write_durably(path, f"# Written by tidelog on this metadata dir's first start.\nversion=1\n{KEY}={directory_id}\n"
                  .encode(), durable=durable, fsync=os.fsync)
    logger.info("New metadata dir %s: directory id %s", data_dir, directory_id)
    return directory_id

"""What one metadata-quorum voter is configured with (`QuorumSettings`, from the node config),
and what it reports of itself (`QuorumStatus`): the plain data around `quorum.metadata_log`'s
Raft state machine, apart from it so admin code and tests need not import pysyncobj's shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.config import log_dirs
from common.config_schema import Config, ConfigError, Password
from metadata.image import MetadataImage
from quorum.voter_set import OBSERVER_SESSION_TIMEOUT
from quorum.voters import Voter, parse_voters

METADATA_DIR_NAME: Final = "__cluster_metadata-0"  # Kafka's directory name for the metadata log
LOG_COMPACTION_MIN_ENTRIES: Final = 5000  # Raft entries between two dumps
# Records kept as records by a fold; older ones live in the snapshot. A broker whose fetch falls
# behind them is sent the whole snapshot instead (10 MiB at 100,000 partitions: decoding it and
# diffing the images cost a quarter of a broker's CPU in a controlled shutdown). That shutdown
# writes ~100,000 records in ~17 s and its brokers were ~45,000 behind the head while applying
# them, so with 20,000 kept both got the snapshot mid-shutdown (issue 35). Kafka keeps far more
# (metadata.max.retention.bytes, 100 MiB); a new broker replays the kept tail after the snapshot.
RETAINED_RECORDS: Final = 100_000
# Records after the base snapshot that start a fold without waiting for a dump (quorum.metadata_log):
# a fold encodes the whole image (~0.15-0.3 s of CPU at 100,000 partitions), so not much more often
# than a dump; but a first dump of 350,000 records unfolded was 37 MB, folded 12 MB. Twice what a
# fold keeps, so that a fold always finds a point far enough behind (fold_spacing).
FOLD_TRIGGER_RECORDS: Final = 2 * RETAINED_RECORDS


class QuorumBindError(OSError):
    """The quorum listener could not bind its address."""


@dataclass(frozen=True, slots=True)
class QuorumSettings:
    """What one voter needs: its id, every voter, its data dir and the cluster password."""

    node_id: int
    voters: Mapping[int, Voter]
    data_dir: Path
    password: Password
    compaction_min_entries: int = LOG_COMPACTION_MIN_ENTRIES
    retained_records: int = RETAINED_RECORDS
    fold_trigger_records: int = FOLD_TRIGGER_RECORDS
    fsync: bool = True  # controller.quorum.fsync (quorum.durable_journal)
    prevote: bool = True  # controller.quorum.prevote (quorum.prevote)
    # controller.quorum.listener: this controller's quorum address when it is not a static voter
    # (it starts as an observer and joins through AddRaftVoter, quorum.voter_set)
    listener: Voter | None = None
    # seconds without an answer before the leader stops replicating to an observer (Kafka's fixed
    # 300 s, quorum.voter_set.forgets_observer); not a config key: tests shorten it
    observer_session_timeout: float = OBSERVER_SESSION_TIMEOUT

    def __post_init__(self) -> None:
        if self.node_id not in self.voters and self.listener is None:
            raise ConfigError(f"node.id {self.node_id} is not one of the controller.quorum.voters "
                              f"{sorted(self.voters)}; a controller joining a running quorum sets "
                              "controller.quorum.listener to its own quorum host:port")
        if self.node_id in self.voters and self.listener is not None \
                and self.listener.address != self.voters[self.node_id].address:
            raise ConfigError(f"config 'controller.quorum.listener' {self.listener.address} differs from "
                              f"node {self.node_id}'s entry {self.voters[self.node_id].address} in "
                              "controller.quorum.voters")
        if not isinstance(self.password, Password) or not self.password.value:
            raise ConfigError("config 'controller.cluster.password' must be set: the quorum's wire "
                              "format is pickle, and the password is what keeps strangers out")

    @property
    def fold_spacing(self) -> int:
        """Records between two fold points the metadata log keeps (quorum.log_state): half the
        records a fold keeps, so that one of MAX_FOLD_POINTS is always far enough behind."""
        return max(self.retained_records // 2, 1)

    @property
    def me(self) -> Voter:
        """This controller's quorum address: its static voter entry, else its listener."""
        if self.node_id in self.voters:
            return self.voters[self.node_id]
        assert self.listener is not None, "__post_init__ requires one of the two"
        return self.listener

    @classmethod
    def from_config(cls, config: Config) -> QuorumSettings:
        """Settings from a parsed config; ConfigError when a controller key is missing or bad."""
        voters = config["controller.quorum.voters"]
        if voters is None:
            raise ConfigError("config 'controller.quorum.voters' is required for a controller")
        assert isinstance(voters, tuple), "the key table types controller.quorum.voters as LIST"
        password = config["controller.cluster.password"]
        if password is None:
            password = Password("")  # __post_init__ explains why that is refused
        node_id = config["node.id"]
        assert isinstance(node_id, int) and isinstance(password, Password)
        base = config["metadata.log.dir"] or log_dirs(config)[0]
        assert isinstance(base, str)
        fsync = config["controller.quorum.fsync"]
        prevote = config["controller.quorum.prevote"]
        assert isinstance(fsync, bool) and isinstance(prevote, bool)
        listener = config["controller.quorum.listener"]
        me = None
        if listener is not None:
            assert isinstance(listener, str)
            try:
                me = parse_voters([f"{node_id}@{listener}"])[node_id]
            except ConfigError:
                raise ConfigError(f"config 'controller.quorum.listener' must be host:port, got {listener!r}") from None
        return cls(node_id, parse_voters(voters), Path(base) / METADATA_DIR_NAME, password, fsync=fsync,
                   prevote=prevote, listener=me)


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    """One voter's view of the quorum and of the committed log, read at one moment."""

    node_id: int
    is_leader: bool
    term: int
    leader: str | None
    commit_index: int
    last_applied: int
    ready: bool
    log_start_offset: int
    last_offset: int
    dump_offset: int
    image: MetadataImage

"""Node configuration under Kafka's names, every key defined once in `BROKER_KEYS`.

Values come from a server.properties file (strings, parsed as Kafka's ConfigDef parses
them) or from code and tests (already-typed values). `parse_config` reports every problem
of a config in one `ConfigError`. The schema machinery (types, validators, `Config`) is
`common.config_schema`; `common.properties` reads the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from common.config_schema import (
    REQUIRED,
    Config,
    ConfigKey,
    ConfigType,
    CrossCheck,
    Value,
    all_of,
    at_least,
    between,
    distinct,
    matches,
    non_empty,
    one_of,
    parse_keys,
)
from common.listener_prefix import listener_keys
from common.units import GIB, INT_MAX, LONG_MAX, MIB, SECOND_MS

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# log.open.files.max's default: enough for every active segment of 10,000 partitions.
LOG_OPEN_FILES_MAX_DEFAULT: Final = 10_000
# Kafka's client port: the port of the default `listeners`, and of a local cluster's brokers.
KAFKA_PORT: Final = 9092

# Kafka's BrokerCompressionType names: a codec, or keep the producer's.
COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
KAFKA_VERSION: Final = r"[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?"  # 0.10.2, 2.8, 3.0-IV1
MS_PER_MINUTE: Final = 60 * 1000
MS_PER_HOUR: Final = 60 * MS_PER_MINUTE


_INT, _LONG, _BOOLEAN, _STRING, _LIST = (
    ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST
)

# Every key a node reads, with Kafka's name, type and default. Add new keys here, in the
# section they belong to; resolved values that depend on several keys get an accessor below.
BROKER_KEYS: Final[tuple[ConfigKey, ...]] = (
    # --- Node
    ConfigKey("node.id", _INT, REQUIRED,
              "Id of this node, unique among the brokers and controllers of the cluster.",
              at_least(0)),
    ConfigKey("process.roles", _LIST, REQUIRED,
              "What this process runs: broker, controller, or both (combined mode).",
              all_of(non_empty, one_of("broker", "controller"), distinct)),
    # --- Log storage
    ConfigKey("log.dirs", _LIST, "/tmp/kraft-combined-logs",
              "Directories holding partition data; wins over log.dir.", non_empty),
    ConfigKey("log.dir", _LIST, None,
              "Older single-directory form, read only when log.dirs is not set.", non_empty),
    # 14 bytes is Kafka's floor: the smallest (v0) record a segment must be able to hold.
    ConfigKey("log.segment.bytes", _INT, 1 * GIB,
              "Size at which the active segment is rolled.", at_least(14)),
    ConfigKey("log.roll.ms", _LONG, None,
              "Age (ms) at which the active segment is rolled; wins over log.roll.hours.",
              at_least(1)),
    ConfigKey("log.roll.hours", _INT, 168,
              "Age (hours) at which the active segment is rolled.", at_least(1)),
    ConfigKey("log.retention.ms", _LONG, None,
              "How long (ms) to keep a segment; -1 keeps forever. Wins over minutes and hours."),
    ConfigKey("log.retention.minutes", _INT, None,
              "How long (minutes) to keep a segment; wins over log.retention.hours."),
    ConfigKey("log.retention.hours", _INT, 168,
              "How long (hours) to keep a segment; -1 keeps forever."),
    ConfigKey("log.retention.bytes", _LONG, -1,
              "Largest size of a partition before old segments are deleted; -1: no limit."),
    ConfigKey("log.retention.check.interval.ms", _LONG, 300_000,
              "How often the retention task looks for segments to delete.", at_least(1)),
    ConfigKey("log.segment.delete.delay.ms", _LONG, 60_000,
              "Wait between removing a segment from the log and deleting its files.",
              at_least(0)),
    ConfigKey("log.index.interval.bytes", _INT, 4096,
              "Bytes of batches between two offset index entries.", at_least(0)),
    ConfigKey("log.index.size.max.bytes", _INT, 10 * MIB,
              "Largest size of an offset or time index file.", at_least(4)),
    # tidelog's own key (Kafka keeps every segment open and asks for a high ulimit instead)
    ConfigKey("log.open.files.max", _INT, LOG_OPEN_FILES_MAX_DEFAULT,
              "Most segment files a broker keeps open; the least recently used are closed and "
              "reopened on use. Capped at half the open-file limit (RLIMIT_NOFILE, raised to the "
              "hard limit at start), leaving the rest for sockets.", at_least(1)),
    ConfigKey("log.cleanup.policy", _LIST, "delete",
              "What happens to old segments: delete and/or compact (empty: kept forever).",
              one_of("delete", "compact")),
    # --- Log compaction (Kafka's log.cleaner.* keys and defaults)
    ConfigKey("log.cleaner.enable", _BOOLEAN, True,
              "Run the log cleaner, which compacts topics with cleanup.policy=compact."),
    ConfigKey("log.cleaner.threads", _INT, 1, "Cleaner workers (logs cleaned at once).",
              at_least(0)),
    ConfigKey("log.cleaner.dedupe.buffer.size", _LONG, 128 * MIB,
              "Memory for the key -> offset maps over all cleaner workers.", at_least(0)),
    ConfigKey("log.cleaner.io.buffer.load.factor", ConfigType.DOUBLE, 0.9,
              "How full the dedupe buffer may get.", between(0.0, 1.0)),
    ConfigKey("log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, 1.7976931348623157e308,
              "Cleaner read + write throttle (bytes per second)."),
    ConfigKey("log.cleaner.backoff.ms", _LONG, 15_000,
              "Sleep between cleaner passes that found nothing to clean.", at_least(0)),
    ConfigKey("log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, 0.5,
              "Default min.cleanable.dirty.ratio: dirty share of a log before it is cleaned.",
              between(0.0, 1.0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", _LONG, 0,
              "Default min.compaction.lag.ms: records younger than this stay uncompacted.",
              at_least(0)),
    ConfigKey("log.cleaner.max.compaction.lag.ms", _LONG, LONG_MAX,
              "Default max.compaction.lag.ms: records older than this are compacted "
              "whatever the dirty ratio.", at_least(1)),
    ConfigKey("log.cleaner.delete.retention.ms", _LONG, 86_400_000,
              "Default delete.retention.ms: how long tombstones stay after their cleaning.",
              at_least(0)),
    ConfigKey("log.message.timestamp.type", _STRING, "CreateTime",
              "Timestamp stored with a record: the producer's or the broker's append time.",
              one_of("CreateTime", "LogAppendTime")),
    ConfigKey("message.max.bytes", _INT, 1 * MIB + 12,  # + 12: the record batch log overhead
              "Largest record batch the broker accepts.", at_least(0)),
    # --- Produce-time checks and conversion: the defaults of the topic configs of the same
    # names without `log.` (common.topic_config); Kafka's keys, defaults and ranges
    ConfigKey("compression.type", _STRING, "producer",
              "Codec the leader stores produced batches in; producer keeps the producer's.",
              one_of(*COMPRESSION_TYPES)),
    ConfigKey("compression.gzip.level", _INT, -1, "gzip level of recompressed batches (-1: 6).",
              one_of(-1, *range(1, 10))),
    ConfigKey("compression.lz4.level", _INT, 9, "lz4 level of recompressed batches.", between(1, 17)),
    ConfigKey("compression.zstd.level", _INT, 3, "zstd level of recompressed batches.",
              between(-131072, 22)),
    ConfigKey("log.message.timestamp.before.max.ms", _LONG, LONG_MAX,
              "Oldest a CreateTime record may be against the broker's clock.", at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", _LONG, LONG_MAX,
              "Furthest a CreateTime record may be ahead of the broker's clock.", at_least(0)),
    ConfigKey("log.message.timestamp.difference.max.ms", _LONG, LONG_MAX,
              "Deprecated (KIP-937): both limits above, where they are unset.", at_least(0)),
    ConfigKey("log.preallocate", _BOOLEAN, False, "Preallocate segment files (a hint: ignored)."),
    ConfigKey("log.message.downconversion.enable", _BOOLEAN, True,
              "Down-convert for pre-0.11 fetches (tidelog serves record batch v2 only)."),
    ConfigKey("log.message.format.version", _STRING, "3.0-IV1",
              "Deprecated; ignored since 3.0, as in Kafka.", matches(KAFKA_VERSION, "a Kafka version")),
    ConfigKey("log.roll.jitter.ms", _LONG, None,
              "Most a segment rolls before log.roll.ms (ms); wins over log.roll.jitter.hours."),
    ConfigKey("log.roll.jitter.hours", _INT, 0, "Most a segment rolls before log.roll.hours.",
              at_least(0)),
    ConfigKey("log.local.retention.ms", _LONG, -2, "Tiered storage's local retention (-2: retention.ms).",
              at_least(-2)),
    ConfigKey("log.local.retention.bytes", _LONG, -2,
              "Tiered storage's local retention (-2: retention.bytes).", at_least(-2)),
    # --- Flushing (fsync); the defaults leave flushing to the OS, as Kafka does
    ConfigKey("log.flush.interval.messages", _LONG, LONG_MAX,
              "Messages appended to a partition before it is flushed.", at_least(1)),
    ConfigKey("log.flush.interval.ms", _LONG, None,
              "Longest a message stays unflushed; unset: log.flush.scheduler.interval.ms."),
    ConfigKey("log.flush.scheduler.interval.ms", _LONG, LONG_MAX,
              "How often the flusher checks whether a log needs flushing."),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", _INT, 60_000,
              "How often the recovery-point checkpoint is written.", at_least(0)),
    # --- Topics
    ConfigKey("num.partitions", _INT, 1, "Partitions of an auto-created topic, and of a CreateTopics "
              "num_partitions=-1 (KIP-464).", at_least(1)),
    ConfigKey("default.replication.factor", _INT, 1, "Replication factor of an auto-created topic and of "
              "a CreateTopics replication_factor=-1; capped (with a WARNING) to the live brokers.", at_least(1)),
    ConfigKey("auto.create.topics.enable", _BOOLEAN, True, "Create a topic when a client asks for metadata "
              "of an unknown one (and, from Metadata v4, allows it)."),
    ConfigKey("min.insync.replicas", _INT, 1,
              "Replicas that must be in sync for an acks=all write; topics override it.", at_least(1)),
    ConfigKey("unclean.leader.election.enable", _BOOLEAN, False,
              "Elect an out-of-sync replica rather than leave a partition offline (may lose "
              "data); topics override it. Brokers report it in DescribeConfigs; the controller's "
              "elections do not read this key yet (topic configs and cluster defaults only)."),
    # --- Replication (followers fetch from leaders with the Kafka Fetch API)
    ConfigKey("replica.lag.time.max.ms", _LONG, 30_000,
              "A follower that has not caught up with its leader for this long leaves the ISR.",
              at_least(1)),
    ConfigKey("replica.fetch.wait.max.ms", _INT, 500,
              "Longest a follower's fetch waits at the leader for new data.", at_least(0)),
    ConfigKey("replica.fetch.min.bytes", _INT, 1,
              "Bytes a follower's fetch waits for before the leader answers.", at_least(1)),
    ConfigKey("replica.fetch.max.bytes", _INT, 1 * MIB,
              "Bytes a follower fetches per partition (at least one batch, however large).",
              at_least(0)),
    ConfigKey("replica.fetch.response.max.bytes", _INT, 10 * MIB,
              "Bytes a follower fetches per request, over all its partitions.", at_least(0)),
    ConfigKey("replica.fetch.backoff.ms", _INT, 1000,
              "How long a follower waits before retrying after a fetch error.", at_least(0)),
    ConfigKey("replica.socket.timeout.ms", _INT, 30_000,
              "Timeout of a follower's requests to its leader (beyond replica.fetch.wait.max.ms).",
              at_least(1)),
    # --- Racks (KIP-36 placement, KIP-392 follower fetching): Kafka's keys; unset as in Kafka
    ConfigKey("broker.rack", _STRING, None,
              "The broker's rack, registered with the controllers: new topics' replicas are spread over "
              "racks, and consumers with the same client.rack may read from this broker as follower."),
    ConfigKey("replica.selector.class", _STRING, None,
              "KIP-392: who a consumer reads from. Unset: the leader. "
              "org.apache.kafka.common.replica.RackAwareReplicaSelector: the consumer's rack's in-sync "
              "replica (client.rack), else the leader; org.apache.kafka.common.replica.LeaderSelector: "
              "the leader.",
              one_of(None, "org.apache.kafka.common.replica.LeaderSelector",
                     "org.apache.kafka.common.replica.RackAwareReplicaSelector")),
    # --- Reassignment throttles (KIP-455 / KIP-73): Kafka's keys and defaults
    ConfigKey("leader.replication.throttled.rate", _LONG, LONG_MAX,
              "Bytes/s a leader sends to the throttled replicas its topics name "
              "(leader.replication.throttled.replicas); the default is unthrottled.", at_least(1)),
    ConfigKey("follower.replication.throttled.rate", _LONG, LONG_MAX,
              "Bytes/s a follower fetches for the throttled replicas its topics name "
              "(follower.replication.throttled.replicas); the default is unthrottled.", at_least(1)),
    ConfigKey("replication.quota.window.num", _INT, 11,
              "Samples the replication throttles measure their rate over.", at_least(2)),
    ConfigKey("replication.quota.window.size.seconds", _INT, 1,
              "Length of one replication throttle sample.", at_least(1)),
    ConfigKey("max.incremental.fetch.session.cache.slots", _INT, 1000,
              "Incremental fetch sessions (KIP-227) this broker keeps; beyond it, Kafka's eviction "
              "rules (followers' sessions first).", at_least(0)),
    # --- Group coordinator (issue 12): Kafka's keys and defaults
    ConfigKey("offsets.topic.num.partitions", _INT, 50,
              "Partitions of __consumer_offsets (fixed once the topic exists).", at_least(1)),
    ConfigKey("offsets.topic.replication.factor", _INT, 3,
              "Replication factor of __consumer_offsets; capped to the live brokers at creation, "
              "with a warning.", at_least(1)),
    ConfigKey("offsets.topic.segment.bytes", _INT, 100 * MIB,
              "Segment size of __consumer_offsets.", at_least(1)),
    ConfigKey("offsets.commit.timeout.ms", _INT, 5_000,
              "Longest an offset commit (or group metadata write) waits for the ISR.", at_least(1)),
    ConfigKey("offsets.retention.minutes", _INT, 10_080,
              "Offsets of a group that has been empty this long are removed.", at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", _LONG, 600_000,
              "How often expired offsets are looked for.", at_least(1)),
    ConfigKey("offset.metadata.max.bytes", _INT, 4096,
              "Largest metadata string of a committed offset.", at_least(0)),
    ConfigKey("group.initial.rebalance.delay.ms", _INT, 3_000,
              "How long the first rebalance of an empty group waits for more members.", at_least(0)),
    ConfigKey("group.min.session.timeout.ms", _INT, 6_000,
              "Smallest session.timeout.ms a member may ask for.", at_least(1)),
    ConfigKey("group.max.session.timeout.ms", _INT, 1_800_000,
              "Largest session.timeout.ms a member may ask for.", at_least(1)),
    ConfigKey("group.max.size", _INT, INT_MAX,
              "Most members in one group.", at_least(1)),
    # --- KIP-848 consumer groups (group.protocol=consumer): Kafka's keys and defaults; the
    # session and heartbeat interval are the broker's, checked against their min/max at start
    ConfigKey("group.consumer.session.timeout.ms", _INT, 45_000,
              "A consumer-protocol member not heartbeating this long is removed.", at_least(1)),
    ConfigKey("group.consumer.min.session.timeout.ms", _INT, 45_000,
              "Smallest group.consumer.session.timeout.ms allowed.", at_least(1)),
    ConfigKey("group.consumer.max.session.timeout.ms", _INT, 60_000,
              "Largest group.consumer.session.timeout.ms allowed.", at_least(1)),
    ConfigKey("group.consumer.heartbeat.interval.ms", _INT, 5_000,
              "How often a consumer-protocol member heartbeats (told in each answer).", at_least(1)),
    ConfigKey("group.consumer.min.heartbeat.interval.ms", _INT, 5_000,
              "Smallest group.consumer.heartbeat.interval.ms allowed.", at_least(1)),
    ConfigKey("group.consumer.max.heartbeat.interval.ms", _INT, 15_000,
              "Largest group.consumer.heartbeat.interval.ms allowed.", at_least(1)),
    ConfigKey("group.consumer.assignors", _LIST, "uniform,range",
              "Server-side assignors a consumer-protocol member may name; the first is the default.",
              one_of("uniform", "range")),
    ConfigKey("group.consumer.max.size", _INT, INT_MAX,
              "Most members in one consumer-protocol group.", at_least(1)),
    ConfigKey("group.consumer.migration.policy", _STRING, "bidirectional",
              "KIP-848's online migration: a classic group with members becomes a consumer group when a "
              "consumer-protocol member joins (upgrade), and back when the last one leaves (downgrade); "
              "bidirectional allows both, disabled neither.",
              one_of("bidirectional", "upgrade", "downgrade", "disabled")),
    # --- KIP-932 share groups (issue 31): Kafka's keys and defaults
    ConfigKey("group.share.record.lock.duration.ms", _INT, 30_000,
              "How long a share consumer holds a record it acquired before it goes back.", at_least(1_000)),
    ConfigKey("group.share.delivery.count.limit", _INT, 5,
              "Deliveries of a record to share consumers before it is archived.", between(2, 10)),
    ConfigKey("group.share.partition.max.record.locks", _INT, 2_000,
              "Most records of one share partition in flight (acquired or awaiting redelivery).",
              at_least(100)),
    ConfigKey("group.share.session.timeout.ms", _INT, 45_000,
              "A share group member not heartbeating this long is removed.", at_least(1)),
    ConfigKey("group.share.heartbeat.interval.ms", _INT, 5_000,
              "How often a share group member heartbeats (told in each answer).", at_least(1)),
    ConfigKey("group.share.max.size", _INT, 200,
              "Most members in one share group.", at_least(1)),
    ConfigKey("share.auto.offset.reset", _STRING, "latest",
              "Where a share group starts on a partition it has not read: earliest or latest. The "
              "default of each share group's own share.auto.offset.reset (a GROUP config, as Kafka's).",
              one_of("earliest", "latest")),
    # --- Transaction coordinator (issue 27): Kafka's keys and defaults
    ConfigKey("transaction.state.log.num.partitions", _INT, 50,
              "Partitions of __transaction_state (fixed once the topic exists).", at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", _INT, 3,
              "Replication factor of __transaction_state; capped to the live brokers at creation, "
              "with a warning.", at_least(1)),
    ConfigKey("transaction.state.log.min.isr", _INT, 2,
              "min.insync.replicas of __transaction_state.", at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", _INT, 100 * MIB,
              "Segment size of __transaction_state.", at_least(1)),
    ConfigKey("transaction.max.timeout.ms", _INT, 900_000,
              "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above).",
              at_least(1)),
    ConfigKey("transactional.id.expiration.ms", _INT, 604_800_000,
              "A transactional id unused this long is removed.", at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", _INT, 10_000,
              "How often transactions past their timeout are looked for (and aborted).", at_least(1)),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", _INT, 3_600_000,
              "How often expired transactional ids are looked for.", at_least(1)),
    ConfigKey("transaction.partition.verification.enable", _BOOLEAN, True,
              "KIP-890: a partition leader asks the transaction coordinator before a transactional "
              "batch starts a transaction there, and refuses it (INVALID_TXN_STATE) if the partition "
              "is not in the producer's ongoing transaction."),
    # --- Broker listener (process.roles contains broker); broker.broker_settings parses and checks them
    ConfigKey("listeners", _LIST, f"PLAINTEXT://:{KAFKA_PORT}",
              "Kafka listeners as NAME://host:port (an empty host: every address), each served; a "
              "NAME's security protocol comes from listener.security.protocol.map.",
              all_of(non_empty, distinct)),
    ConfigKey("advertised.listeners", _LIST, None,
              "Listeners registered with the controllers and given to clients, per listener name; "
              "a listener not named here is advertised as it binds.",
              all_of(non_empty, distinct)),
    # --- Listener security (issue 29): broker.broker_settings and broker.listener_security read these
    ConfigKey("listener.security.protocol.map", _LIST,
              "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
              "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), as NAME:PROTOCOL.",
              all_of(non_empty, distinct)),
    ConfigKey("inter.broker.listener.name", _STRING, None,
              "The listener followers fetch from leaders over (and brokers send each other requests "
              "on); unset: the first of listeners."),
    ConfigKey("connections.max.idle.ms", _LONG, 600_000,
              "A connection that has not authenticated this long after it opened is closed.", at_least(1)),
    ConfigKey("connections.max.reauth.ms", _LONG, 0,
              "KIP-368: SASL session lifetime a client must re-authenticate within; 0: sessions never "
              "expire.", at_least(0)),
    ConfigKey("connection.failed.authentication.delay.ms", _INT, 100,
              "Delay before a failed authentication is answered and its connection closed.", at_least(0)),
    ConfigKey("ssl.keystore.location", _STRING, None,
              "PEM file with the listener's certificate chain and private key (Kafka's PEM keystore)."),
    ConfigKey("ssl.keystore.type", _STRING, "PEM", "Keystore format; tidelog reads PEM.", one_of("PEM")),
    ConfigKey("ssl.key.password", ConfigType.PASSWORD, None, "Password of the keystore's private key, if encrypted."),
    ConfigKey("ssl.truststore.location", _STRING, None,
              "PEM file of the CA certificates client certificates are checked against "
              "(and, for the inter-broker listener, the other brokers' certificates)."),
    ConfigKey("ssl.truststore.type", _STRING, "PEM", "Truststore format; tidelog reads PEM.", one_of("PEM")),
    ConfigKey("ssl.client.auth", _STRING, "none",
              "Client certificates: none, requested (checked when sent) or required.",
              one_of("none", "requested", "required")),
    ConfigKey("ssl.principal.mapping.rules", _STRING, "DEFAULT",
              "Rules mapping a client certificate's distinguished name to its principal's name, "
              "first match wins: RULE:<regex>/<replacement>/[L|U] or DEFAULT (the name as it is), "
              "comma-separated (Kafka's SslPrincipalMapper); no match refuses the connection."),
    ConfigKey("socket.request.max.bytes", _INT, 100 * MIB,
              "Largest request frame accepted; a larger size prefix closes the connection.", at_least(1)),
    ConfigKey("metrics.listener", _STRING, None,
              "host:port of this broker's HTTP GET /metrics (Prometheus text); unset: no metrics "
              "endpoint. tidelog's own key (Kafka exports metrics over JMX)."),
    # --- SASL, Kafka's keys and defaults. A SASL listener reads sasl.enabled.mechanisms (PLAIN,
    # SCRAM-SHA-256, SCRAM-SHA-512) and sasl.jaas.config (PLAIN's user_<name>="<password>" options
    # and the broker's own username/password); the Kerberos and login keys are here because a Kafka
    # broker describes them and takes a per-broker change of them (DynamicListenerConfig), and
    # admin clients rely on it (librdkafka's 0081-admin); nothing reads them.
    ConfigKey("sasl.enabled.mechanisms", _LIST, "GSSAPI", "SASL mechanisms a SASL listener enables."),
    ConfigKey("sasl.mechanism.inter.broker.protocol", _STRING, "GSSAPI",
              "SASL mechanism brokers use with each other."),
    ConfigKey("sasl.jaas.config", ConfigType.PASSWORD, None,
              "JAAS login context parameters: PlainLoginModule's or ScramLoginModule's username and "
              "password (the broker's own, on the inter-broker listener) and PLAIN's user_<name>=\"<password>\" "
              "entries (the PLAIN users a SASL listener accepts)."),
    ConfigKey("sasl.kerberos.service.name", _STRING, None, "Kerberos principal name Kafka runs as."),
    ConfigKey("sasl.kerberos.kinit.cmd", _STRING, "/usr/bin/kinit", "Kerberos kinit command path."),
    ConfigKey("sasl.kerberos.ticket.renew.window.factor", ConfigType.DOUBLE, 0.8,
              "Share of a ticket's lifetime after which the login thread renews it."),
    ConfigKey("sasl.kerberos.ticket.renew.jitter", ConfigType.DOUBLE, 0.05,
              "Random jitter added to the renewal time."),
    ConfigKey("sasl.kerberos.min.time.before.relogin", _LONG, 60_000,
              "Login thread sleep between refresh attempts, in ms."),
    ConfigKey("sasl.kerberos.principal.to.local.rules", _LIST, "DEFAULT",
              "Rules mapping principal names to short names."),
    ConfigKey("sasl.login.refresh.window.factor", ConfigType.DOUBLE, 0.8,
              "Share of a credential's lifetime after which the login thread refreshes it.",
              between(0.5, 1.0)),
    ConfigKey("sasl.login.refresh.window.jitter", ConfigType.DOUBLE, 0.05,
              "Random jitter added to the refresh time.", between(0.0, 0.25)),
    # --- Authorization (issue 29): Kafka's StandardAuthorizer (security.authorizer reads these)
    ConfigKey("authorizer.class.name", _STRING, "",
              "Empty: no authorizer (every request allowed, the ACL APIs answer SECURITY_DISABLED). "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or standard): ACLs from the metadata "
              "log are enforced on every request.",
              one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "StandardAuthorizer",
                     "standard")),
    ConfigKey("super.users", _STRING, "",
              "Principals allowed everything whatever the ACLs, separated by ';' (User:admin;User:ops).",
              matches(r"(?:\s*[^;:\s][^;:]*:[^;]*|\s*)(?:;(?:\s*[^;:\s][^;:]*:[^;]*|\s*))*",
                      "principals Type:name separated by ';'")),
    ConfigKey("allow.everyone.if.no.acl.found", _BOOLEAN, False,
              "With an authorizer: whether a resource no ACL names is open to everyone (Kafka's default: no)."),
    # --- Controller quorum (process.roles contains controller); quorum.voters parses the voters
    ConfigKey("controller.quorum.voters", _LIST, None,
              "Voters of the metadata quorum as id@host:port, e.g. 1@127.0.0.1:9093,2@127.0.0.2:9093.",
              all_of(non_empty, distinct)),
    ConfigKey("controller.quorum.listener", _STRING, None,
              "host:port of this controller's quorum listener when its node.id is not among "
              "controller.quorum.voters: it starts as an observer of the quorum and becomes a voter "
              "once added (KIP-853, `tidelog quorum add-controller`). tidelog's own key."),
    ConfigKey("controller.cluster.password", ConfigType.PASSWORD, None,
              "Shared secret of the controller quorum: it encrypts and authenticates every quorum "
              "message (pysyncobj's wire format is pickle, so a controller refuses to start without it)."),
    ConfigKey("metadata.log.dir", _STRING, None,
              "Directory of the metadata log (journal and dump); unset: the first of log.dirs."),
    ConfigKey("controller.quorum.fsync", _BOOLEAN, True,
              "fsync the metadata journal before a controller acknowledges or commits an entry, and "
              "the term/vote before it votes (as KRaft does); false: a power loss may lose "
              "acknowledged metadata or a cast vote. tidelog's own key."),
    ConfigKey("controller.quorum.prevote", _BOOLEAN, True,
              "Pre-vote and leader stickiness (Raft thesis 9.6, KIP-996): a controller asks whether it "
              "would win before it starts an election, and one that hears from a live leader ignores "
              "higher-term vote requests. false only to show what it prevents. tidelog's own key."),
    # --- Controller HTTP API and broker liveness (quorum.controller_server parses and checks them)
    # tidelog's controllers speak HTTP (admin JSON API, broker RPCs with msgpack bodies), not
    # the Kafka protocol Kafka's controllers speak on controller.listener.names, so the three
    # address keys below are tidelog's own; Kafka has none of them.
    ConfigKey("controller.listener", _STRING, None,
              "host:port of this controller's HTTP API (admin API under /v1, broker RPCs under /rpc). "
              "tidelog's own key; `tidelog controller` requires it."),
    ConfigKey("controller.api.voters", _LIST, None,
              "HTTP API addresses of every controller as id@host:port, used to forward admin writes "
              "to the active controller; unset: each voter's host with this node's "
              "controller.listener port. tidelog's own key.",
              all_of(non_empty, distinct)),
    ConfigKey("console.broker.metrics.port", _INT, 0,
              "Port of the brokers' metrics.listener (each broker's own host), which the web console "
              "at /console/ reads bytes in/out per second from; 0: rates not shown. `tidelog up` sets "
              "it. tidelog's own key.", between(0, 65535)),
    ConfigKey("console.chaos.reports.dir", _STRING, None,
              "Directory of `tidelog chaos run` reports the web console's Chaos page lists and opens "
              "(a relative path is the controller's working directory's); unset: no Chaos list. "
              "`tidelog up` sets it to chaos-reports in the directory it ran from. tidelog's own key."),
    ConfigKey("admin.token", ConfigType.PASSWORD, None,
              "Bearer token every admin API write (POST, PATCH, DELETE) must carry when set; "
              "reads stay open on loopback. Required when controller.listener binds beyond loopback, "
              "and then reads need it too. tidelog's own key."),
    ConfigKey("controller.rpc.secret.file", _STRING, None,
              "File holding the cluster's broker<->controller RPC secret (64 hex characters) on a "
              "controller or combined node, and on a broker only that broker's key derived from it: "
              "brokers sign every /rpc request with their key and controllers refuse one without a "
              "valid proof (401) or speaking for another broker (403). A controller generates the "
              "secret (mode 0600) when the file is missing; a broker refuses to start then. Unset: "
              "RPCs are not authenticated. `tidelog up` sets it. tidelog's own key (security.rpc_auth)."),
    ConfigKey("cluster.id", _STRING, None,
              "Cluster id reported by the API and checked at broker registration (Kafka keeps it in "
              "meta.properties); unset: derived from controller.quorum.voters."),
    ConfigKey("broker.session.timeout.ms", _INT, 9 * SECOND_MS,
              "A broker that has not heartbeated for this long is fenced by the active controller.",
              at_least(1)),
    ConfigKey("broker.heartbeat.interval.ms", _INT, 2 * SECOND_MS,
              "How often brokers heartbeat; the controller checks for expired sessions twice as often.",
              at_least(1)),
    ConfigKey("auto.leader.rebalance.enable", _BOOLEAN, True,
              "The active controller moves leadership back to each partition's preferred replica "
              "(the first in its replica list) when it is in the ISR and active."),
    ConfigKey("leader.imbalance.check.interval.seconds", _LONG, 300,
              "How often the active controller looks for partitions not led by their preferred "
              "replica.", at_least(1)),
    ConfigKey("controlled.shutdown.timeout.ms", _INT, 30 * SECOND_MS,
              "How long a broker stopping on SIGTERM waits for the controller to move its leaders "
              "away (controlled shutdown) before it stops anyway and says so. tidelog's own key "
              "(Kafka's KRaft brokers wait without a bound).",
              at_least(1)),
)


_DEFAULTS: Final[dict[str, object]] = {key.name: key.default for key in BROKER_KEYS}


def default_int(name: str) -> int:
    """The key table's default of INT/LONG key `name`: code that needs a config's default reads
    it here rather than restating it (tests/unit/test_limits.py checks)."""
    value = _DEFAULTS[name]
    assert isinstance(value, int) and not isinstance(value, bool), f"{name} has no INT/LONG default"
    return value


# --- Resolved values: Kafka's precedence between keys that say the same thing.


def _int(value: Value) -> int:
    assert isinstance(value, int), "the key table types these keys as INT or LONG"
    return value


def _retention_source(config: Config) -> tuple[str, int]:
    """The key deciding retention time (Kafka: ms > minutes > hours) and its value in ms."""
    if config["log.retention.ms"] is not None:
        return "log.retention.ms", _int(config["log.retention.ms"])
    if config["log.retention.minutes"] is not None:
        return "log.retention.minutes", _int(config["log.retention.minutes"]) * MS_PER_MINUTE
    return "log.retention.hours", _int(config["log.retention.hours"]) * MS_PER_HOUR


def retention_ms(config: Config) -> int:
    """Retention time in ms (ms > minutes > hours); -1 means keep forever."""
    return max(_retention_source(config)[1], -1)  # Kafka: any negative means unlimited


def roll_ms(config: Config) -> int:
    """Segment roll age in ms: log.roll.ms when set, else log.roll.hours."""
    if config["log.roll.ms"] is not None:
        return _int(config["log.roll.ms"])
    return _int(config["log.roll.hours"]) * MS_PER_HOUR


def flush_interval_ms(config: Config) -> int:
    """Flush interval in ms: log.flush.interval.ms, else log.flush.scheduler.interval.ms."""
    if config["log.flush.interval.ms"] is not None:
        return _int(config["log.flush.interval.ms"])
    return _int(config["log.flush.scheduler.interval.ms"])


def log_dirs(config: Config) -> list[str]:
    """Data directories: log.dirs when set, else log.dir when set, else log.dirs' default."""
    use_log_dir = "log.dirs" not in config.originals and "log.dir" in config.originals
    dirs = config["log.dir" if use_log_dir else "log.dirs"]
    assert isinstance(dirs, tuple), "the key table types log.dir and log.dirs as LIST"
    return list(dirs)


def _retention_not_zero(config: Config) -> str | None:
    # Kafka refuses a resolved retention of 0 ("unlimited (-1) or at least 1"); only the
    # key that wins matters, so log.retention.hours=0 is fine when log.retention.ms is set.
    name, millis = _retention_source(config)
    return f"config {name!r} must be -1 (unlimited) or positive, got 0" if millis == 0 else None


def _fetch_wait_within(limit: str, why: str) -> Callable[[Config], str | None]:
    # KafkaConfig.validateValues requires replica.fetch.wait.max.ms <= each of these: a
    # follower's fetch parked at its leader for the whole wait must neither time out its own
    # request nor read as lagging when it returns (the leader records a fetch once, on arrival).
    def rule(config: Config) -> str | None:
        wait, bound = config.get_int("replica.fetch.wait.max.ms"), config.get_int(limit)
        if wait <= bound:
            return None
        return f"config 'replica.fetch.wait.max.ms' ({wait}) must not exceed {limit!r} ({bound}) {why}"
    return rule


BROKER_CHECKS: Final[tuple[CrossCheck, ...]] = (
    CrossCheck(frozenset({"log.retention.ms", "log.retention.minutes", "log.retention.hours"}),
               _retention_not_zero),
    CrossCheck(frozenset({"replica.fetch.wait.max.ms", "replica.socket.timeout.ms"}),
               _fetch_wait_within("replica.socket.timeout.ms", "to prevent unnecessary socket timeouts")),
    CrossCheck(frozenset({"replica.fetch.wait.max.ms", "replica.lag.time.max.ms"}),
               _fetch_wait_within("replica.lag.time.max.ms", "to prevent frequent changes in ISR")),
)


def parse_config(raw: Mapping[str, object], keys: Iterable[ConfigKey] = BROKER_KEYS,
                 checks: Iterable[CrossCheck] = BROKER_CHECKS) -> Config:
    """Parse and validate a node config (by default BROKER_KEYS with their cross-key checks);
    one ConfigError lists every unknown, ill-typed, out-of-range or missing key. Kafka's
    listener-prefixed overrides (common.listener_prefix) are typed as the keys they override."""
    keys = tuple(keys)
    return parse_keys(raw, (*keys, *listener_keys(raw, keys)), checks)

"""`tidelog spark ingest`: the Spark job of spark/ingest_job.py, finding its cluster as every
other tidelog command does.

    tidelog spark ingest --topic orders --to /lake/orders              # ./tidelog-data/cluster.json
    tidelog spark ingest --topic orders --to /lake/orders --data-dir /srv/tidelog-data
    tidelog spark ingest --topic orders --to /lake/orders --bootstrap-server 127.0.0.4:9092

The spark extra (PySpark, PyArrow, confluent-kafka) is checked before anything starts; the
brokers come from --bootstrap-server, else from --data-dir's cluster.json (exit 2 when
neither names one). The `spark` package imports only `common`, so this front lives here.
"""

from __future__ import annotations

import argparse

from common.extras import needs_extra
from spark import ingest_job
from tidelog.cli_common import add_cluster_options, format_bootstrap_servers, guarded, resolve

COMMAND = "tidelog spark ingest"


def ingest_bootstrap_servers(args: argparse.Namespace) -> str:
    """The ingest's kafka.bootstrap.servers: --bootstrap-server, else --data-dir's cluster.json
    (UsageError naming both when neither has a broker)."""
    found = resolve(argparse.Namespace(data_dir=args.data_dir, bootstrap_server=args.bootstrap_servers),
                    need_kafka=True)
    return format_bootstrap_servers(found.bootstrap_servers)


def add_ingest_arguments(parser: argparse.ArgumentParser) -> None:
    ingest_job.add_arguments(parser)  # --bootstrap-server is the job's own option
    add_cluster_options(parser, admin=False, kafka=False)  # --data-dir


def _run_ingest(args: argparse.Namespace) -> int:
    args.bootstrap_servers = ingest_bootstrap_servers(args)
    return ingest_job.run(args)


run_ingest = needs_extra(COMMAND, "spark", guarded("spark ingest", _run_ingest))

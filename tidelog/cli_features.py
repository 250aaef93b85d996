"""`tidelog features describe|upgrade|downgrade|disable`: kafka-features.sh over the admin API
(`GET`/`POST /v1/features`, KIP-584's UpdateFeatures; issue 28).

    tidelog features describe
    tidelog features upgrade --feature eligible.leader.replicas.version=1 [--dry-run]
    tidelog features upgrade --release-version 4.1 [--dry-run]
    tidelog features downgrade --feature transaction.version=0 [--unsafe] [--dry-run]
    tidelog features disable --feature eligible.leader.replicas.version [--unsafe] [--dry-run]

The lines are Kafka's FeatureCommand's: describe prints one "Feature: F\tSupportedMinVersion: A\t
SupportedMaxVersion: B\tFinalizedVersionLevel: L\tEpoch: E" line per supported feature ("-" when
not finalized); a change prints "F was upgraded to L." (with --dry-run "F can be upgraded to L."),
or for every feature of a refused request "Could not upgrade F to L. <why>", and exits 1.
--release-version sets what Kafka's release of that name finalizes by default, of the features
tidelog implements (`RELEASE_LEVELS`); metadata.version's levels are tidelog's own, not a Kafka
release's, so it stays: `upgrade --feature metadata.version=2` once every node runs a build that
supports 2 (PartitionChange written short; a downgrade from it is refused).
All updates go in one request, so a refusal changes nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from tidelog import cli_common
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError, UsageError

# Feature names as common.protocol.api_versions has them (not imported: every CLI command builds
# this parser, and that module loads kio's messages).
TRANSACTION_VERSION_FEATURE: Final = "transaction.version"
ELR_VERSION: Final = "eligible.leader.replicas.version"
# Kafka's defaults per release (MetadataVersion's feature defaults) for tidelog's features:
# transaction.version 2 from 4.0 (KIP-890), eligible.leader.replicas.version 1 from 4.1 (KIP-966).
RELEASE_LEVELS: Final = MappingProxyType({
    "3.9": MappingProxyType({TRANSACTION_VERSION_FEATURE: 0, ELR_VERSION: 0}),
    "4.0": MappingProxyType({TRANSACTION_VERSION_FEATURE: 2, ELR_VERSION: 0}),
    "4.1": MappingProxyType({TRANSACTION_VERSION_FEATURE: 2, ELR_VERSION: 1}),
})
# (the verb in Kafka's lines, the admin API's upgrade_type)
_VERBS: Final = {"upgrade": ("upgrade", "upgraded"), "downgrade": ("downgrade", "downgraded"),
                 "disable": ("disable", "disabled")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="supported and finalized feature levels (kafka-features describe)")
    cli_common.add_cluster_options(describe, kafka=False)
    describe.set_defaults(run=cli_common.guarded("features describe", run_describe))
    for action, help_text in (("upgrade", "raise feature levels"), ("downgrade", "lower feature levels"),
                              ("disable", "remove features (level 0)")):
        p = actions.add_parser(action, help=f"{help_text} (kafka-features {action})")
        cli_common.add_cluster_options(p, kafka=False)
        p.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL" if action != "disable"
                       else "NAME", help="a feature and its new level (repeatable)" if action != "disable"
                       else "a feature to disable (repeatable)")
        if action != "disable":
            p.add_argument("--release-version", metavar="VERSION",
                           help=f"the levels Kafka's release finalizes by default ({', '.join(RELEASE_LEVELS)})")
        if action != "upgrade":
            p.add_argument("--unsafe", action="store_true", help="allow a lossy (unsafe) downgrade")
        p.add_argument("--dry-run", action="store_true", help="validate only; change nothing")
        p.set_defaults(run=cli_common.guarded(f"features {action}", run_update), features_action=action)


# --- pure: options and answers to lines --------------------------------------------------------


def describe_lines(answer: Mapping[str, Any]) -> list[str]:
    """FeatureCommand.handleDescribe's lines."""
    epoch = answer.get("epoch")
    lines = []
    for f in answer.get("features", ()):
        level = f.get("finalized_version_level", 0)
        lines.append(f"Feature: {f['feature']}\tSupportedMinVersion: {f['supported_min_version']}\t"
                     f"SupportedMaxVersion: {f['supported_max_version']}\t"
                     f"FinalizedVersionLevel: {level if level else '-'}\t"
                     f"Epoch: {epoch if level and epoch is not None and epoch >= 0 else '-'}")
    return lines


def parse_updates(action: str, features: Sequence[str], release_version: str | None) -> dict[str, int]:
    """The levels asked for: --feature NAME=LEVEL (NAME for disable) or --release-version, not both."""
    if bool(features) == bool(release_version):
        raise UsageError("give --feature or --release-version" if action != "disable" else "give --feature")
    if release_version:
        levels = RELEASE_LEVELS.get(release_version)
        if levels is None:
            raise UsageError(f"--release-version {release_version!r}: tidelog knows {', '.join(RELEASE_LEVELS)}")
        return dict(levels)
    out: dict[str, int] = {}
    for item in features:
        if action == "disable":
            name, level_text = item, "0"
        else:
            name, sep, level_text = item.partition("=")
            if not sep:
                raise UsageError(f"--feature {item!r}: expected NAME=LEVEL")
        name = name.strip()
        if not name or not level_text.strip().isdigit():
            raise UsageError(f"--feature {item!r}: expected a name and a non-negative level")
        if name in out:
            raise UsageError(f"--feature {name} given twice")
        out[name] = int(level_text)
    return out


def upgrade_type(action: str, unsafe: bool) -> str:
    if action == "upgrade":
        return "upgrade"
    return "unsafe_downgrade" if unsafe else "safe_downgrade"


def result_lines(action: str, levels: Mapping[str, int], *, dry_run: bool, error: str | None) -> list[str]:
    """FeatureCommand's per-feature lines: done, would be done, or why not."""
    verb, done = _VERBS[action]
    lines = []
    for name, level in levels.items():
        target = "" if action == "disable" else f" to {level}"
        if error is not None:
            lines.append(f"Could not {verb} {name}{target}. {error}")
        elif dry_run:
            lines.append(f"{name} can be {done}{target}.")
        else:
            lines.append(f"{name} was {done}{target}.")
    return lines


# --- the commands ------------------------------------------------------------------------------


def run_describe(args: argparse.Namespace) -> int:
    client = AdminClient.of(cli_common.resolve(args, need_admin=True), token=args.admin_token)
    answer = client.request("GET", "/v1/features")
    if not isinstance(answer, Mapping):
        raise ClusterError("UNKNOWN_SERVER_ERROR", "GET /v1/features did not answer an object")
    cli_common.say_lines(describe_lines(answer))
    return int(cli_common.ExitCode.OK)


def run_update(args: argparse.Namespace) -> int:
    action = args.features_action
    levels = parse_updates(action, args.feature, getattr(args, "release_version", None))
    kind = upgrade_type(action, getattr(args, "unsafe", False))
    client = AdminClient.of(cli_common.resolve(args, need_admin=True), token=args.admin_token)
    body = {"updates": [{"feature": n, "max_version_level": v, "upgrade_type": kind} for n, v in levels.items()],
            "validate_only": bool(args.dry_run)}
    try:
        client.request("POST", "/v1/features", body)
    except ClusterError as exc:
        if exc.error in ("INVALID_UPDATE_VERSION", "INVALID_REQUEST", "FEATURE_UPDATE_FAILED"):
            cli_common.say_lines(result_lines(action, levels, dry_run=args.dry_run, error=exc.message))
            print(f"{len(levels)} out of {len(levels)} operation(s) failed.")
            return int(cli_common.ExitCode.ERROR)
        raise
    cli_common.say_lines(result_lines(action, levels, dry_run=args.dry_run, error=None))
    return int(cli_common.ExitCode.OK)

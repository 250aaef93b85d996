"""localcluster.hosted: a data dir's cluster attached whatever its hosts, and a kind of hosts no
package registered refused with its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localcluster import hosted
from localcluster.cluster_layout import LayoutError


def test_no_cluster_file_is_no_cluster(tmp_path: Path) -> None:
    assert hosted.hosts_kind(tmp_path) is None
    assert hosted.attach_any(tmp_path) is None


def test_a_kind_nobody_registered_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [], "hosts": {"kind": "vms"}}))
    assert hosted.hosts_kind(tmp_path) == "vms"
    with pytest.raises(LayoutError, match="'vms' hosts"):
        hosted.attach_any(tmp_path)


def test_a_registered_kind_is_attached_by_its_package(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [], "hosts": {"kind": "test-kind"}}))
    seen: list[Path] = []
    hosted.register("test-kind", lambda root: seen.append(root))  # type: ignore[func-returns-value]
    assert hosted.attach_any(tmp_path) is None and seen == [tmp_path]


def test_tidelog_hosts_registers_netns() -> None:
    import tidelog.hosts.cluster as netns_cluster

    assert hosted._ATTACH["netns"] == netns_cluster.NetnsCluster.attach


class _Hosted:
    admin_token = "secret-token"


@pytest.mark.parametrize(("host", "source"), [("127.0.0.3", ("127.0.0.250", 0)), ("198.18.0.10", None)])
def test_the_harness_leaves_from_its_loopback_address_only_on_loopback(host: str, source: object) -> None:
    from chaos.engine.targets import HARNESS_ADDRESS, harness_source

    assert HARNESS_ADDRESS == "127.0.0.250"
    assert harness_source(host) == source


def test_the_harness_sends_a_namespaced_clusters_admin_token() -> None:
    from chaos.engine.targets import admin_headers

    assert admin_headers(_Hosted()) == {"Authorization": "Bearer secret-token"}  # type: ignore[arg-type]
    assert admin_headers(object()) == {}  # type: ignore[arg-type]  # a loopback cluster has none

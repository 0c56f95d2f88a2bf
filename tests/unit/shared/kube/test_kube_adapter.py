"""shared/kube/client.py's configuration, with no API server: in a cluster only with the service
host and a token, and a clear error without any configuration. Against a small API server:
tests/integration/test_kube_adapter.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from heddle.shared.kube import client as kube


def test_in_cluster_needs_the_service_host_and_a_token() -> None:
    assert not kube.in_cluster({})
    # The host alone is not enough: this machine mounts no service-account token.
    assert (
        kube.in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
        == (kube.SERVICE_ACCOUNT_DIR / "token").exists()
    )


def test_no_configuration_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(kube.KubeError, match="no Kubernetes configuration"):
        kube.connect(str(tmp_path / "missing"))

"""shared/kube/client.py with the real kubernetes client against a small API server on 127.0.0.1
(tests/support/fake_kube.py): the list, the watch's events in order, bookmarks, a watch the
server ends, an expired resource version (410), an API that is down or refuses the token, the
node lookup, and a prompt stop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from heddle.shared.kube import client as kube

from tests.support import fake_kube as fk
from tests.support.loop_pause import longest_pause


@pytest.fixture
async def api() -> AsyncIterator[fk.FakeKube]:
    server = await fk.FakeKube().start()
    yield server
    await server.stop()


async def source_for(
    api: fk.FakeKube, tmp_path: Path, **options: float
) -> tuple[kube.PodSource, str]:
    client, namespace = kube.connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
    source = kube.PodSource(
        client, namespace, fk.SELECTOR, backoff=(0.05, 0.2), request_timeout=2.0, **options
    )
    source.start()
    return source, namespace


async def next_of(source: kube.PodSource, kind: type, timeout: float = 5.0) -> kube.Item:
    """The next item of ``kind``, skipping others (Broken repeats while the API is down)."""
    deadline = time.monotonic() + timeout
    while True:
        item = await asyncio.wait_for(source.next(), max(deadline - time.monotonic(), 0.01))
        if isinstance(item, kind):
            return item


async def watching(api: fk.FakeKube, count: int = 1) -> None:
    for _ in range(200):
        if api.watch_count() >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the adapter never opened a watch")


async def test_list_then_watch_events_in_order(api: fk.FakeKube, tmp_path: Path) -> None:
    api.add(fk.runner_pod("runner-0"))
    other = fk.runner_pod("not-ours")
    other["metadata"]["labels"]["app.kubernetes.io/component"] = "gateway"
    api.add(other)
    source, namespace = await source_for(api, tmp_path)
    try:
        assert namespace == fk.NAMESPACE  # the kubeconfig context's
        listed = await next_of(source, kube.Listed)
        assert [p["metadata"]["name"] for p in listed.pods] == ["runner-0-0"]
        assert listed.resource_version == str(api.version)
        await watching(api)
        api.add(fk.runner_pod("runner-1"))
        api.modify("runner-0-0", fk.oom_killed_and_restarted)
        api.modify("not-ours-0", lambda p: None)  # filtered by the selector
        api.delete("runner-1-0")
        got = [await next_of(source, kube.Changed) for _ in range(3)]
        assert [(c.kind, c.pod["metadata"]["name"]) for c in got] == [
            ("ADDED", "runner-1-0"),
            ("MODIFIED", "runner-0-0"),
            ("DELETED", "runner-1-0"),
        ]
        # The pod as the API sent it: a plain dict, the OOM kill in its last state.
        last = got[1].pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
        assert (last["reason"], last["exitCode"]) == ("OOMKilled", 137)
        # Every request carried the kubeconfig's token; the watch asked with the selector,
        # from the list's version, with bookmarks.
        assert api.unauthorized == 0
        watch = next(q for path, q in api.requests if q.get("watch") == "true")
        assert watch["labelSelector"] == fk.SELECTOR
        assert watch["resourceVersion"] == listed.resource_version
        assert watch["allowWatchBookmarks"] == "true"
    finally:
        await source.stop()


async def test_a_watch_the_server_ends_goes_on_from_the_last_version(
    api: fk.FakeKube, tmp_path: Path
) -> None:
    api.add(fk.runner_pod("runner-0"))
    source, _ = await source_for(api, tmp_path)
    try:
        await next_of(source, kube.Listed)
        await watching(api)
        api.modify("runner-0-0", lambda p: fk.set_ready(p, False))
        await next_of(source, kube.Changed)
        api.bookmark()
        await asyncio.sleep(0.2)
        bookmark = api.version
        api.close_watches()  # the server's timeoutSeconds
        await watching(api)
        api.modify("runner-0-0", lambda p: fk.set_ready(p, True))
        changed = await next_of(source, kube.Changed)
        assert changed.pod["status"]["containerStatuses"][0]["ready"] is True
        watches = [q for _, q in api.requests if q.get("watch") == "true"]
        assert len(watches) == 2
        # The second watch starts from the bookmark, and no list came between.
        assert watches[1]["resourceVersion"] == str(bookmark)
        assert sum(1 for _, q in api.requests if "watch" not in q) == 1
    finally:
        await source.stop()


async def test_an_expired_version_lists_again(api: fk.FakeKube, tmp_path: Path) -> None:
    api.add(fk.runner_pod("runner-0"))
    source, _ = await source_for(api, tmp_path)
    try:
        await next_of(source, kube.Listed)
        await watching(api)
        api.add(fk.runner_pod("runner-1"))
        await next_of(source, kube.Changed)
        # Compaction: every version so far is gone; the next watch gets the API's 410 ERROR.
        api.expired_before = api.version + 1
        api.close_watches()
        listed = await next_of(source, kube.Listed)
        assert sorted(p["metadata"]["name"] for p in listed.pods) == ["runner-0-0", "runner-1-0"]
        api.expired_before = 0
        await watching(api)
        api.delete("runner-1-0")
        assert (await next_of(source, kube.Changed)).kind == "DELETED"
    finally:
        await source.stop()


async def test_an_api_that_is_down_is_reported_and_tried_again(
    api: fk.FakeKube, tmp_path: Path
) -> None:
    api.down = True
    api.add(fk.runner_pod("runner-0"))
    source, _ = await source_for(api, tmp_path)
    try:
        broken = await next_of(source, kube.Broken)
        assert "503" in broken.error
        api.down = False
        listed = await next_of(source, kube.Listed)
        assert len(listed.pods) == 1
    finally:
        await source.stop()


async def test_a_refused_token_is_reported(api: fk.FakeKube, tmp_path: Path) -> None:
    path = api.kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace(fk.TOKEN, "wrong"))
    client, namespace = kube.connect(str(path))
    source = kube.PodSource(client, namespace, fk.SELECTOR, backoff=(0.05, 0.2))
    source.start()
    try:
        broken = await next_of(source, kube.Broken)
        assert "401" in broken.error
        assert api.unauthorized >= 1
    finally:
        await source.stop()


async def test_nothing_listening_is_reported(tmp_path: Path) -> None:
    server = await fk.FakeKube().start()
    path = server.kubeconfig(tmp_path / "kubeconfig")
    await server.stop()  # its port is closed now
    client, namespace = kube.connect(str(path))
    source = kube.PodSource(client, namespace, fk.SELECTOR, backoff=(0.05, 0.2))
    source.start()
    try:
        broken = await next_of(source, kube.Broken)
        assert broken.error
    finally:
        await source.stop()


async def test_a_node_is_read(api: fk.FakeKube, tmp_path: Path) -> None:
    api.nodes["node-a"] = fk.node("node-a", ready=False)
    source, _ = await source_for(api, tmp_path)
    try:
        got = await source.node("node-a")
        (ready,) = [c for c in got["status"]["conditions"] if c["type"] == "Ready"]
        assert ready["status"] == "Unknown"
        with pytest.raises(kube.KubeError, match="404"):
            await source.node("node-b")
    finally:
        await source.stop()


async def test_stop_ends_a_watch_blocked_in_a_read(api: fk.FakeKube, tmp_path: Path) -> None:
    source, _ = await source_for(api, tmp_path, watch_timeout=300.0)
    await next_of(source, kube.Listed)
    await watching(api)
    started = time.monotonic()
    await source.stop()
    # Not the watch's 300 s: the socket is shut under the blocked read (a busy machine may
    # take a moment to schedule the thread).
    assert time.monotonic() - started < 5
    # The watch's thread ended with it (it is the only one of that name).
    assert not [t for t in threading.enumerate() if t.name == "kube-pods" and t.is_alive()]


async def test_a_statefulsets_scale_is_read_and_patched(api: fk.FakeKube, tmp_path: Path) -> None:
    api.statefulsets = {"runner-0": 1, "runner-1": 0}
    seen: list[tuple[str, int, int]] = []

    async def controller(name: str, was: int, now: int) -> None:
        seen.append((name, was, now))

    api.on_scale = controller
    client, namespace = kube.connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
    scales = kube.Scales(client, namespace, request_timeout=2.0)
    assert await scales.get("runner-0") == 1
    assert await scales.get("runner-1") == 0
    assert await scales.set("runner-1", 1) == 1
    assert await scales.set("runner-0", 0) == 0
    assert api.statefulsets == {"runner-0": 0, "runner-1": 1}
    assert seen == [("runner-1", 0, 1), ("runner-0", 1, 0)]
    # The scale subresource, with the kubeconfig's token, as a merge patch.
    paths = [p for p, _ in api.requests]
    assert paths[-1] == f"/apis/apps/v1/namespaces/{fk.NAMESPACE}/statefulsets/runner-0/scale"
    assert api.unauthorized == 0
    with pytest.raises(kube.KubeError, match="404"):
        await scales.get("runner-9")
    api.down = True
    with pytest.raises(kube.KubeError, match="scaling statefulset runner-1 to 0: HTTP 503"):
        await scales.set("runner-1", 0)
    assert api.statefulsets["runner-1"] == 1


async def test_the_api_is_opened_while_the_loop_goes_on(api: fk.FakeKube, tmp_path: Path) -> None:
    # A credential plugin that takes 2 s (or the client's import on a busy machine) holds up
    # the configuration's load, not the caller's event loop.
    api.statefulsets = {"runner-0": 1}
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig", credential_delay=2.0)
    began = time.monotonic()
    (client, namespace), pause = await longest_pause(kube.open_api(str(kubeconfig)))
    assert time.monotonic() - began >= 2.0  # the plugin ran
    assert pause < 1.0, f"the loop stood still for {pause:.2f} s"
    # The plugin's token is the one the API takes.
    assert await kube.Scales(client, namespace, request_timeout=2.0).get("runner-0") == 1
    assert api.unauthorized == 0

"""The container tests' session: a Docker engine (started here where none runs), the image
built on a base that can be had offline, and docker-compose.yml brought up as written. Run
by `make test-containers`, never by `make test` (pyproject.toml: norecursedirs)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml
from heddle.services.local.embedded_nats import free_port

from tests.containers.deployment import ROOT, Deployment
from tests.containers.engine import Engine, default_cache_dir, start_engine
from tests.containers.images import nats_image, python_base

SUMMARY = ROOT / "test-results" / "containers" / "summary.txt"
IMAGE = "heddle:local"  # docker-compose.yml's
FULL_IMAGE = "heddle:containers-test"  # the default target, the chart's
_summary: list[str] = []


def note(line: str) -> None:
    """A line for the run's summary (printed at the end, and kept in SUMMARY)."""
    _summary.append(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _summary:
        return
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("\n".join(_summary) + "\n")
    terminalreporter.section("containers")
    for line in _summary:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    made = start_engine(default_cache_dir())
    try:
        yield made
    finally:
        made.stop()


def image_size(engine: Engine, image: str) -> int:
    return int(engine.docker("image", "inspect", "-f", "{{.Size}}", image).stdout)


@pytest.fixture(scope="session")
def images(engine: Engine) -> dict[str, str]:
    """The Heddle image in both targets, and the compose file's nats image, built here."""
    cache = default_cache_dir()
    base = python_base(engine, cache)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    nats = nats_image(engine, cache, compose["services"]["nats"]["image"])
    built = {}
    # The first build is cold (no cache): the legacy builder builds every stage before the
    # target, so it times the whole image; the second takes its layers from the first.
    for target, tag, cold in (("slim", IMAGE, True), ("kubernetes", FULL_IMAGE, False)):
        started = time.monotonic()
        engine.docker(
            "build", *(["--no-cache"] if cold else []), "--network", "host",
            "--build-arg", f"BASE={base}", "--target", target, "-t", tag, str(ROOT),
            timeout=1200, env={"DOCKER_BUILDKIT": "0"},
        )  # fmt: skip
        seconds = time.monotonic() - started
        size = image_size(engine, tag) / 1e6
        how = "cold, every stage" if cold else "from the cache"
        note(f"image {target} ({tag}) on {base}: built in {seconds:.0f} s ({how}), {size:.0f} MB")
        built[target] = tag
    note(f"base {base}: {image_size(engine, base) / 1e6:.0f} MB; nats image {nats}")
    return {**built, "base": base, "nats": nats}


@pytest.fixture(scope="session")
def deployment(engine: Engine, images: dict[str, str]) -> Iterator[Deployment]:
    """docker-compose.yml up, as written, with its published ports on free ones."""
    made = Deployment(engine, f"heddle-ct-{os.getpid()}", free_port(), free_port())
    started = time.monotonic()
    try:
        made.compose("up", "-d", "--no-build", timeout=600)
        made.token = made.compose("exec", "-T", "gateway", "cat", "/run/heddle/admin-token").strip()
        made.wait_ready(runners=2)
        note(f"compose ({' '.join(engine.compose_command())}) up and ready in "
             f"{time.monotonic() - started:.0f} s")  # fmt: skip
        yield made
    finally:
        (ROOT / "test-results" / "containers").mkdir(parents=True, exist_ok=True)
        (ROOT / "test-results" / "containers" / "compose.log").write_text(made.logs())
        made.compose("down", "-v", "--remove-orphans", "--timeout", "30", check=False)
        left = made.engine.docker(
            "ps", "-aq", "--filter", f"label=com.docker.compose.project={made.project}"
        ).stdout.split()
        assert not left, f"containers left: {left}"


@pytest.fixture
def demo() -> dict:
    """The README's demo run: a diamond A -> (B, C) -> D."""
    return yaml.safe_load((ROOT / "docs" / "examples" / "demo.yaml").read_text())


def run_cli(
    deployment: Deployment, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The image's own command line, in the gateway's container."""
    argv = [*deployment.engine.compose_command(), "-p", deployment.project,
            "exec", "-T", "gateway", "heddle", *args]  # fmt: skip
    return subprocess.run(
        argv, cwd=ROOT, env=deployment.engine.env, input=stdin,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

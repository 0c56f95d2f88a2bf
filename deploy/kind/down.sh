#!/usr/bin/env bash
# Tear down what deploy/kind/up.sh made: the kind cluster, with Heddle and its data in it.
#
#   deploy/kind/down.sh                        # cluster "heddle"
#   CLUSTER=other deploy/kind/down.sh
set -euo pipefail

CLUSTER="${CLUSTER:-heddle}"

command -v kind >/dev/null 2>&1 || { echo "down.sh: kind is not on PATH" >&2; exit 1; }
# Read whole before grep: `grep -q` in a pipe may exit before kind has written everything, and
# kind's SIGPIPE would then fail the test under pipefail.
clusters="$(kind get clusters 2>/dev/null || true)"
if grep -qx "$CLUSTER" <<<"$clusters"; then
  kind delete cluster --name "$CLUSTER"
else
  echo "down.sh: no kind cluster $CLUSTER" >&2
fi

#!/usr/bin/env bash
# Status at scale (release builds): N clusters created through Magnum 23.0.0's
# client on a real kube-apiserver (scripts/k8s-up.sh; CAPI's controllers simulated
# by capi-sim), then with the simulated controllers paused:
# kube requests per minute in steady state, and the delay from a CAPI status
# change (a Cluster's Ready condition flipped) to the Magnum row (p50/p99).
# Prints a JSON summary (see docs/benchmarks.md).
#   scripts/bench-status.sh [--clusters 1000] [--samples 200] [--steady-seconds 60]
#       [--total 10000] [--churn-per-second 20] [--restart-samples 100]
#       [--apiserver-arg=--watch-cache=false]... [--dump-cluster FILE]
#       [--rss-builds OLD_BINARY...]  (each build restarted on the same fleet: RSS after its first pass)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
exports="$(scripts/setup-env.sh | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
own_services
cargo build --release --quiet -p conductor -p capi-sim
release="$(cargo_target_dir)/release"
"$MAGNUM_VENV/bin/python" tests/python/bench_status.py --conductor "$release/magnum-conductor" \
  --sim "$release/capi-sim" "$@"

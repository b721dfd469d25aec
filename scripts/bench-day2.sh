#!/usr/bin/env bash
# Day-2 cost (release builds): for N clusters on a real kube-apiserver
# (scripts/k8s-up.sh; CAPI's controllers simulated by capi-sim), the time
# from a cluster_resize cast (up, then down with nodes_to_remove) and from a
# cluster_upgrade call to UPDATE_COMPLETE in the Magnum row, and the
# management-cluster requests each operation costs. Prints a JSON summary
# (see docs/benchmarks.md).
#   scripts/bench-day2.sh [--clusters 20] [--tick-ms 20]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
exports="$(scripts/setup-env.sh | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
own_services
cargo build --release --quiet -p conductor -p capi-sim
release="$(cargo_target_dir)/release"
"$MAGNUM_VENV/bin/python" tests/python/bench_day2.py --conductor "$release/magnum-conductor" \
  --sim "$release/capi-sim" "$@"

#!/usr/bin/env bash
# The offline list (deploy/offline/images.txt): every chart and image a
# cluster pulls with every addon on (both network drivers), and what moves
# each to a mirror (the `[capi] *_chart_repo` options, the template label
# `container_infra_prefix`). Made from what the conductor writes for such a
# cluster (`magnum-conductor cluster-objects`, through its own rendering)
# and the charts rendered by the real Helm engine at the pinned versions
# (tests/python/offline_list.py).
#   scripts/offline-list.sh                       # the default configuration, to stdout
#   scripts/offline-list.sh --config-file /etc/magnum/magnum.conf --out images.txt
#   scripts/offline-list.sh --write               # rewrite deploy/offline/images.txt
# Set-up: scripts/setup-env.sh --demo (the Helm engine's venv and the
# charts, checked against scripts/charts.lock); the conductor is built
# unless MAGNUM_CONDUCTOR_BIN names one. A configuration whose chart
# versions are not in scripts/charts.lock cannot be rendered here.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
args=()
configs=0
while [ $# -gt 0 ]; do
  case "$1" in
    --write) args+=(--out deploy/offline/images.txt); shift ;;
    --config-file) args+=(--config-file "${2:?--config-file FILE}"); configs=1; shift 2 ;;
    --out) args+=(--out "${2:?--out FILE}"); shift 2 ;;
    *) echo "usage: $0 [--config-file FILE]... [--out FILE | --write]" >&2; exit 2 ;;
  esac
done
exports="$(scripts/setup-env.sh --demo | tail -n 1)"
eval "$exports"
export HELM_VENV HELM_CHARTS_DIR
if [ -z "${MAGNUM_CONDUCTOR_BIN:-}" ]; then
  cargo build --quiet -p conductor --bin magnum-conductor
  MAGNUM_CONDUCTOR_BIN="$(cargo_target_dir)/debug/magnum-conductor"
fi
empty=""
if [ "$configs" = 0 ]; then
  # The defaults, not whatever /etc/magnum/magnum.conf this machine has.
  empty="$(mktemp)"
  trap 'rm -f "$empty"' EXIT
  args+=(--config-file "$empty")
fi
"$MAGNUM_VENV/bin/python" tests/python/offline_list.py --conductor "$MAGNUM_CONDUCTOR_BIN" ${args[@]+"${args[@]}"}

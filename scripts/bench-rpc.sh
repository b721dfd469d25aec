#!/usr/bin/env bash
# RPC benchmark (release builds), one run on one broker. Prints Markdown
# tables (see docs/benchmarks.md "RPC").
#
#   scripts/bench-rpc.sh [--calls 5000] [--casts 20000] [--concurrency 1 8 32]
#                        [--connections 4] [--python-workers 1 2]
#       mc-rpc-load (tests/bin/rpc_load.rs: oslo.messaging's wire, checked
#       against the recorded fixtures) against a trivial consumer (the
#       broker's ceiling), the real Python magnum-conductor 23.0.0 (1 and N
#       workers) and ours: messages/s, p50/p99, CPU seconds per 1,000.
#   scripts/bench-rpc.sh --magnum-client [--calls N] [--concurrency 1 8 ...] [--casts N]
#       ping_conductor (and cluster_delete casts) through Magnum 23.0.0's own
#       Python client instead, with each conductor's CPU per message.
#   scripts/bench-rpc.sh --instructions [--python] [--calls 400] [--casts 1000]
#       instructions per message counted by callgrind (ours, and with
#       --python the Python conductor's).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
exports="$(scripts/setup-env.sh | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
own_services
cargo build --release --quiet -p conductor -p integration-tests --bin magnum-conductor --bin mc-rpc-load
release="$(cargo_target_dir)/release"
if [ "${1:-}" = "--instructions" ]; then
  shift
  "$MAGNUM_VENV/bin/python" tests/python/bench_instructions.py --load "$release/mc-rpc-load" \
    --conductor "$release/magnum-conductor" "$@"
elif [ "${1:-}" = "--magnum-client" ]; then
  shift
  MAGNUM_CONDUCTOR_BIN="$release/magnum-conductor" \
    "$MAGNUM_VENV/bin/python" tests/python/bench_ping.py "$@"
else
  "$MAGNUM_VENV/bin/python" tests/python/bench_load.py --load "$release/mc-rpc-load" \
    --conductor "$release/magnum-conductor" "$@"
fi

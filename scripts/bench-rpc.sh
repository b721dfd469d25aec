#!/usr/bin/env bash
# ping_conductor benchmark: Magnum 23.0.0's client against our conductor
# (release build) and against the real Python magnum-conductor, same broker,
# one run. Prints Markdown tables (see docs/benchmarks.md).
#   scripts/bench-rpc.sh [--calls N] [--concurrency 1 8 ...]
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/setup-env.sh | tail -n 1)"
cargo build --release --quiet -p conductor
MAGNUM_CONDUCTOR_BIN="$PWD/target/release/magnum-conductor" \
  "$MAGNUM_VENV/bin/python" tests/python/bench_ping.py "$@"

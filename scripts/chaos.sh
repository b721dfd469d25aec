#!/usr/bin/env bash
# The chaos test (tests/python/test_chaos.py): three conductors on the real
# RabbitMQ and MariaDB and the simulator, a stream of operations through
# Magnum's own client, kill -9s, broker and database cuts, apiserver errors and
# dropped watches. Seeded: CHAOS_SEED=<n> repeats a run's operations and fault
# schedule (both printed).
#
#   scripts/chaos.sh            the long form: 25 clusters x (create, 6 day-2
#                               operations, delete) = 200 operations, up to
#                               120 faults, one every 0.5-2.5 s while they run
#   CHAOS_CLUSTERS=4 CHAOS_STEPS=3 CHAOS_FAULTS=8 scripts/chaos.sh
#                               the short form (what the test suite runs)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
exports="$(scripts/setup-env.sh | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
own_services
cargo build --workspace --quiet --features conductor/failpoints
debug="$(cargo_target_dir)/debug"
export CHAOS_CLUSTERS="${CHAOS_CLUSTERS:-25}" CHAOS_STEPS="${CHAOS_STEPS:-6}" CHAOS_FAULTS="${CHAOS_FAULTS:-120}" \
  CHAOS_FAULT_GAP="${CHAOS_FAULT_GAP:-0.5,2.5}"
MAGNUM_CONDUCTOR_BIN="$debug/magnum-conductor" \
  "$MAGNUM_VENV/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q -s tests/python/test_chaos.py

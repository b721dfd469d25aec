#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust unit and integration tests
# (against the real RabbitMQ), and the Python interop tests that drive our
# conductor with Magnum 23.0.0's own client code. Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

exports="$(scripts/setup-env.sh | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
export CARGO_TERM_COLOR=never
# Each stage's heading says when it started (seconds since this script
# began, set-up included): CI's budget is 90 minutes and this shows where
# they go.
stage() { echo "== $* (at ${SECONDS}s)"; }

stage "cargo fmt"
cargo fmt --all -- --check
stage "cargo clippy (as released, and with the crash points)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy --workspace --all-targets --quiet --features conductor/failpoints -- -D warnings
stage "lint: shellcheck (scripts), ansible-lint production profile (deploy/ansible)"
shellcheck scripts/*.sh .ci/run
(cd deploy/ansible && PATH="$ANSIBLE_LINT_VENV/bin:$PATH" ansible-lint --profile production --offline --nocolor -q)
stage "no crash-point code in a build without the failpoints feature"
# Built with the workspace selected (not `-p conductor`), so that Cargo
# resolves the dependencies' features as for the builds below (tokio,
# serde_json and tokio-rustls gain features from the test crates): each
# dependency is compiled once for all of them, not twice.
# The build the demo below runs (and the one scripts/demo.sh makes).
cargo build --workspace --bin magnum-conductor --bin capi-sim --quiet
if grep -a -q -e MAGNUM_CONDUCTOR_FAILPOINT -e "failpoint reached" target/debug/magnum-conductor; then
  echo "crash-point code found in a build without the failpoints feature" >&2
  exit 1
fi
# The demo (README's first command) runs this build, as released, beside
# the builds and cargo test below (it mostly waits on simulated rollouts);
# its outcome is checked before the Python suite.
stage "the demo (README's first command: scripts/demo.sh), as released: started in the background"
demo_dir="$(mktemp -d)"
cp target/debug/magnum-conductor target/debug/capi-sim "$demo_dir/"
DEMO_BIN_DIR="$demo_dir" scripts/demo.sh > "$demo_dir/demo.log" 2>&1 &
demo_pid=$!
stage "cargo build (with the crash points the restart tests use)"
cargo build --workspace --quiet --features conductor/failpoints
grep -a -q MAGNUM_CONDUCTOR_FAILPOINT target/debug/magnum-conductor
# Magnum's own API tests through tempest (tests/python/test_tempest.py) run
# beside everything below: most of their ~15 minutes is the plugin's own
# sleeping. Their output comes at the end.
stage "magnum-tempest-plugin 2.12.0: started in the background"
tempest_log="$(mktemp)"
MAGNUM_CONDUCTOR_BIN="$PWD/target/debug/magnum-conductor" \
  "$MAGNUM_VENV/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q tests/python/test_tempest.py \
  >"$tempest_log" 2>&1 &
tempest_pid=$!
trap 'kill "$tempest_pid" "$demo_pid" 2>/dev/null || true' EXIT
stage "cargo test (unit + integration, real RabbitMQ)"
MAGNUM_VENV="$MAGNUM_VENV" cargo test --workspace --quiet --features conductor/failpoints 2>&1 | tee /tmp/mc-cargo-test.log
stage "the demo's outcome"
if ! wait "$demo_pid"; then
  cat "$demo_dir/demo.log"
  echo "scripts/demo.sh failed" >&2
  exit 1
fi
grep -E '^(===|---)' "$demo_dir/demo.log"
rm -rf "$demo_dir"
stage "magnum-api driver package (Magnum 23.0.0 and 22.0.0, installed as operators do)"
for api_venv in "$MAGNUM_API_VENV" "$MAGNUM22_API_VENV"; do
  "$api_venv/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q deploy/magnum-driver/tests
done
# Most of these tests wait on simulated rollouts, not on a CPU: modules run
# in PY_WORKERS processes (each module whole in one, its fixtures shared by
# its tests; every test has its own vhost, database, ports and control
# plane). The tests that stop RabbitMQ run after them, alone.
py_workers="${PY_WORKERS:-3}"
stage "python interop tests (Magnum 23.0.0 client), $py_workers processes"
MAGNUM_CONDUCTOR_BIN="$PWD/target/debug/magnum-conductor" \
  "$MAGNUM_VENV/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q --durations=12 tests/python \
  --ignore=tests/python/test_tempest.py -m "not broker_outage" -n "$py_workers" --dist loadfile
stage "python interop tests that stop RabbitMQ (alone)"
MAGNUM_CONDUCTOR_BIN="$PWD/target/debug/magnum-conductor" \
  "$MAGNUM_VENV/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q tests/python \
  --ignore=tests/python/test_tempest.py -m broker_outage
stage "magnum-tempest-plugin 2.12.0 (tempest 47.0.0, real magnum-api and Keystone, workload apiservers)"
tempest_rc=0
wait "$tempest_pid" || tempest_rc=$?
trap - EXIT
cat "$tempest_log"
if [ "$tempest_rc" != 0 ]; then
  echo "magnum-tempest-plugin tests failed (exit $tempest_rc)" >&2
  exit 1
fi
# Fuzzing is a long run, not part of this command by default: the corpora
# and every crash found so far are replayed through the same bodies by
# `cargo test` (tests/it/fuzz_corpus.rs) above. A fresh machine spends ~5
# minutes here (cargo-fuzz and an optimized nightly build) for 80 seconds of
# fuzzing, twice that on CI, whose budget is 90 minutes for everything.
if [ -n "${FUZZ_SECONDS:-}" ]; then
  stage "fuzz targets, ${FUZZ_SECONDS}s each (scripts/fuzz.sh run 600 for the long run)"
  scripts/fuzz.sh run "$FUZZ_SECONDS"
else
  stage "fuzz targets: not run (FUZZ_SECONDS=20 to fuzz briefly here; scripts/fuzz.sh run 600 for the long run)"
fi
stage "all passed"

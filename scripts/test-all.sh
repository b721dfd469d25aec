#!/usr/bin/env bash
# The whole test suite: formatting, lints, Rust unit and integration tests
# (against the real RabbitMQ), and the Python interop tests that drive our
# conductor with Magnum 23.0.0's own client code. Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

# Each stage's heading says when it started (seconds since this script
# began, set-up included): CI's budget is 90 minutes and this shows where
# they go. The end of the run prints a table of wall time and CPU seconds
# per stage and per Python test module (tests/suite_report.py; records in
# MC_SUITE_TIMING_DIR). As root, each stage runs in a cgroup (cpuacct) of
# its own, so its CPU counts everything it started, daemons and exited
# processes included.
MC_SUITE_TIMING_DIR="${MC_SUITE_TIMING_DIR:-$(mktemp -d -t mc-suite-timing-XXXXXX)}"
mkdir -p "$MC_SUITE_TIMING_DIR"
: > "$MC_SUITE_TIMING_DIR/stages.tsv"
MC_SUITE_CGROUP=""
if [ -w /sys/fs/cgroup/cpuacct ] && mkdir "/sys/fs/cgroup/cpuacct/magnum-rs-suite-$$" 2>/dev/null; then
  MC_SUITE_CGROUP="/sys/fs/cgroup/cpuacct/magnum-rs-suite-$$"
fi
export MC_SUITE_TIMING_DIR MC_SUITE_CGROUP
# The calling shell ($BASHPID: not in a command substitution, which is a
# process of its own) into the cgroup NAME; its path in $cg_path ("" when
# there is none).
cg_enter() {
  cg_path=""
  [ -n "$MC_SUITE_CGROUP" ] || return 0
  if mkdir -p "$MC_SUITE_CGROUP/$1" && echo "$BASHPID" > "$MC_SUITE_CGROUP/$1/cgroup.procs"; then
    cg_path="$MC_SUITE_CGROUP/$1"
  fi
}
stage_n=0
stage() {
  stage_n=$((stage_n + 1))
  echo "== $* (at ${SECONDS}s)"
  cg_enter "stage-$stage_n"
  printf 'begin\t%s\t%s\t%s\n' "$*" "$(date +%s.%N)" "$cg_path" >> "$MC_SUITE_TIMING_DIR/stages.tsv"
}
# `in_background NAME COMMAND...`: COMMAND in a cgroup of its own, its
# wall time recorded when it ends (run it with &).
in_background() {
  local name="$1" t0 rc=0
  shift
  t0="$(date +%s.%N)"
  cg_enter "bg-${name// /-}"
  "$@" || rc=$?
  printf 'bg\t%s\t%s\t%s\t%s\n' "$name" "$t0" "$(date +%s.%N)" "$cg_path" >> "$MC_SUITE_TIMING_DIR/stages.tsv"
  return "$rc"
}
# At the end, passed or not: the table, and the cgroups taken down (those a
# process still holds stay; the kernel refuses to remove them).
bg_pids=()
finish() {
  local rc=$?
  [ "${#bg_pids[@]}" -eq 0 ] || kill "${bg_pids[@]}" 2>/dev/null || true
  # The run's OpenStack services: the launcher stops them on SIGTERM.
  if [ -n "${cloud_pid:-}" ]; then
    [ ! -s "$MC_SHARED_CLOUD/pid" ] || kill "$(cat "$MC_SHARED_CLOUD/pid")" 2>/dev/null || true
    wait "$cloud_pid" 2>/dev/null || true
    if [ "$rc" = 0 ]; then
      rm -rf "$MC_SHARED_CLOUD"
    else
      [ ! -s "$MC_SHARED_CLOUD/failed" ] || {
        echo "== the run's OpenStack services did not start:"; tail -n 40 "$MC_SHARED_CLOUD/failed"; }
      echo "(their logs: $MC_SHARED_CLOUD)"
    fi
  fi
  # A process gone without a word may be the kernel's doing.
  if [ "$rc" != 0 ] && dmesg 2>/dev/null | grep -iE "out of memory|killed process" | tail -n 20 | grep -q .; then
    echo "== the kernel's out-of-memory kills during the run:"
    dmesg | grep -iE "out of memory|killed process" | tail -n 20
  fi
  [ -z "${bin_dir:-}" ] || rm -rf "$bin_dir"
  [ -z "${release_dir:-}" ] || rm -rf "$release_dir"
  # The run's MariaDB and RabbitMQ; then the machine's, as they were.
  [ -z "${svc_dir:-}" ] || scripts/services.sh down "$svc_dir" || true
  if [ -n "${machine_before:-}" ]; then
    machine_after="$(machine_state)"
    if [ "$machine_after" != "$machine_before" ]; then
      echo "== the machine's own MariaDB or RabbitMQ changed during the run (the suite runs on its own; anything else writing there?):"
      diff <(echo "$machine_before" | tr ' ' '\n') <(echo "$machine_after" | tr ' ' '\n') || true
      [ "$rc" != 0 ] || rc=1
    else
      echo "== the machine's own MariaDB and RabbitMQ: the same databases, vhosts, exchanges and queues as before the run"
    fi
  fi
  printf 'end\t%s\n' "$(date +%s.%N)" >> "$MC_SUITE_TIMING_DIR/stages.tsv"
  echo "== where the time went: wall and CPU seconds per stage and per Python module (tests/suite_report.py $MC_SUITE_TIMING_DIR)"
  python3 tests/suite_report.py "$MC_SUITE_TIMING_DIR" || true
  if [ -n "$MC_SUITE_CGROUP" ]; then
    echo "$BASHPID" > /sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null || true
    rmdir "$MC_SUITE_CGROUP"/*/ "$MC_SUITE_CGROUP" 2>/dev/null || true
  fi
  return "$rc"
}
trap finish EXIT

stage "set-up (scripts/setup-env.sh: what is missing installed, artifacts verified)"
exports="$(scripts/setup-env.sh | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
kubectl_first
export CARGO_TERM_COLOR=never
# One build cache for every clone on this machine, as the venvs are kept in
# ~/.cache: a clean clone rebuilds only the workspace's own crates, not its
# ~400 dependencies (Cargo's fingerprints decide; its lock serializes two
# runs at once). A target directory the user chose (CARGO_TARGET_DIR, a
# cargo config's build.target-dir) is used as it is.
if [ -z "${CARGO_TARGET_DIR:-}" ] && [ "$(cargo_target_dir)" = "$PWD/target" ]; then
  export CARGO_TARGET_DIR="$HOME/.cache/magnum-conductor-rs/target"
fi
out="$(cargo_target_dir)/debug"

# MariaDB and RabbitMQ of the run's own (scripts/services.sh), shared by
# every test process; the machine's own, if it has any, are not used: their
# databases, vhosts and each vhost's exchanges and queues are listed now
# and compared at the end. The variables of an existing server (MAGNUM_RS_DB_SERVER,
# MAGNUM_RS_RABBITMQ_*) make the run use that one instead.
stage "MariaDB and RabbitMQ of the run's own (scripts/services.sh)"
machine_state() {
  env -u MAGNUM_RS_DB_SERVER -u MAGNUM_RS_RABBITMQ_PORT -u MAGNUM_RS_RABBITMQ_NODE -u MAGNUM_RS_RABBITMQ_HOME \
    -u MAGNUM_RS_RABBITMQ_EPMD_PORT timeout 120 scripts/services.sh list 2>/dev/null | tr '\n' ' ' || true
}
if [ -z "${MAGNUM_RS_DB_SERVER:-}${MAGNUM_RS_RABBITMQ_PORT:-}" ]; then
  machine_before="$(machine_state)"
  echo "the machine's own: ${machine_before:-none running}"
fi
# What every test waits on (MariaDB, RabbitMQ, the OpenStack services
# below: one of each for the whole run, most of them a single process)
# runs ahead of the tests' own processes when the cores are short: under
# the fair scheduler a single-process service got a share of a core like
# any one of the dozens of apiservers, conductors and clients, and every
# test's request queued behind it. As root (nice -10; otherwise as is).
shared_prio=()
[ "$(id -u)" != 0 ] || shared_prio=(nice -n -10)
svc_dir="$(mktemp -d -t mc-services-XXXXXX)"
svc_exports="$(${shared_prio[@]+"${shared_prio[@]}"} scripts/services.sh up "$svc_dir" | tail -n 1)"  # a failure stops here
eval "$svc_exports"
export MAGNUM_RS_DB_SERVER MAGNUM_RS_RABBITMQ_PORT MAGNUM_RS_RABBITMQ_NODE MAGNUM_RS_RABBITMQ_HOME \
  MAGNUM_RS_RABBITMQ_EPMD_PORT

# One set of OpenStack services for every test process of this run
# (tests/python/shared_cloud.py: Keystone, Neutron, Octavia, Cinder,
# Glance, Nova's API, Manila; each test in a project of its own), started
# now so that it is up by the time the first test needs it; it stops with
# this script.
stage "the run's OpenStack services (tests/python/shared_cloud.py): started in the background"
MC_SHARED_CLOUD="$(mktemp -d -t mc-shared-cloud-XXXXXX)"
export MC_SHARED_CLOUD
in_background "the run's OpenStack services" ${shared_prio[@]+"${shared_prio[@]}"} "$MAGNUM_VENV/bin/python" tests/python/shared_cloud.py \
  "$MC_SHARED_CLOUD" --parent "$$" > "$MC_SHARED_CLOUD/launcher.log" 2>&1 &
cloud_pid=$!

stage "cargo fmt"
cargo fmt --all -- --check
stage "lint: shellcheck (scripts), ansible-lint production profile (deploy/ansible)"
shellcheck scripts/*.sh .ci/run
(cd deploy/ansible && PATH="$ANSIBLE_LINT_VENV/bin:$PATH" ansible-lint --profile production --offline --nocolor -q)
stage "no crash-point code in a build without the failpoints feature"
# Built with the workspace selected (not `-p conductor`), so that Cargo
# resolves the dependencies' features as for the builds below (tokio,
# serde_json and tokio-rustls gain features from the test crates): each
# dependency is compiled once for all of them, not twice.
# The build the demo below runs (and the one scripts/demo.sh makes).
# Not quiet: a first build on a fresh machine takes 8-15 minutes; cargo
# names each crate as it compiles it.
cargo build --workspace --bin magnum-conductor --bin capi-sim
if grep -a -q -e MAGNUM_CONDUCTOR_FAILPOINT -e "failpoint reached" "$out/magnum-conductor"; then
  echo "crash-point code found in a build without the failpoints feature" >&2
  exit 1
fi
# Magnum's own API tests through tempest (tests/python/test_tempest.py) run
# this build, as released (a copy: the builds below write $out), beside
# everything below: they mostly wait on the plugin's own sleeping.
release_dir="$(mktemp -d)"
cp "$out/magnum-conductor" "$out/capi-sim" "$release_dir/"
stage "magnum-tempest-plugin 2.12.0, as released: started in the background"
tempest_log="$(mktemp)"
MAGNUM_CONDUCTOR_BIN="$release_dir/magnum-conductor" \
  in_background "magnum-tempest-plugin" "$MAGNUM_VENV/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q \
  tests/python/test_tempest.py >"$tempest_log" 2>&1 &
tempest_pid=$!
bg_pids=("$tempest_pid")
# The demo (README's first command), as a user runs it: it builds (nothing
# left to compile: the build above), finds its binaries in the target
# directory (outside the clone unless the user chose otherwise) and starts
# MariaDB and RabbitMQ of its own. As root it runs in a network namespace
# of its own (loopback only): the machine's MariaDB, RabbitMQ and epmd are
# out of its reach, as on a machine that has none running. The next build
# waits until the demo has copied its binaries.
demo_log="$(mktemp)"
demo_cmd=(scripts/demo.sh)
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then
  demo_cmd=(unshare --net -- bash -c 'ip link set lo up && exec "$@"' demo scripts/demo.sh)
  demo_where="in a network namespace of its own"
else
  demo_where="on this machine's network (not root: no namespace)"
fi
stage "the demo (README's first command: scripts/demo.sh, target directory $(cargo_target_dir)), $demo_where: started in the background"
(
  # As a user's shell has it: none of the run's variables.
  unset MAGNUM_RS_DB_SERVER MAGNUM_RS_RABBITMQ_PORT MAGNUM_RS_RABBITMQ_NODE MAGNUM_RS_RABBITMQ_HOME \
    MAGNUM_RS_RABBITMQ_EPMD_PORT K8S_BIN_DIR CAPI_CRDS_DIR HELM_CHARTS_DIR
  in_background "the demo" "${demo_cmd[@]}"
) > "$demo_log" 2>&1 &
demo_pid=$!
bg_pids=("$tempest_pid" "$demo_pid")
for _ in $(seq 1 1200); do
  grep -q "^=== MariaDB and RabbitMQ of the demo's own" "$demo_log" && break
  kill -0 "$demo_pid" 2>/dev/null || break
  sleep 0.5
done
stage "cargo clippy (as released, and with the crash points)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy --workspace --all-targets --quiet --features conductor/failpoints -- -D warnings
stage "cargo build (with the crash points the restart tests use)"
cargo build --workspace --quiet --features conductor/failpoints
grep -a -q MAGNUM_CONDUCTOR_FAILPOINT "$out/magnum-conductor"
# The Python tests run a copy of these binaries: cargo test below may
# relink $out with its dev-dependencies' features while they start
# them.
bin_dir="$(mktemp -d)"
find "$out" -maxdepth 1 -type f -perm -u+x -exec cp {} "$bin_dir/" \;
# cargo test keeps about one core busy (its tests mostly wait on RabbitMQ,
# MariaDB and apiservers): it runs beside the Python suite below (on the
# copy above). None of its tests stops RabbitMQ; the Python tests that do
# stop a node of their own (tests/python/conftest.py, private_broker).
# (Clippy beside the Python stage instead, even at nice 19, made the
# stage's tests slower: the clean-up tests' deletes overran their 60 s in
# one run of two; docs/testing.md, third round.)
stage "cargo test (unit + integration, real RabbitMQ): started in the background"
cargo_test_log="$(mktemp)"
MAGNUM_VENV="$MAGNUM_VENV" in_background "cargo test" cargo test --workspace --quiet --features conductor/failpoints \
  >"$cargo_test_log" 2>&1 &
cargo_test_pid=$!
bg_pids=("$tempest_pid" "$demo_pid" "$cargo_test_pid")
stage "magnum-api driver package (Magnum 23.0.0 and 22.0.0, installed as operators do)"
for api_venv in "$MAGNUM_API_VENV" "$MAGNUM22_API_VENV"; do
  "$api_venv/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q deploy/magnum-driver/tests
done
# Most of these tests wait on simulated rollouts, not on a CPU: modules run
# in PY_WORKERS processes (each module whole in one, its fixtures shared by
# its tests; every test has its own vhost, database and ports; control
# planes are reused between a process's modules, wiped: tests/python/k8s.py).
# The tests that stop RabbitMQ stop a node of their own. Four: with the run's
# OpenStack services shared and Keystone's cache on, three processes left
# the two cores idle 28% of the stage (three did better than four while the
# stage was CPU-bound, docs/testing.md).
py_workers="${PY_WORKERS:-4}"
stage "python interop tests (Magnum 23.0.0 client), $py_workers processes"
MAGNUM_CONDUCTOR_BIN="$bin_dir/magnum-conductor" \
  "$MAGNUM_VENV/bin/python" -m pytest -p no:warnings -p no:cacheprovider -q --durations=10 tests/python \
  --ignore=tests/python/test_tempest.py -n "$py_workers" --dist loadfile --no-loadscope-reorder
stage "cargo test's outcome"
cargo_test_rc=0
wait "$cargo_test_pid" || cargo_test_rc=$?
cp "$cargo_test_log" /tmp/mc-cargo-test.log
grep -E '^(test result|error|failures:|---- )' "$cargo_test_log" || true
if [ "$cargo_test_rc" != 0 ]; then
  tail -n 200 "$cargo_test_log"
  echo "cargo test failed (exit $cargo_test_rc)" >&2
  exit 1
fi
stage "the demo's outcome"
if ! wait "$demo_pid"; then
  cat "$demo_log"
  echo "scripts/demo.sh failed" >&2
  exit 1
fi
bg_pids=("$tempest_pid")
grep -E '^(===|---)' "$demo_log"
stage "magnum-tempest-plugin 2.12.0 (tempest 47.0.0, real magnum-api and Keystone, workload apiservers)"
tempest_rc=0
wait "$tempest_pid" || tempest_rc=$?
bg_pids=()
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

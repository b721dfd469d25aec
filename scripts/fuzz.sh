#!/usr/bin/env bash
# Fuzzing (cargo-fuzz, libFuzzer) of what the conductor reads from outside:
# the AMQP message decoder, the oslo.config reader, the transport/database URL
# parsers and the CSR path. Targets: fuzz/fuzz_targets; their bodies:
# fuzz/harness.rs (also replayed on stable by `cargo test`, tests/it/fuzz_corpus.rs).
#
#   scripts/fuzz.sh run [SECONDS]   each target for SECONDS (default 600), from
#                                   the committed corpus (fuzz/corpus/<target>)
#   scripts/fuzz.sh seed            rebuild the seed corpora from the recorded
#                                   RPC fixtures and sample inputs
#   scripts/fuzz.sh merge           fold what runs found (fuzz/corpus-new) into
#                                   the committed corpora, minimized (libFuzzer
#                                   -merge=1: only inputs that add coverage)
#
# Needs the nightly toolchain and cargo-fuzz (installed if missing). New
# inputs found go to fuzz/corpus-new/<target> (not committed); a crash goes
# to fuzz/artifacts/<target>/ and becomes a file of fuzz/regressions/<target>/
# (replayed by `cargo test`).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=(rpc_message oslo_config urls csr)

seed() {
  python3 - <<'PY'
import glob, gzip, json, os, subprocess, tempfile
out = "fuzz/corpus"
def put(target, name, data):
    d = os.path.join(out, target); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
for path in sorted(glob.glob("tests/fixtures/rpc/*.json")):
    body = json.load(open(path))["body"].encode()
    name = os.path.basename(path)[:-5]
    put("rpc_message", name, b"\x00" + body)
    put("rpc_message", name + ".gz", b"\x01" + gzip.compress(body, mtime=0))
conf = """[DEFAULT]
transport_url = rabbit://magnum:secret@rabbit-1:5672,magnum:secret@rabbit-2:5672/magnum?ssl=1&amqp_durable_queues=true
host = infra1
state_path = /var/lib/magnum
lock_path = $state_path/lock
[database]
connection = mysql+pymysql://magnum:pw@db.example.com/magnum?charset=utf8&ssl_ca=/etc/ssl/ca.pem
max_pool_size = 10
[oslo_messaging_rabbit]
rabbit_quorum_queue = true
heartbeat_timeout_threshold = 60
[oslo_messaging_notifications]
driver = messagingv2
topics = notifications, audit
[x509]
rsa_key_size = 4096
term_of_validity = 1825
[capi]
kubeconfig = /etc/magnum/kubeconfig
os_distros = ubuntu, rockylinux
lease_duration = 15
update_timeout = 0
[metrics]
listen = 0.0.0.0:9462
"""
put("oslo_config", "full.conf", conf.encode())
put("oslo_config", "continuation.conf", b"[DEFAULT]\ntransport_url =\n  rabbit://a:b@h:5672/\n# comment\n[conductor]\nworkers = 3\n")
put("oslo_config", "empty.conf", b"")
for i, u in enumerate([
    "rabbit://guest:guest@127.0.0.1:5672/",
    "rabbit://u:p%40ss@[::1]:5671,u:p@host2:5672/vhost?ssl=1&ssl_ca_file=/ca.pem",
    "amqp://h/",
    "mysql+pymysql://root@127.0.0.1:3306/magnum?charset=utf8",
    "mysql://u:p@db/magnum?ssl_ca=/x&ssl_verify_cert=true",
    "mysql+pymysql://u:p@/magnum?unix_socket=/run/mysqld/mysqld.sock",
]):
    put("urls", f"url{i}", u.encode())
with tempfile.TemporaryDirectory() as t:
    for name, args in (("rsa", ["-newkey", "rsa:2048"]), ("ec", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])):
        csr = subprocess.run(["openssl", "req", "-new", *args, "-nodes", "-keyout", f"{t}/k", "-subj",
                              "/CN=admin/O=system:masters", "-addext", "subjectAltName=DNS:node-1,IP:10.0.0.5"],
                             capture_output=True, check=True).stdout
        put("csr", f"{name}.csr", csr)
print("seeded", {t: len(os.listdir(os.path.join(out, t))) for t in sorted(os.listdir(out))})
PY
}

run() {
  local secs="${1:-600}"
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
  rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
  # -s none: the Rust code is memory-safe; no sanitizer keeps the C
  # dependencies (aws-lc, zlib) quick to build. Panics and aborts are found.
  (cd fuzz && cargo +nightly fuzz build -s none)
  for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus-new/$t"
    echo "== fuzz $t for ${secs}s"
    local log="fuzz/corpus-new/$t.log" rc=0
    (cd fuzz && cargo +nightly fuzz run -s none "$t" "corpus-new/$t" "corpus/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1) >"$log" 2>&1 || rc=$?
    grep -E "^#[0-9]+ +(INITED|DONE)|^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|panicked|SUMMARY" "$log" || true
    if [ "$rc" != 0 ] || [ -n "$(ls -A "fuzz/artifacts/$t" 2>/dev/null)" ]; then
      echo "fuzz $t: failed (exit $rc); see $log and fuzz/artifacts/$t" >&2
      exit 1
    fi
  done
}

merge() {
  for t in "${TARGETS[@]}"; do
    local tmp; tmp="$(mktemp -d)"
    (cd fuzz && cargo +nightly fuzz run -s none "$t" "$tmp" "corpus/$t" "corpus-new/$t" -- -merge=1) >/dev/null 2>&1
    rm -rf "fuzz/corpus/$t" && mkdir -p "fuzz/corpus/$t" && cp "$tmp"/* "fuzz/corpus/$t/" && rm -rf "$tmp"
    echo "$t: $(find "fuzz/corpus/$t" -type f | wc -l) inputs"
  done
}

case "${1:-run}" in
  seed) seed ;;
  merge) merge ;;
  run) run "${2:-600}" ;;
  *) echo "usage: $0 [run [SECONDS] | seed | merge]" >&2; exit 2 ;;
esac

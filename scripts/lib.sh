# shellcheck shell=bash
# Shared by the scripts (sourced, not run).

# cargo_target_dir: where cargo puts this workspace's builds, whatever
# CARGO_TARGET_DIR, a cargo config or the default (./target) says: the
# target directory `cargo metadata` reports.
cargo_target_dir() {
  local dir
  dir="$(cargo metadata --format-version 1 --no-deps --offline 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')" || true
  [ -n "$dir" ] || { echo "cargo metadata did not name the target directory" >&2; return 1; }
  echo "$dir"
}

# kubectl_first: the kubectl that came with the pinned Kubernetes binaries
# (scripts/fetch-artifacts.sh: at the control plane's version) ahead of
# any other on PATH, when one came.
kubectl_first() {
  if [ -n "${K8S_BIN_DIR:-}" ] && [ -x "$K8S_BIN_DIR/kubectl" ]; then
    PATH="$K8S_BIN_DIR:$PATH"
    export PATH
  fi
}

# own_services: MariaDB and RabbitMQ of this script's own
# (scripts/services.sh: free ports, data in a temporary folder), their
# variables exported for what it runs, stopped when it exits (an EXIT trap:
# for scripts that set none of their own). Servers the MAGNUM_RS_*
# variables name already are used instead.
own_services() {
  local e
  _own_services_dir="$(mktemp -d -t mc-services-XXXXXX)"
  trap 'scripts/services.sh down "$_own_services_dir"' EXIT
  e="$(scripts/services.sh up "$_own_services_dir" | tail -n 1)" || return 1
  eval "$e"
  export MAGNUM_RS_DB_SERVER MAGNUM_RS_RABBITMQ_PORT MAGNUM_RS_RABBITMQ_NODE MAGNUM_RS_RABBITMQ_HOME \
    MAGNUM_RS_RABBITMQ_EPMD_PORT
}

#!/usr/bin/env bash
# Make this machine able to run the conductor and its tests: RabbitMQ's and
# MariaDB's programs installed (scripts/services.sh runs instances of the
# demo's and the tests' own from them), what scripts/k8s-up.sh needs for real
# Kubernetes control planes (etcd, kubectl, the verified kube-apiserver,
# kube-controller-manager and CRDs of scripts/fetch-artifacts.sh), cached
# Python venvs with the real Magnum 23.0.0 (client, objects, migrations) and,
# for the tests, everything else they judge with (Magnum 22, Keystone,
# magnum-api, Neutron, Octavia, Cinder, tempest, ansible, Prometheus, the
# Helm engine and the pinned charts of scripts/fetch-charts.sh).
#
#   scripts/setup-env.sh          everything (scripts/test-all.sh)
#   scripts/setup-env.sh --demo   only what scripts/demo.sh runs
#
# Idempotent: a second run installs nothing. Each step it does is printed
# with the seconds since it began. Prints `export MAGNUM_VENV=... ...` as its
# last line.
set -euo pipefail
demo=0
case "${1:-}" in
  "") ;;
  --demo) demo=1 ;;
  *) echo "usage: setup-env.sh [--demo]" >&2; exit 2 ;;
esac

VENV="${MAGNUM_VENV:-$HOME/.cache/magnum-conductor-rs/venv-magnum-23.0.0}"
PY_REQS="magnum==23.0.0 python-magnumclient==5.0.0 pytest==8.4.2 pytest-xdist==3.8.0 PyMySQL==1.2.4"
VENV22="${MAGNUM22_VENV:-$HOME/.cache/magnum-conductor-rs/venv-magnum-22.0.0}"
# A real Keystone for the tests (scripts/keystone.sh; PyMySQL: the run's
# shared Keystone keeps its database in MariaDB, as deployments do).
KS_VENV="${KEYSTONE_VENV:-$HOME/.cache/magnum-conductor-rs/venv-keystone-30.0.0}"
KS_REQS="keystone==30.0.0 gunicorn==23.0.0 PyMySQL==1.2.4"
PY22_REQS="magnum==22.0.0 PyMySQL==1.2.4"
# magnum-api environments with our driver package (deploy/magnum-driver)
# installed, as an operator installs it: the end-to-end tests run the real
# magnum-api and the openstack CLI from these. Kept apart from the venvs
# above, whose Magnum must not see our driver.
API_VENV="${MAGNUM_API_VENV:-$HOME/.cache/magnum-conductor-rs/venv-api-23.0.0}"
API_REQS="magnum==23.0.0 python-openstackclient==10.5.0 python-magnumclient==5.0.0 pytest==8.4.2 PyMySQL==1.2.4"
API22_VENV="${MAGNUM22_API_VENV:-$HOME/.cache/magnum-conductor-rs/venv-api-22.0.0}"
API22_REQS="magnum==22.0.0 pytest==8.4.2 PyMySQL==1.2.4"

log() { echo "[setup ${SECONDS}s] $*" >&2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# What this script needs of the machine, checked before anything else: a
# Debian-like system (apt-get, dpkg) for what is missing, and root or sudo
# to install it. Each missing need is said once, with what to do.
need_apt() {  # need_apt PACKAGE...: can they be installed here?
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    log "$* missing, and this machine has no apt-get/dpkg to install them with: install them (Debian package names), then run this again"
    exit 1
  fi
  if [ -n "$SUDO" ] && ! sudo -n true 2>/dev/null; then
    log "$* missing: installing them needs root or sudo without a password; install them (apt-get install $*), then run this again"
    exit 1
  fi
}

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    need_apt "${missing[@]}"
    log "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

command -v cargo >/dev/null 2>&1 || {
  log "cargo is missing: install Rust 1.88 or newer (https://rustup.rs), then run this again"
  exit 1
}
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_install python3-venv
command -v curl >/dev/null 2>&1 || apt_install curl
command -v xz >/dev/null 2>&1 || apt_install xz-utils
# A C toolchain: some of the workspace's dependencies build native code
# (aws-lc-sys, under rustls).
command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
# The pinned Kubernetes binaries and CRDs, verified, before anything starts:
# a missing or corrupt artifact stops here, naming it.
exports="$("$(dirname "$0")/fetch-artifacts.sh" | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
command -v rabbitmq-server >/dev/null 2>&1 || apt_install rabbitmq-server
command -v mariadbd >/dev/null 2>&1 || apt_install mariadb-server
# The real Kubernetes control planes of scripts/k8s-up.sh (tests, demo,
# benchmarks): etcd, kubectl (CRD installation), xz and openssl.
command -v etcd >/dev/null 2>&1 || apt_install etcd-server
# kubectl: the one that came with the pinned binaries (the release's server
# archive, or a mirror carrying it), at the control plane's version. Else
# the machine's, named when it is further than one minor from the control
# plane (Kubernetes' version skew policy); Debian's kubernetes-client
# (1.20) is not installed for it: eight minors behind.
if [ -x "$K8S_BIN_DIR/kubectl" ]; then
  kubectl_bin="$K8S_BIN_DIR/kubectl"
elif kubectl_bin="$(command -v kubectl)"; then
  minor="$("$kubectl_bin" version --client -o json 2>/dev/null \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+"))' 2>/dev/null || true)"
  case "$minor" in
    27 | 28 | 29) ;;
    *) log "kubectl: the machine's ($kubectl_bin, 1.${minor:-?}) is used: the artifacts' source carries none, and Kubernetes supports kubectl within one minor of the 1.28 control plane; a mirror carrying kubectl or the release's server archive gives the pinned one (docs/testing.md)" ;;
  esac
else
  log "kubectl: none came with the Kubernetes binaries (their source carried none) and none is installed: use the release's server archive (dl.k8s.io, the default home), a mirror carrying kubectl, or install a kubectl 1.27-1.29 (docs/testing.md)"
  exit 1
fi
command -v openssl >/dev/null 2>&1 || apt_install openssl
command -v setsid >/dev/null 2>&1 || apt_install util-linux
# Lint of scripts/ (scripts/test-all.sh).
[ "$demo" = 1 ] || command -v shellcheck >/dev/null 2>&1 || apt_install shellcheck
# Network namespaces for magnum-capi-proxy's test (proxy/tests/netns.rs).
[ "$demo" = 1 ] || command -v ip >/dev/null 2>&1 || apt_install iproute2
# callgrind counts the instructions per RPC message the suite checks
# (tests/python/test_benchmarks.py).
[ "$demo" = 1 ] || command -v callgrind_control >/dev/null 2>&1 || apt_install valgrind

# MariaDB and RabbitMQ are installed for their programs only: the demo and
# the test command start instances of their own (scripts/services.sh); the
# machine's services are neither started nor used here.

make_venv() {  # make_venv DIR "REQS": (re)create when missing or its requirements changed
  local dir="$1" reqs="$2" stamp="$1/.requirements"
  if [ ! -x "$dir/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$reqs" ]; then
    log "creating the Python venv at $dir ($reqs)"
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --upgrade pip >/dev/null
    # shellcheck disable=SC2086
    "$dir/bin/pip" install -q $reqs >/dev/null
    echo "$reqs" > "$stamp"
  fi
}
install_driver() {  # install_driver DIR: (re)install deploy/magnum-driver when it changed
  local dir="$1" stamp="$1/.driver" src sum tmp
  src="$(cd "$(dirname "$0")/.." && pwd)/deploy/magnum-driver"
  sum="$(cd "$src" && find pyproject.toml magnum_capi_rust -name '*.py' -o -name '*.toml' | sort | xargs sha256sum | sha256sum | cut -c1-16)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    log "installing the magnum-api driver package into $dir"
    # Built from a copy: setuptools leaves build/ and *.egg-info behind.
    tmp="$(mktemp -d)"
    cp -r "$src/pyproject.toml" "$src/README.md" "$src/magnum_capi_rust" "$tmp/"
    "$dir/bin/pip" install -q --no-deps --force-reinstall "$tmp" >/dev/null
    rm -rf "$tmp"
    echo "$sum" > "$stamp"
  fi
}
# The demo runs Magnum 23.0.0's client code, a control plane and capi-sim's
# CAAPH with the real Helm engine (HELM_VENV; tests/capi-sim/src/helm.rs,
# tests/python/helm_charts.py) over the pinned upstream charts
# (scripts/fetch-charts.sh); nothing else.
make_venv "$VENV" "$PY_REQS"
HELM_VENV="${HELM_VENV:-$HOME/.cache/magnum-conductor-rs/venv-helm-python-sdk-0.2.2}"
make_venv "$HELM_VENV" "helm-python-sdk==0.2.2"
charts_export="$("$(dirname "$0")/fetch-charts.sh" | tail -n 1)"  # a failure stops here
eval "$charts_export"
if [ "$demo" = 1 ]; then
  echo "export MAGNUM_VENV=$VENV HELM_VENV=$HELM_VENV HELM_CHARTS_DIR=$HELM_CHARTS_DIR K8S_BIN_DIR=$K8S_BIN_DIR CAPI_CRDS_DIR=$CAPI_CRDS_DIR"
  exit 0
fi

# Prometheus + promtool (tests/python/test_prometheus.py): Debian's package,
# unpacked into the cache rather than installed (no service is started).
PROM_DIR="${PROMETHEUS_DIR:-$HOME/.cache/magnum-conductor-rs/prometheus}"
if [ ! -x "$PROM_DIR/usr/bin/prometheus" ] || [ ! -x "$PROM_DIR/usr/bin/promtool" ]; then
  log "fetching Prometheus (Debian package, unpacked into $PROM_DIR)"
  tmp="$(mktemp -d)"; chmod 777 "$tmp"
  (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 || { $SUDO apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; })
  mkdir -p "$PROM_DIR"
  dpkg -x "$tmp"/prometheus_*.deb "$PROM_DIR"
  rm -rf "$tmp"
fi
# ansible-core for the deploy role's test (tests/python/test_ansible.py).
ANS_VENV="${ANSIBLE_VENV:-$HOME/.cache/magnum-conductor-rs/venv-ansible-core-2.17}"
ANS_REQS="ansible-core>=2.17,<2.18"
# ansible-lint, as openstack-ansible's role CI runs it (production profile);
# apart from the role test's venv (ansible-lint would move its ansible-core).
LINT_VENV="${ANSIBLE_LINT_VENV:-$HOME/.cache/magnum-conductor-rs/venv-ansible-lint-25.1.3}"
LINT_REQS="ansible-lint==25.1.3 ansible-core>=2.17,<2.18"
# Magnum's own API test suite (tests/python/test_tempest.py): tempest and
# the plugin, pinned, in a venv of their own.
TEMPEST_VENV="${TEMPEST_VENV:-$HOME/.cache/magnum-conductor-rs/venv-tempest-47.0.0}"
TEMPEST_REQS="tempest==47.0.0 magnum-tempest-plugin==2.12.0"
# Real OpenStack services for the cloud clean-up tests
# (tests/python/openstack_services.py): Neutron's and Octavia's API servers,
# of the release Magnum 23.0.0 belongs to, with the suite's Octavia provider
# driver (tests/openstack/octavia-test-provider); apart from the Magnum
# venvs (their oslo pins differ).
OS_VENV="${OPENSTACK_VENV:-$HOME/.cache/magnum-conductor-rs/venv-openstack-neutron29-octavia19}"
OS_REQS="neutron==29.0.0 octavia==19.0.0 PyMySQL==1.2.4 gunicorn==23.0.0"
make_venv "$OS_VENV" "$OS_REQS"
# Cinder (API, scheduler, volume service with Cinder's own storage-free
# test driver, which imports `fixtures`), in a venv of its own.
CINDER_VENV="${CINDER_VENV:-$HOME/.cache/magnum-conductor-rs/venv-cinder-29.0.0}"
CINDER_REQS="cinder==29.0.0 fixtures==4.3.2 PyMySQL==1.2.4"
make_venv "$CINDER_VENV" "$CINDER_REQS"
# Glance's and Nova's APIs (images, flavors, keypairs: what magnum-api
# validates and tempest makes), of the same release, in a venv of their own.
NOVA_GLANCE_VENV="${NOVA_GLANCE_VENV:-$HOME/.cache/magnum-conductor-rs/venv-nova34-glance33}"
NOVA_GLANCE_REQS="nova==34.0.0 glance==33.0.0 PyMySQL==1.2.4 gunicorn==23.0.0"
make_venv "$NOVA_GLANCE_VENV" "$NOVA_GLANCE_REQS"
# Manila's API (the share types of `manila_csi_share_network_id`), of the
# same release, in a venv of its own.
MANILA_VENV="${MANILA_VENV:-$HOME/.cache/magnum-conductor-rs/venv-manila-23.0.0}"
MANILA_REQS="manila==23.0.0 PyMySQL==1.2.4 gunicorn==23.0.0"
make_venv "$MANILA_VENV" "$MANILA_REQS"
provider_src="$(cd "$(dirname "$0")/.." && pwd)/tests/openstack/octavia-test-provider"
provider_sum="$(cd "$provider_src" && find . -name '*.py' -o -name '*.toml' | sort | xargs sha256sum | sha256sum | cut -c1-16)"
if [ "$(cat "$OS_VENV/.provider" 2>/dev/null)" != "$provider_sum" ]; then
  log "installing the suite's Octavia provider driver into $OS_VENV"
  tmp="$(mktemp -d)"
  cp -r "$provider_src/." "$tmp/"
  "$OS_VENV/bin/pip" install -q --no-deps --force-reinstall "$tmp" >/dev/null
  rm -rf "$tmp"
  echo "$provider_sum" > "$OS_VENV/.provider"
fi
make_venv "$VENV22" "$PY22_REQS"
make_venv "$KS_VENV" "$KS_REQS"
make_venv "$API_VENV" "$API_REQS"
make_venv "$API22_VENV" "$API22_REQS"
make_venv "$ANS_VENV" "$ANS_REQS"
make_venv "$LINT_VENV" "$LINT_REQS"
make_venv "$TEMPEST_VENV" "$TEMPEST_REQS"
# The plugin's copy_pod_logs.sh calls kubectl where devstack puts it: the
# one chosen above.
if [ "$(readlink -f /opt/stack/bin/kubectl 2>/dev/null)" != "$(readlink -f "$kubectl_bin")" ]; then
  log "linking /opt/stack/bin/kubectl to $kubectl_bin (devstack's path, for magnum-tempest-plugin)"
  $SUDO mkdir -p /opt/stack/bin
  $SUDO ln -sf "$kubectl_bin" /opt/stack/bin/kubectl
fi
install_driver "$API_VENV"
install_driver "$API22_VENV"
echo "export MAGNUM_VENV=$VENV MAGNUM22_VENV=$VENV22 KEYSTONE_VENV=$KS_VENV MAGNUM_API_VENV=$API_VENV MAGNUM22_API_VENV=$API22_VENV PROMETHEUS_DIR=$PROM_DIR ANSIBLE_VENV=$ANS_VENV ANSIBLE_LINT_VENV=$LINT_VENV TEMPEST_VENV=$TEMPEST_VENV OPENSTACK_VENV=$OS_VENV CINDER_VENV=$CINDER_VENV NOVA_GLANCE_VENV=$NOVA_GLANCE_VENV MANILA_VENV=$MANILA_VENV HELM_VENV=$HELM_VENV HELM_CHARTS_DIR=$HELM_CHARTS_DIR K8S_BIN_DIR=$K8S_BIN_DIR CAPI_CRDS_DIR=$CAPI_CRDS_DIR"

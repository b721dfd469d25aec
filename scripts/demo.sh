#!/usr/bin/env bash
# The conductor's main job, end to end on one machine: a real Kubernetes
# control plane as the management cluster (scripts/k8s-up.sh: kube-apiserver
# and kube-controller-manager v1.28.7 with the CAPI/CAPO/CAAPH CRDs of one
# line, fetched and verified by scripts/fetch-artifacts.sh),
# CAPI's controllers simulated by tests/capi-sim against it, the local
# RabbitMQ and a fresh MariaDB database with Magnum's schema. Magnum
# 23.0.0's own client code then drives one cluster the way magnum-api does:
#   template (Magnum's objects) -> cluster_create cast -> CREATE_COMPLETE
#   -> each addon's release (capi-sim's CAAPH: the pinned upstream chart,
#      rendered by the real Helm engine, installed in the workload cluster's
#      own real kube-apiserver)
#   -> `openstack coe cluster config` (get_ca_certificate + sign_certificate)
#   -> cluster_resize cast (workers 2 -> 4, then 4 -> 3 naming a node)
#   -> nodegroup_create cast (a second worker group) -> nodegroup_delete cast
#   -> cluster_upgrade call to a v1.31 template (control plane, then workers)
#   -> cluster_delete cast -> rows, keypairs and CAPI objects gone.
# Options: --line v1beta1|v1beta2 (default v1beta1). DEMO_BIN_DIR: run the
# magnum-conductor and capi-sim found there instead of building them
# (scripts/test-all.sh runs the demo of its own build that way, beside the
# builds that follow).
set -euo pipefail
cd "$(dirname "$0")/.."
line=v1beta1
[ "${1:-}" = "--line" ] && line="${2:?--line v1beta1|v1beta2}"
step() { echo "=== $* (at ${SECONDS}s)"; }
step "set-up: only what the demo runs (scripts/setup-env.sh --demo)"
exports="$(scripts/setup-env.sh --demo | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
export K8S_BIN_DIR CAPI_CRDS_DIR HELM_CHARTS_DIR
if [ -n "${DEMO_BIN_DIR:-}" ]; then
  bin="$DEMO_BIN_DIR"
  step "using $bin/magnum-conductor and $bin/capi-sim"
else
  step "cargo build: magnum-conductor and capi-sim"
  # The workspace selected, as scripts/test-all.sh builds: one feature
  # resolution, so neither command rebuilds the other's dependencies.
  cargo build --quiet --workspace --bin magnum-conductor --bin capi-sim
  bin="${CARGO_TARGET_DIR:-target}/debug"
fi
step "the demo"
work=$(mktemp -d)
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
vhost="demo-$$"
rabbitmqctl -q add_vhost "$vhost"
rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*'
db="magnum_demo_$$"
mysql -uroot -h127.0.0.1 -e "CREATE DATABASE \`$db\`"
pid="" sim=""
cleanup() {
  for p in $pid $sim; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  scripts/k8s-down.sh "$work/k8s" >/dev/null 2>&1 || true
  rabbitmqctl -q delete_vhost "$vhost" || true
  mysql -uroot -h127.0.0.1 -e "DROP DATABASE IF EXISTS \`$db\`" || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "--- management cluster: a real kube-apiserver with the $line CRDs (scripts/k8s-up.sh)"
scripts/k8s-up.sh "$work/k8s" --crds "$line" > "$work/k8s-up.log" 2>&1 \
  || { cat "$work/k8s-up.log"; exit 1; }
kc=(kubectl --kubeconfig "$work/k8s/kubeconfig")
echo "    $(grep -o -m1 'https://[^ ,}"]*' "$work/k8s/kubeconfig"), $("${kc[@]}" get crd -o name | wc -l) CRDs"
# A real kube-apiserver for the workload cluster too, into which capi-sim's
# CAAPH installs each addon's chart as the real Helm engine renders it.
"$bin/capi-sim" --kubeconfig "$work/k8s/kubeconfig" --line "$line" --tick-ms 100 \
  --workload-apiservers --helm-engine "$HELM_VENV/bin/python" --helm-script tests/helm_render.py \
  --ready-file "$work/sim.url" > "$work/sim.log" 2>&1 &
sim=$!
for _ in $(seq 1 300); do [ -s "$work/sim.url" ] && break; sleep 0.1; done
[ -s "$work/sim.url" ] || { cat "$work/sim.log"; exit 1; }
echo "    CAPI/CAPO/CAAPH controllers and webhooks simulated by capi-sim; a real apiserver per workload cluster"

cat > "$work/magnum.conf" <<CONF
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/$vhost
rpc_response_timeout = 30
[database]
connection = mysql+pymysql://root@127.0.0.1:3306/$db?charset=utf8
[certificates]
cert_manager_type = x509keypair
[metrics]
listen = 127.0.0.1:$metrics_port
[capi]
kubeconfig = $work/k8s/kubeconfig
# No OpenStack behind the demo: nothing to clean up there on delete.
cloud_cleanup = false
# Demo only: one shared application credential (see docs/lifecycle.md, "Credentials").
static_auth_url = https://keystone.example.com:5000/v3
static_application_credential_id = demo-application-credential
static_application_credential_secret = demo-secret
CONF
"$bin/magnum-conductor" --config-file "$work/magnum.conf" db-create
"$bin/magnum-conductor" --config-file "$work/magnum.conf" > "$work/conductor.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf "127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "127.0.0.1:$metrics_port/readyz" >/dev/null || { cat "$work/conductor.log"; exit 1; }

py() { "$MAGNUM_VENV/bin/python" "$@" 2> >(grep -v "Using RPC transport for notifications" >&2); }
lc() { py tests/python/lifecycle_client.py "$work/magnum.conf" "$@" | tail -n 1; }
field() { py -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

template=$(lc template '{"name": "k8s-v1.30", "coe": "kubernetes", "server_type": "vm", "cluster_distro": "ubuntu",
  "image_id": "ubuntu-2204-kube-v1.30.4", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
  "keypair_id": "mykey", "external_network_id": "public", "network_driver": "calico", "master_lb_enabled": true,
  "labels": {"kube_tag": "v1.30.4"}}' | field 'd["uuid"]')
echo "--- cluster template $template (inserted with Magnum's objects)"
uuid=$(lc create "$template" '{"master_count": 3, "node_count": 2, "cluster": {"name": "demo"}}' | field 'd["uuid"]')
echo "--- cluster_create cast for cluster $uuid (3 masters, 2 workers)"
last=""
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
  got=$(lc get "$uuid")
  now=$(echo "$got" | field '"%s  %s" % (d["cluster"]["status"], d["cluster"]["status_reason"] or "")')
  [ "$now" != "$last" ] && echo "    $now" && last=$now
  case "$now" in CREATE_COMPLETE*|CREATE_FAILED*) break ;; esac
  sleep 0.5
done
echo "$got" | field '"    api_address=%s coe_version=%s health=%s stack_id=%s" % (d["cluster"]["api_address"], d["cluster"]["coe_version"], d["cluster"]["health_status"], d["cluster"]["stack_id"])'
echo "$got" | field '"\n".join("    nodegroup %s: %s %s" % (n["name"], n["status"], n["node_addresses"]) for n in d["nodegroups"])'
case "$last" in CREATE_COMPLETE*) ;; *) echo "create did not complete"; tail -20 "$work/conductor.log"; exit 1 ;; esac

echo "--- the addons: each HelmChartProxy's chart at its version, rendered by the real Helm engine and installed in the workload cluster's apiserver"
curl -sf "$(cat "$work/sim.url")/_sim/releases" > "$work/releases.json"
"${kc[@]}" get helmreleaseproxies.addons.cluster.x-k8s.io -A -o json > "$work/hrps.json"
py - "$work/releases.json" "$work/hrps.json" <<'PY'
import json, sys
sim = json.load(open(sys.argv[1]))["releases"]
for h in sorted(json.load(open(sys.argv[2]))["items"], key=lambda h: h["spec"]["releaseName"]):
    s, st = h["spec"], h.get("status", {})
    r = sim.get(f"{h['metadata']['namespace']}/{h['metadata']['name']}") or {}
    print(f"    {s['releaseName']:<16} {s['chartName']} {s['version']:<8} -> {s['namespace']:<16} "
          f"{st.get('status')} revision {st.get('revision')}, {r.get('objects')} objects")
    if st.get("status") != "deployed":
        sys.exit(f"release {s['releaseName']} is not deployed: {r.get('error')}")
PY

echo "--- openstack coe cluster config (python-magnumclient's flow)"
py tests/python/cert_client.py "$work/magnum.conf" coe-config "$uuid" "$work/kube" | tail -n 1 \
  | field '"    kubeconfig written: %s (client certificate signed by the cluster CA)" % d["config"]'
grep -E "server:|current-context" "$work/kube/config" | sed 's/^/    /'

# wait_update <what>: follow the cluster until it leaves UPDATE_IN_PROGRESS.
wait_update() {
  local last="" now
  local deadline=$((SECONDS + 180))
  while [ $SECONDS -lt $deadline ]; do
    got=$(lc get "$uuid")
    now=$(echo "$got" | field '"%s  %s" % (d["cluster"]["status"], d["cluster"]["status_reason"] or "")')
    [ "$now" != "$last" ] && echo "    $now" && last=$now
    case "$now" in UPDATE_COMPLETE*|UPDATE_FAILED*) break ;; esac
    sleep 0.5
  done
  echo "$got" | field '"\n".join("    nodegroup %s: %s count=%s version=%s %s" % (n["name"], n["status"], n["node_count"], n["version"], n["node_addresses"]) for n in d["nodegroups"])'
  case "$last" in UPDATE_COMPLETE*) ;; *) echo "$1 did not complete"; tail -20 "$work/conductor.log"; exit 1 ;; esac
}

echo "--- cluster_resize cast: default-worker 2 -> 4"
lc resize "$uuid" 4 '[]' > /dev/null
wait_update resize
"${kc[@]}" get machines.cluster.x-k8s.io -A -o wide | sed 's/^/    /'
victim=$("${kc[@]}" get machines.cluster.x-k8s.io -A -l magnum.openstack.org/nodegroup=default-worker \
  -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort | head -n 1)
echo "--- cluster_resize cast: default-worker 4 -> 3, nodes_to_remove=[$victim]"
lc resize "$uuid" 3 "[\"$victim\"]" > /dev/null
wait_update resize

# wait_group <name> <status|gone>: follow one nodegroup.
wait_group() {
  local last="" now
  local deadline=$((SECONDS + 180))
  while [ $SECONDS -lt $deadline ]; do
    now=$(lc get "$uuid" | field 'next(("%s  %s %s" % (n["status"], n["status_reason"] or "", n["node_addresses"]) for n in d["nodegroups"] if n["name"] == "'"$1"'"), "gone")')
    [ "$now" != "$last" ] && echo "    $1: $now" && last=$now
    case "$now" in "$2"*) return 0 ;; *FAILED*) break ;; esac
    sleep 0.5
  done
  echo "nodegroup $1 did not reach $2"; tail -20 "$work/conductor.log"; exit 1
}
echo "--- nodegroup_create cast: extra (1 node, its own MachineDeployment)"
lc ng-create "$uuid" '{"name": "extra", "node_count": 1}' > /dev/null
wait_group extra CREATE_COMPLETE
echo "--- nodegroup_delete cast: extra"
lc ng-delete "$uuid" extra > /dev/null
wait_group extra gone

template131=$(lc template '{"name": "k8s-v1.31", "coe": "kubernetes", "server_type": "vm", "cluster_distro": "ubuntu",
  "image_id": "ubuntu-2204-kube-v1.31.2", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
  "keypair_id": "mykey", "external_network_id": "public", "network_driver": "calico", "master_lb_enabled": true,
  "labels": {"kube_tag": "v1.31.2"}}' | field 'd["uuid"]')
echo "--- cluster_upgrade call to template k8s-v1.31 ($template131), max_batch_size 2"
lc upgrade "$uuid" "$template131" 2 | field '"    reply: " + ("error %s: %s" % (d["error"], d["message"]) if "error" in d else "ok")'
wait_update upgrade
echo "$got" | field '"    coe_version=%s cluster_template_id=%s kube_tag=%s" % (d["cluster"]["coe_version"], d["cluster"]["cluster_template_id"], d["cluster"]["labels"]["kube_tag"])'

echo "--- cluster_delete cast"
lc delete "$uuid" > /dev/null
last=""
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
  got=$(lc get "$uuid")
  now=$(echo "$got" | field '"%s  %s" % (d["cluster"]["status"], d["cluster"]["status_reason"] or "") if d["cluster"] else "gone"')
  [ "$now" != "$last" ] && echo "    $now" && last=$now
  [ "$now" = "gone" ] && break
  sleep 0.5
done
echo "$got" | field '"    rows left: nodegroups=%d x509keypairs=%d" % (len(d["nodegroups"]), d["x509keypairs"])'
[ "$last" = "gone" ] || { echo "delete did not complete"; tail -20 "$work/conductor.log"; exit 1; }
echo "    CAPI objects left: $("${kc[@]}" get clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io -A -o name | wc -l)"
echo "--- metrics"
curl -s "127.0.0.1:$metrics_port/metrics" | grep -E '^magnum_conductor_(cluster_operations|status_writes|watch_events)_total' | sed 's/^/    /'

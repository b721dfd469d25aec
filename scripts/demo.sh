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
# MariaDB and RabbitMQ are the demo's own (scripts/services.sh: started in
# its folder on free ports, stopped at the end; the machine's, if any, are
# neither needed nor touched); MAGNUM_RS_DB_SERVER and the
# MAGNUM_RS_RABBITMQ_* variables point it at running ones instead.
# Options: --line v1beta1|v1beta2 (default v1beta1). The binaries are
# built, and found where cargo puts them (CARGO_TARGET_DIR or a cargo
# config respected), then run from a copy. DEMO_BIN_DIR: run the
# magnum-conductor and capi-sim found there instead of building them.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
line=v1beta1
[ "${1:-}" = "--line" ] && line="${2:?--line v1beta1|v1beta2}"
step() { echo "=== $* (at ${SECONDS}s)"; }
step "set-up: only what the demo runs (scripts/setup-env.sh --demo)"
exports="$(scripts/setup-env.sh --demo | tail -n 1)"  # a failure stops here (eval of nothing would not)
eval "$exports"
export K8S_BIN_DIR CAPI_CRDS_DIR HELM_CHARTS_DIR
kubectl_first
work=$(mktemp -d)
pid="" sim="" vhost="" db=""
cleanup() {
  for p in $pid $sim; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  scripts/k8s-down.sh "$work/k8s" >/dev/null 2>&1 || true
  if [ -n "$vhost" ]; then scripts/services.sh vhost delete "$vhost" || true; fi
  if [ -n "$db" ]; then scripts/services.sh sql "DROP DATABASE IF EXISTS \`$db\`" || true; fi
  scripts/services.sh down "$work/services" || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin"
if [ -n "${DEMO_BIN_DIR:-}" ]; then
  step "using $DEMO_BIN_DIR/magnum-conductor and $DEMO_BIN_DIR/capi-sim"
  src="$DEMO_BIN_DIR"
else
  step "cargo build: magnum-conductor and capi-sim (a first build takes 8-15 minutes on 2 cores)"
  # The workspace selected, as scripts/test-all.sh builds: one feature
  # resolution, so neither command rebuilds the other's dependencies.
  cargo build --workspace --bin magnum-conductor --bin capi-sim
  src="$(cargo_target_dir)/debug"
fi
# A copy: a later build may relink the target folder's while they run.
cp "$src/magnum-conductor" "$src/capi-sim" "$work/bin/"
bin="$work/bin"
step "MariaDB and RabbitMQ of the demo's own (scripts/services.sh)"
svc_exports="$(scripts/services.sh up "$work/services" | tail -n 1)"  # a failure stops here
eval "$svc_exports"
step "the demo"
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
vhost="demo-$$"
scripts/services.sh vhost add "$vhost"
db="magnum_demo_$$"
scripts/services.sh sql "CREATE DATABASE \`$db\`"

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
transport_url = rabbit://guest:guest@127.0.0.1:$MAGNUM_RS_RABBITMQ_PORT/$vhost
rpc_response_timeout = 30
[database]
connection = $MAGNUM_RS_DB_SERVER/$db?charset=utf8
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
echo "--- what the conductor counted (its Prometheus metrics)"
curl -s "127.0.0.1:$metrics_port/metrics" > "$work/metrics.txt"
py - "$work/metrics.txt" <<'PY'
import re, sys
ops, writes, events = {}, 0, {}
for line in open(sys.argv[1]):
    m = re.match(r'magnum_conductor_cluster_operations_total\{operation="(\w+)",outcome="(\w+)"\} (\S+)', line)
    if m and float(m.group(3)):
        ops.setdefault(m.group(1), []).append(f"{m.group(2)} {float(m.group(3)):g}")
    m = re.match(r"magnum_conductor_status_writes_total (\S+)", line)
    if m:
        writes = float(m.group(1))
    m = re.match(r'magnum_conductor_watch_events_total\{kind="(\w+)"\} (\S+)', line)
    if m:
        events[m.group(1)] = float(m.group(2))
print("    operations (magnum_conductor_cluster_operations_total): 'started' when the conductor began one;")
print("    each day-2 operation (resize, node groups, upgrade) ends as one 'update complete' (the cluster left")
print("    UPDATE_IN_PROGRESS), the delete as 'delete complete'; 'repair applied': the status pass wrote the")
print("    topology the rows ask for to the management cluster once more:")
for op, outcomes in sorted(ops.items()):
    print(f"      {op:<10} {', '.join(outcomes)}")
print(f"    status passes that changed Magnum's rows: {writes:g}; watch events from the management "
      f"cluster: {sum(events.values()):g} ({len(events)} kinds)")
PY
step "demo passed: cluster $uuid created, its addons deployed, resized, a node group added and removed, upgraded to v1.31 and deleted ($line)"

#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, for the demo, the tests and
# the benchmarks: etcd, kube-apiserver v1.28.7 and (unless --no-kcm)
# kube-controller-manager with the garbage-collector, namespace and
# service-account controllers, all on free 127.0.0.1 ports, state under DIR;
# optionally the CRDs of one CAPI release line, labelled as clusterctl labels
# them.
#
#   scripts/k8s-up.sh DIR [--crds v1beta1|v1beta2] [--no-kcm]
#       -> DIR/kubeconfig (admin, system:masters), DIR/pki, DIR/env
#          (ETCD_PID APISERVER_PID KCM_PID ETCD_PORT APISERVER_PORT KUBECONFIG
#           K8S_BIN_DIR CRDS)
#   scripts/k8s-down.sh DIR
#
#   v1beta1: cluster-api v1.10.10 + CAPO v0.12.7 + CAAPH v0.4.2
#   v1beta2: cluster-api v1.14.0 + CAPO v0.14.7 + CAAPH v0.6.4
#
# K8S_APISERVER_ARGS (space-separated) are added to kube-apiserver's flags (the
# benchmarks try its watch-cache flags: scripts/bench-status.sh --apiserver-arg).
# The binaries and CRDs come from K8S_BIN_DIR and CAPI_CRDS_DIR; when either
# is unset, scripts/fetch-artifacts.sh provides them (verified, cached).
# Needs etcd, kubectl, openssl, curl and python3 (scripts/setup-env.sh
# installs them).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage="usage: k8s-up.sh DIR [--crds v1beta1|v1beta2] [--no-kcm]"
dir="${1:?$usage}"; shift
crds="" kcm=1
while [ $# -gt 0 ]; do
  case "$1" in
    --crds) crds="${2:?$usage}"; shift 2 ;;
    --no-kcm) kcm=0; shift ;;
    *) echo "k8s-up.sh: unknown option $1; $usage" >&2; exit 2 ;;
  esac
done
case "$crds" in
  "") ;;
  v1beta1) sets="cluster-api-v1.10.10 cluster-api-provider-openstack-v0.12.7 cluster-api-addon-provider-helm-v0.4.2"
           infra_contract=v1alpha7_v1beta1 ;;
  v1beta2) sets="cluster-api-v1.14.0 cluster-api-provider-openstack-v0.14.7 cluster-api-addon-provider-helm-v0.6.4"
           infra_contract=v1beta1 ;;
  *) echo "k8s-up.sh: --crds $crds: expected v1beta1 or v1beta2" >&2; exit 2 ;;
esac
if [ -z "${K8S_BIN_DIR:-}" ] || { [ -n "$crds" ] && [ -z "${CAPI_CRDS_DIR:-}" ]; }; then
  exports="$("$here/fetch-artifacts.sh" | tail -n 1)"  # a failure stops here (eval of nothing would not)
  eval "$exports"
fi
# The kubectl that came with the pinned binaries (at their version), when one did.
if [ -x "$K8S_BIN_DIR/kubectl" ]; then PATH="$K8S_BIN_DIR:$PATH"; fi
for tool in etcd kubectl openssl curl python3; do
  command -v "$tool" >/dev/null || { echo "k8s-up.sh: $tool is missing (scripts/setup-env.sh --demo installs it)" >&2; exit 1; }
done
mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"
pki="$dir/pki"

# Certificates: a CA, the apiserver's serving certificate, an admin client
# (system:masters) and the service-account signing key. Kept across restarts.
if [ ! -f "$pki/sa.pub" ]; then
  mkdir -p "$pki"
  (
    cd "$pki"
    ossl() { openssl "$@" 2>/dev/null; }
    ossl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=magnum-conductor-rs test CA"
    cat > serving.cnf <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = kube-apiserver
[ext]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, IP:127.0.0.1, IP:10.96.0.1
CNF
    ossl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -config serving.cnf
    ossl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 \
      -extensions ext -extfile serving.cnf
    printf 'basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = clientAuth\n' > client.cnf
    ossl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin"
    ossl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 -extfile client.cnf
    ossl genrsa -out sa.key 2048
    ossl rsa -in sa.key -pubout -out sa.pub
  ) || { echo "k8s-up.sh: openssl failed to make the certificates under $pki" >&2; exit 1; }
fi

# Ports are picked free and then released, so another process (CI runs three
# test processes at once) can take one before etcd or kube-apiserver binds it:
# when either exits before the API is ready, start both again on new ports
# (K8S_START_ATTEMPTS, 3), keeping each failed try's logs as *.log.N.
start_once() {
  read -r etcd_port peer_port api_port kcm_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
  etcd --name k8s --data-dir "$dir/etcd" --log-level warn --quota-backend-bytes 4294967296 \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "k8s=http://127.0.0.1:$peer_port" > "$dir/etcd.log" 2>&1 &
  echo "ETCD_PID=$!" > "$dir/env"
  read -r -a extra_args <<< "${K8S_APISERVER_ARGS:-}"
  "$K8S_BIN_DIR/kube-apiserver" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --etcd-servers="http://127.0.0.1:$etcd_port" --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local --authorization-mode=RBAC \
    --service-cluster-ip-range=10.96.0.0/12 --endpoint-reconciler-type=none --profiling=false --v=1 ${extra_args[@]+"${extra_args[@]}"} \
    > "$dir/kube-apiserver.log" 2>&1 &
  {
    echo "APISERVER_PID=$!"
    echo "ETCD_PORT=$etcd_port"
    echo "APISERVER_PORT=$api_port"
    echo "KUBECONFIG=$dir/kubeconfig"
    echo "K8S_BIN_DIR=$K8S_BIN_DIR"
  } >> "$dir/env"
  cat > "$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: k8s
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: k8s
  context: {cluster: k8s, user: admin}
current-context: k8s
KC
}

readyz() {
  curl -sf -m 2 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$api_port/readyz" > /dev/null 2>&1
}
# A loaded machine (CI runs three test processes on two cores) has taken
# more than a minute: wait up to K8S_READY_TIMEOUT seconds (180) in all.
# Returns 0 when ready, 1 (both stopped) when kube-apiserver or etcd exited.
wait_ready() {
  local api_pid etcd_pid pid
  api_pid=$(sed -n 's/^APISERVER_PID=//p' "$dir/env")
  etcd_pid=$(sed -n 's/^ETCD_PID=//p' "$dir/env")
  until readyz; do
    for pid in "$api_pid" "$etcd_pid"; do
      kill -0 "$pid" 2> /dev/null || { kill "$api_pid" "$etcd_pid" 2> /dev/null; wait "$api_pid" "$etcd_pid" 2> /dev/null; return 1; }
    done
    [ "$SECONDS" -lt "$deadline" ] || { echo "k8s-up.sh: kube-apiserver not ready after $ready_timeout s; see $dir/kube-apiserver.log and $dir/etcd.log" >&2; exit 1; }
    sleep 0.25
  done
}

ready_timeout=${K8S_READY_TIMEOUT:-180}
deadline=$((SECONDS + ready_timeout))
attempts=${K8S_START_ATTEMPTS:-3}
attempt=1
while :; do
  start_once
  wait_ready && break
  if [ "$attempt" -ge "$attempts" ]; then
    echo "k8s-up.sh: kube-apiserver or etcd exited ($attempt tries); see $dir/kube-apiserver.log and $dir/etcd.log" >&2
    exit 1
  fi
  echo "k8s-up.sh: kube-apiserver or etcd exited (try $attempt); starting both again on new ports" >&2
  mv "$dir/etcd.log" "$dir/etcd.log.$attempt"
  mv "$dir/kube-apiserver.log" "$dir/kube-apiserver.log.$attempt"
  rm -rf "$dir/etcd"
  attempt=$((attempt + 1))
done

if [ "$kcm" = 1 ]; then
  "$K8S_BIN_DIR/kube-controller-manager" --kubeconfig="$dir/kubeconfig" \
    --authentication-kubeconfig="$dir/kubeconfig" --authorization-kubeconfig="$dir/kubeconfig" \
    --authentication-skip-lookup=true --bind-address=127.0.0.1 --secure-port="$kcm_port" \
    --controllers=garbagecollector,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --use-service-account-credentials=false --leader-elect=false --v=1 \
    > "$dir/kube-controller-manager.log" 2>&1 &
  echo "KCM_PID=$!" >> "$dir/env"
fi

if [ -n "$crds" ]; then
  kc=(kubectl --kubeconfig "$dir/kubeconfig")
  files=()
  for s in $sets; do
    [ -d "$CAPI_CRDS_DIR/$s" ] || { echo "k8s-up.sh: $CAPI_CRDS_DIR/$s is missing (scripts/fetch-artifacts.sh)" >&2; exit 1; }
    files+=(-f "$CAPI_CRDS_DIR/$s")
  done
  "${kc[@]}" apply --server-side --force-conflicts --field-manager=crd-install "${files[@]}" > /dev/null
  "${kc[@]}" wait --for=condition=Established --timeout=120s crd --all > /dev/null
  # The contract labels the providers' release kustomizations add (clusterctl
  # installs them so): CAPI finds a provider's API version through them.
  mapfile -t cp < <("${kc[@]}" get crd -o name | grep -E '\.(controlplane|bootstrap)\.cluster\.x-k8s\.io$')
  mapfile -t infra < <("${kc[@]}" get crd -o name | grep -E '\.infrastructure\.cluster\.x-k8s\.io$')
  "${kc[@]}" label --overwrite "${cp[@]}" cluster.x-k8s.io/v1beta1=v1beta1 > /dev/null
  "${kc[@]}" label --overwrite "${infra[@]}" "cluster.x-k8s.io/v1beta1=$infra_contract" > /dev/null
  echo "CRDS=$crds" >> "$dir/env"
fi
cat "$dir/env"

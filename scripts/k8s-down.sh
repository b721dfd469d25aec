#!/usr/bin/env bash
# Stop what scripts/k8s-up.sh started in DIR (kube-controller-manager,
# kube-apiserver, etcd: SIGTERM, then SIGKILL after 10 s) and remove its data.
set -u
dir="${1:?usage: k8s-down.sh DIR}"
[ -f "$dir/env" ] || exit 0
# The controller manager first, etcd last.
pids=""
for key in KCM_PID APISERVER_PID ETCD_PID; do
  pids="$pids $(sed -n "s/^$key=//p" "$dir/env")"
done
for p in $pids; do kill "$p" 2>/dev/null; done
for p in $pids; do
  for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$p" 2>/dev/null
done
rm -rf "$dir/etcd" "$dir/env"

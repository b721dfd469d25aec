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
# Only a process still started from DIR (its command line names DIR): one
# that exited already left its PID free, and on a busy machine (pid_max
# 32768, thousands of processes a test run) another process may hold it
# now; a stale PID once killed another test's magnum-api.
ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "$dir"; }
live=""
for p in $pids; do
  # SIGCONT after SIGTERM: a parked control plane's processes (stopped
  # between a test process's modules, tests/python/k8s.py) act on the
  # SIGTERM only once continued, not 10 s later on the SIGKILL.
  if ours "$p"; then live="$live $p"; kill "$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; fi
done
for p in $live; do
  for _ in $(seq 1 40); do ours "$p" || break; sleep 0.25; done
  ! ours "$p" || kill -9 "$p" 2>/dev/null
done
rm -rf "$dir/etcd" "$dir/env"

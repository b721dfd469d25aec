#!/usr/bin/env bash
# The upstream artifacts the tests, the demo and the benchmarks run: the
# Kubernetes control plane (kube-apiserver and kube-controller-manager
# v1.28.7, linux/amd64) and the CRDs of the two CAPI release lines
# (scripts/artifacts.lock). Taken from ../shared when it is beside the clone
# (this team's machines: no network), else fetched from their upstream homes
# (or a mirror) into the user's cache, and verified before anything uses
# them. Prints `export K8S_BIN_DIR=... CAPI_CRDS_DIR=...` as its last line.
#
#   K8S_BIN_DIR, CAPI_CRDS_DIR   use these folders as they are
#   MAGNUM_RS_ARTIFACTS_CACHE    where fetched artifacts are kept
#                                (default ~/.cache/magnum-conductor-rs/artifacts)
#   MAGNUM_RS_ARTIFACTS_MIRROR   a base URL (http://, https://, file://) or a
#                                folder with the upstream layout:
#       kubernetes/release/v1.28.7/bin/linux/amd64/<binary> and <binary>.sha256
#       github/<repository>/<tag>/<path>  (as in scripts/artifacts.lock)
#   default homes: https://dl.k8s.io and https://raw.githubusercontent.com
#
# A download that fails or does not match stops here, naming the artifact,
# where it came from and the expected and actual checksums.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=v1.28.7
LOCK="$PWD/scripts/artifacts.lock"
CACHE="${MAGNUM_RS_ARTIFACTS_CACHE:-$HOME/.cache/magnum-conductor-rs/artifacts}"
SHARED="$(cd .. && pwd)/shared"
MIRROR="${MAGNUM_RS_ARTIFACTS_MIRROR:-}"
if [ -n "$MIRROR" ]; then
  HINT="check the mirror MAGNUM_RS_ARTIFACTS_MIRROR names: it should serve the upstream layout (docs/testing.md)"
else
  HINT="to provide it by hand, put the upstream layout in a folder (or behind a URL) and set MAGNUM_RS_ARTIFACTS_MIRROR to it (docs/testing.md)"
fi

# A mirror URL may carry credentials (https://user:password@host/...):
# every message shows it without them.
log() { echo "[artifacts] $*" | sed -E 's#(://)[^/@ ]+@#\1***@#g' >&2; }
die() { log "$@"; exit 1; }

k8s_url() {
  if [ -n "$MIRROR" ]; then echo "${MIRROR%/}/kubernetes/release/$K8S_VERSION/bin/linux/amd64/$1"
  else echo "https://dl.k8s.io/release/$K8S_VERSION/bin/linux/amd64/$1"; fi
}
gh_url() {  # gh_url REPOSITORY TAG PATH
  if [ -n "$MIRROR" ]; then echo "${MIRROR%/}/github/$1/$2/$3"
  else echo "https://raw.githubusercontent.com/$1/$2/$3"; fi
}
get() {  # get URL OUT WHAT
  local rc=0
  case "$1" in
    http://* | https://* | file://*) curl -fsSL --retry 2 --connect-timeout 20 -o "$2" "$1" || rc=$? ;;
    *) cp "$1" "$2" 2>/dev/null || rc=$? ;;
  esac
  [ "$rc" = 0 ] || { log "$3: could not fetch $1 (exit $rc); $HINT"; return 1; }
}
check() {  # check FILE SHA256 WHAT FROM
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  [ "$got" = "$2" ] || { log "$3 from $4: checksum mismatch: expected $2, got $got; $HINT"; return 1; }
}

# --- Kubernetes control plane
if [ -n "${K8S_BIN_DIR:-}" ]; then
  for b in kube-apiserver kube-controller-manager; do
    [ -x "$K8S_BIN_DIR/$b" ] || die "K8S_BIN_DIR=$K8S_BIN_DIR has no executable $b"
  done
  k8s_dir="$K8S_BIN_DIR"
else
  k8s_dir="$CACHE/kubernetes-$K8S_VERSION"
  mkdir -p "$k8s_dir"
  for b in kube-apiserver kube-controller-manager; do
    [ -x "$k8s_dir/$b" ] && [ -f "$k8s_dir/$b.verified" ] && continue
    tmp="$(mktemp "$k8s_dir/.$b.XXXXXX")"
    if [ -z "$MIRROR" ] && [ -f "$SHARED/k8s/$b-$K8S_VERSION-linux-amd64.xz" ]; then
      from="$SHARED/k8s/$b-$K8S_VERSION-linux-amd64.xz"
      log "$b $K8S_VERSION: unpacking $from"
      xz -dc "$from" > "$tmp" || die "$b: could not unpack $from"
      want="$(awk -v b="$b" '$2 == b {print $1}' "$SHARED/k8s/SHA256SUMS")"
    else
      from="$(k8s_url "$b")"
      log "$b $K8S_VERSION: fetching $from"
      get "$from" "$tmp" "$b $K8S_VERSION" || { rm -f "$tmp"; exit 1; }
      get "$from.sha256" "$tmp.sha256" "$b $K8S_VERSION checksum" || { rm -f "$tmp" "$tmp.sha256"; exit 1; }
      want="$(cut -d' ' -f1 < "$tmp.sha256")"
      rm -f "$tmp.sha256"
    fi
    [ -n "$want" ] || { rm -f "$tmp"; die "$b from $from: no published checksum"; }
    check "$tmp" "$want" "$b $K8S_VERSION" "$from" || { rm -f "$tmp"; exit 1; }
    chmod 755 "$tmp"
    mv "$tmp" "$k8s_dir/$b"
    echo "$want" > "$k8s_dir/$b.verified"
  done
fi

# --- CRDs of the two CAPI lines
if [ -n "${CAPI_CRDS_DIR:-}" ]; then
  crds_dir="$CAPI_CRDS_DIR"
elif [ -z "$MIRROR" ] && [ -d "$SHARED/crds" ]; then
  crds_dir="$SHARED/crds"
  while read -r kind folder _repo _tag path sum; do
    [ "$kind" = crd ] || continue
    check "$crds_dir/$folder/$(basename "$path")" "$sum" "$folder/$(basename "$path")" "$crds_dir" || exit 1
  done < "$LOCK"
else
  crds_dir="$CACHE/crds"
  said=""
  while read -r kind folder repo tag path sum; do
    [ "$kind" = crd ] || continue
    out="$crds_dir/$folder/$(basename "$path")"
    if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sum" ]; then continue; fi
    mkdir -p "$crds_dir/$folder"
    from="$(gh_url "$repo" "$tag" "$path")"
    if [ "$said" != "$folder" ]; then
      log "$folder: fetching its CRDs from $(gh_url "$repo" "$tag" "")"
      said="$folder"
    fi
    tmp="$(mktemp "$crds_dir/$folder/.crd.XXXXXX")"
    get "$from" "$tmp" "$folder/$(basename "$path")" || { rm -f "$tmp"; exit 1; }
    check "$tmp" "$sum" "$folder/$(basename "$path")" "$from" || { rm -f "$tmp"; exit 1; }
    mv "$tmp" "$out"
  done < "$LOCK"
fi
echo "export K8S_BIN_DIR=$k8s_dir CAPI_CRDS_DIR=$crds_dir"

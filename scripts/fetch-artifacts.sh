#!/usr/bin/env bash
# The upstream artifacts the tests, the demo and the benchmarks run: the
# Kubernetes control plane (kube-apiserver and kube-controller-manager
# v1.28.7, linux/amd64), kubectl at that version where the source carries
# it, and the CRDs of the two CAPI release lines, each pinned in
# scripts/artifacts.lock. Taken from ../shared when it is beside the clone
# (this team's machines: no network; no kubectl there), else fetched from
# their upstream homes (or a mirror) into the user's cache, and verified
# against the lock before anything uses them. Prints `export
# K8S_BIN_DIR=... CAPI_CRDS_DIR=...` as its last line (K8S_BIN_DIR holds
# kubectl when one came with them).
#
#   K8S_BIN_DIR, CAPI_CRDS_DIR   use these folders as they are
#   MAGNUM_RS_ARTIFACTS_CACHE    where fetched artifacts are kept
#                                (default ~/.cache/magnum-conductor-rs/artifacts)
#   MAGNUM_RS_ARTIFACTS_MIRROR   a base URL (http://, https://, file://) or a
#                                folder with the upstream layout:
#       kubernetes/release/v1.28.7/kubernetes-server-linux-amd64.tar.gz, or
#       kubernetes/release/v1.28.7/bin/linux/amd64/<binary> and <binary>.sha256
#       github/<repository>/<tag>/<path>  (as in scripts/artifacts.lock)
#   MAGNUM_RS_ARTIFACTS_LOCK     another lock than scripts/artifacts.lock
#                                (an operator's own pinned builds)
#   default homes: https://dl.k8s.io (the release's server archive, checked
#   against the sha512 its release notes publish) and
#   https://raw.githubusercontent.com
#
# Each binary must be a build the lock pins (`k8s` lines) or come out of
# the pinned server archive (`release` line); a .sha256 published beside a
# binary is checked too, never trusted alone (a mirror can swap both). A
# download that fails or does not match stops here, naming the artifact,
# where it came from, the expected and actual checksums and the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=v1.28.7
LOCK="${MAGNUM_RS_ARTIFACTS_LOCK:-$PWD/scripts/artifacts.lock}"
LOCK_NAME="${MAGNUM_RS_ARTIFACTS_LOCK:-scripts/artifacts.lock}"
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

k8s_url() {  # k8s_url PATH: PATH under the release on the mirror
  echo "${MIRROR%/}/kubernetes/release/$K8S_VERSION/$1"
}
gh_url() {  # gh_url REPOSITORY TAG PATH
  if [ -n "$MIRROR" ]; then echo "${MIRROR%/}/github/$1/$2/$3"
  else echo "https://raw.githubusercontent.com/$1/$2/$3"; fi
}
# get_optional URL OUT: 0 fetched, 2 no such file there, 1 another failure.
get_optional_rc=0
get_optional() {
  local rc=0
  case "$1" in
    http://* | https://* | file://*) curl -fsL --retry 2 --connect-timeout 20 -o "$2" "$1" || rc=$? ;;
    *) if [ -e "$1" ]; then cp "$1" "$2" || rc=$?; else rc=404; fi ;;
  esac
  case "$rc" in
    0) return 0 ;;
    22 | 37 | 78 | 404) return 2 ;;  # curl: HTTP error, file:// missing, FTP missing
    *) get_optional_rc=$rc; return 1 ;;
  esac
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

# --- Kubernetes control plane (and kubectl at its version)
# The lock pins each binary by the builds it accepts (`k8s` lines) and the
# release's server archive by the sha512 its release notes publish
# (`release` line); a published .sha256 is checked too, never trusted alone.
pinned() {  # pinned BINARY: the lock's "SHA256 BUILD" lines for it
  awk -v b="$1" -v v="$K8S_VERSION" '$1 == "k8s" && $2 == b && $3 == v && $4 == "linux/amd64" {print $5, $6}' "$LOCK"
}
archive_sum() {
  awk -v v="$K8S_VERSION" '$1 == "release" && $2 == "kubernetes-server-linux-amd64.tar.gz" && $3 == v {print $4}' "$LOCK"
}
# verified BINARY: a cached copy whose recorded checksum the lock still
# accepts (by its own line, or as the pinned archive's content).
verified() {
  local rec sum build
  [ -x "$k8s_dir/$1" ] && [ -f "$k8s_dir/$1.verified" ] || return 1
  rec="$(cat "$k8s_dir/$1.verified")"
  sum="${rec%% *}" build="${rec#* }"
  if [ "${build%%:*}" = archive ]; then
    [ "${build#archive:}" = "$(archive_sum)" ]
  else
    pinned "$1" | awk -v s="$sum" '$1 == s {f=1} END {exit !f}'
  fi
}
install_bin() {  # install_bin TMPFILE BINARY RECORD
  chmod 755 "$1"
  mv "$1" "$k8s_dir/$2"
  echo "$3" > "$k8s_dir/$2.verified"
}
# from_lock TMPFILE BINARY FROM [PUBLISHED]: a binary the lock pins (and
# equal to the checksum published beside it, when one is), installed;
# anything else stops here naming the lock.
from_lock() {
  local got build
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ -n "${4:-}" ] && [ "$got" != "$4" ]; then
    rm -f "$1"; die "$2 $K8S_VERSION from $3: checksum mismatch: expected $4, got $got; $HINT"
  fi
  build="$(pinned "$2" | awk -v s="$got" '$1 == s {print $2}')"
  if [ -z "$build" ]; then
    rm -f "$1"
    die "$2 $K8S_VERSION from $3: sha256 $got is not a build $LOCK_NAME pins for it (pinned: $(pinned "$2" | awk '{printf "%s%s (%s)", sep, $1, $2; sep=", "}')); $HINT"
  fi
  log "$2 $K8S_VERSION: verified ($build build, $LOCK_NAME)"
  install_bin "$1" "$2" "$got $build"
}
# from_archive URL: the release's server archive, checked against the
# lock's sha512, then the binaries still needed taken out of it. Returns 2
# when URL has no such file (a mirror without it).
from_archive() {
  local url="$1" tmp want got rc=0 b
  want="$(archive_sum)"
  [ -n "$want" ] || die "$LOCK_NAME pins no kubernetes-server-linux-amd64.tar.gz for $K8S_VERSION"
  tmp="$(mktemp "$k8s_dir/.server.XXXXXX")"
  log "kubernetes-server-linux-amd64.tar.gz $K8S_VERSION: fetching $url"
  get_optional "$url" "$tmp" || rc=$?
  if [ "$rc" = 2 ]; then rm -f "$tmp"; return 2; fi
  [ "$rc" = 0 ] || { rm -f "$tmp"; log "kubernetes-server-linux-amd64.tar.gz $K8S_VERSION: could not fetch $url (exit $get_optional_rc); $HINT"; exit 1; }
  got="$(sha512sum "$tmp" | cut -d' ' -f1)"
  [ "$got" = "$want" ] || { rm -f "$tmp"; die "kubernetes-server-linux-amd64.tar.gz $K8S_VERSION from $url: sha512 mismatch: expected $want ($LOCK_NAME), got $got; $HINT"; }
  mkdir -p "$k8s_dir/.unpack"
  for b in "${need[@]}"; do
    tar -xzf "$tmp" -C "$k8s_dir/.unpack" "kubernetes/server/bin/$b" \
      || { rm -rf "$tmp" "$k8s_dir/.unpack"; die "$b: not in $url"; }
    install_bin "$k8s_dir/.unpack/kubernetes/server/bin/$b" "$b" \
      "$(sha256sum "$k8s_dir/.unpack/kubernetes/server/bin/$b" | cut -d' ' -f1) archive:$want"
    log "$b $K8S_VERSION: verified (the release's server archive, sha512 in $LOCK_NAME)"
  done
  rm -rf "$tmp" "$k8s_dir/.unpack"
}

if [ -n "${K8S_BIN_DIR:-}" ]; then
  for b in kube-apiserver kube-controller-manager; do
    [ -x "$K8S_BIN_DIR/$b" ] || die "K8S_BIN_DIR=$K8S_BIN_DIR has no executable $b"
  done
  k8s_dir="$K8S_BIN_DIR"
else
  k8s_dir="$CACHE/kubernetes-$K8S_VERSION"
  mkdir -p "$k8s_dir"
  # Where the binaries come from (a mirror's URL as a hash: it may hold a
  # password); a source known to have no kubectl is not asked again.
  if [ -n "$MIRROR" ]; then source_id="mirror $(printf %s "$MIRROR" | sha256sum | cut -d' ' -f1)"
  elif [ -d "$SHARED/k8s" ]; then source_id="shared $SHARED"
  else source_id="dl.k8s.io"; fi
  no_kubectl() { echo "$source_id" > "$k8s_dir/kubectl.none"; }
  need=()
  for b in kube-apiserver kube-controller-manager kubectl; do
    verified "$b" && continue
    [ "$b" = kubectl ] && [ "$(cat "$k8s_dir/kubectl.none" 2>/dev/null)" = "$source_id" ] && continue
    need+=("$b")
  done
  if [ "${#need[@]}" -gt 0 ] && [ -z "$MIRROR" ] && [ -d "$SHARED/k8s" ]; then
    # This team's kept copy: kube-apiserver and kube-controller-manager,
    # built from the release's source (../shared/k8s/README.md); no kubectl.
    for b in "${need[@]}"; do
      from="$SHARED/k8s/$b-$K8S_VERSION-linux-amd64.xz"
      if [ ! -f "$from" ]; then
        [ "$b" = kubectl ] && { log "kubectl $K8S_VERSION: $SHARED/k8s has none: the machine's kubectl is used"; no_kubectl; continue; }
        die "$b: $from is missing"
      fi
      tmp="$(mktemp "$k8s_dir/.$b.XXXXXX")"
      log "$b $K8S_VERSION: unpacking $from"
      xz -dc "$from" > "$tmp" || { rm -f "$tmp"; die "$b: could not unpack $from"; }
      from_lock "$tmp" "$b" "$from" "$(awk -v b="$b" '$2 == b {print $1}' "$SHARED/k8s/SHA256SUMS")"
    done
  elif [ "${#need[@]}" -gt 0 ] && [ -n "$MIRROR" ]; then
    # A mirror: the release's server archive when it carries one, else the
    # binaries one by one (each a build the lock pins; kubectl if there).
    rc=0
    from_archive "$(k8s_url kubernetes-server-linux-amd64.tar.gz)" || rc=$?
    if [ "$rc" = 2 ]; then
      for b in "${need[@]}"; do
        from="$(k8s_url "bin/linux/amd64/$b")"
        tmp="$(mktemp "$k8s_dir/.$b.XXXXXX")"
        log "$b $K8S_VERSION: fetching $from"
        rc=0
        get_optional "$from" "$tmp" || rc=$?
        if [ "$rc" = 2 ] && [ "$b" = kubectl ]; then
          rm -f "$tmp"; log "kubectl $K8S_VERSION: the mirror has none: the machine's kubectl is used"; no_kubectl; continue
        fi
        [ "$rc" = 2 ] && { rm -f "$tmp"; log "$b $K8S_VERSION: could not fetch $from (not there); $HINT"; exit 1; }
        [ "$rc" = 0 ] || { rm -f "$tmp"; log "$b $K8S_VERSION: could not fetch $from (exit $get_optional_rc); $HINT"; exit 1; }
        get "$from.sha256" "$tmp.sha256" "$b $K8S_VERSION checksum" || { rm -f "$tmp" "$tmp.sha256"; exit 1; }
        published="$(cut -d' ' -f1 < "$tmp.sha256")"
        rm -f "$tmp.sha256"
        from_lock "$tmp" "$b" "$from" "$published"
      done
    fi
  elif [ "${#need[@]}" -gt 0 ]; then
    from_archive "https://dl.k8s.io/$K8S_VERSION/kubernetes-server-linux-amd64.tar.gz"
  fi
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

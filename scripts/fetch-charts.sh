#!/usr/bin/env bash
# The Helm charts the conductor's addons pin (scripts/charts.lock: every file
# of each chart and of the charts it depends on, as upstream Git serves it),
# for the tests that render every HelmChartProxy with the real Helm engine
# (tests/python/helm_charts.py). Taken from ../shared/charts when it is beside
# the clone (this team's machines: no network), else fetched from
# raw.githubusercontent.com (or the mirror) into the user's cache; verified
# against the lock before anything uses them. Prints
# `export HELM_CHARTS_DIR=...` as its last line (a folder in the layout
# github/<repository>/<ref>/<path>).
#
#   HELM_CHARTS_DIR              use this folder as it is (verified)
#   MAGNUM_RS_ARTIFACTS_CACHE    where fetched files are kept
#                                (default ~/.cache/magnum-conductor-rs/artifacts)
#   MAGNUM_RS_ARTIFACTS_MIRROR   a base URL or folder with github/<repository>/<ref>/<path>
#
# A file that cannot be fetched or does not match stops here, naming it,
# where it came from and both checksums.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK="$PWD/scripts/charts.lock"
CACHE="${MAGNUM_RS_ARTIFACTS_CACHE:-$HOME/.cache/magnum-conductor-rs/artifacts}"
SHARED="$(cd .. && pwd)/shared"
MIRROR="${MAGNUM_RS_ARTIFACTS_MIRROR:-}"
if [ -n "$MIRROR" ]; then
  HINT="check the mirror MAGNUM_RS_ARTIFACTS_MIRROR names: it should serve the upstream layout (docs/testing.md)"
else
  HINT="to provide it by hand, put the upstream layout in a folder (or behind a URL) and set MAGNUM_RS_ARTIFACTS_MIRROR to it (docs/testing.md)"
fi

log() { echo "[charts] $*" | sed -E 's#(://)[^/@ ]+@#\1***@#g' >&2; }
die() { log "$@"; exit 1; }
gh_url() {  # gh_url REPOSITORY REF PATH
  if [ -n "$MIRROR" ]; then echo "${MIRROR%/}/github/$1/$2/$3"
  else echo "https://raw.githubusercontent.com/$1/$2/$3"; fi
}

# The files of the lock that `dir` lacks or holds with another checksum.
stale() {  # stale DIR
  local list
  list="$(mktemp)"
  awk '$1 == "chart" {print $7 "  github/" $4 "/" $5 "/" $6}' "$LOCK" > "$list"
  if cd "$1" 2>/dev/null; then
    sha256sum -c --quiet "$list" 2>/dev/null | sed -n 's/: FAILED.*$//p' || true
    cd - >/dev/null
  fi
  rm -f "$list"
}

if [ -n "${HELM_CHARTS_DIR:-}" ]; then
  dir="$HELM_CHARTS_DIR"
elif [ -z "$MIRROR" ] && [ -d "$SHARED/charts/github" ]; then
  dir="$SHARED/charts"
else
  dir="$CACHE/charts"
  mkdir -p "$dir"
  said=""
  for f in $(stale "$dir"); do
    # f = github/<owner>/<repo>/<ref>/<path>
    read -r name version repo ref path sum < <(awk -v f="$f" '$1 == "chart" && "github/" $4 "/" $5 "/" $6 == f {print $2, $3, $4, $5, $6, $7; exit}' "$LOCK")
    if [ "$said" != "$name" ]; then
      log "$name $version: fetching from $(gh_url "$repo" "$ref" "")"
      said="$name"
    fi
    from="$(gh_url "$repo" "$ref" "$path")"
    out="$dir/$f"
    mkdir -p "$(dirname "$out")"
    tmp="$(mktemp "$(dirname "$out")/.chart.XXXXXX")"
    rc=0
    case "$from" in
      http://* | https://* | file://*) curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp" "$from" || rc=$? ;;
      *) cp "$from" "$tmp" 2>/dev/null || rc=$? ;;
    esac
    [ "$rc" = 0 ] || { rm -f "$tmp"; die "$name $version $path: could not fetch $from (exit $rc); $HINT"; }
    got="$(sha256sum "$tmp" | cut -d' ' -f1)"
    [ "$got" = "$sum" ] || { rm -f "$tmp"; die "$name $version $path from $from: checksum mismatch: expected $sum, got $got; $HINT"; }
    mv "$tmp" "$out"
  done
fi
bad="$(stale "$dir")"
[ -z "$bad" ] || die "$dir does not hold what scripts/charts.lock says: $(echo "$bad" | head -n 3 | tr '\n' ' ')"
echo "export HELM_CHARTS_DIR=$dir"

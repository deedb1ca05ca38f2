#!/usr/bin/env bash
# Provisions etcd 3.4.23 from Debian's etcd-server package into .etcd-cache/etcd-v3.4.23/ and
# prints the absolute path of its etcd binary, for running the suite against etcd 3.4:
#
#   ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit
#
# Only that path goes to stdout; everything else goes to stderr. Nothing is installed system-wide
# and no service is started: the .deb is downloaded and unpacked with dpkg -x. Idempotent: a
# second run only prints the path. The cache dir can be moved with ETCD_HA_CACHE, as for the
# testkit's own provisioning of etcd 3.5.1.
set -euo pipefail

version=3.4.23
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ETCD_HA_CACHE:-$root/.etcd-cache}
target=$cache/etcd-v$version
etcd=$target/etcd

log() { echo "etcd-3.4.sh: $*" >&2; }

# One provisioning per version at a time, across processes: tests that need the same version run
# in parallel, and a second run that replaced the directory under the first's feet made the first
# one's path vanish (CI: "No such file or directory" right after a successful build). The others
# wait here, then find the binary cached below.
mkdir -p "$cache"
exec 9>"$cache/.etcd-v$version.lock"
flock 9

# The version check guards against a half-written or foreign binary in the cache.
# Capture the whole output first: `grep -q` under pipefail can kill etcd mid-write (SIGPIPE) and
# make a good cache look bad.
if [[ -x $etcd ]] && [[ $("$etcd" --version 2>/dev/null) == *"etcd Version: $version"* ]]; then
    echo "$etcd"
    exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/etcd-3.4.XXXXXX")
trap 'rm -rf "$work"' EXIT

log "provisioning etcd $version from Debian's etcd-server package into $target"
# apt-get download writes into the current directory; as root it warns that the _apt user
# cannot write there, which is harmless.
if ! (cd "$work" && apt-get download etcd-server >&2); then
    log "download failed; refreshing the package lists once (apt-get update) and retrying"
    apt-get update >&2
    (cd "$work" && apt-get download etcd-server >&2)
fi

deb=$(ls "$work"/etcd-server_*.deb)
dpkg -x "$deb" "$work/root"
found=$("$work/root/usr/bin/etcd" --version | sed -n 's/^etcd Version: //p')
if [[ $found != "$version" ]]; then
    log "the etcd-server package has etcd $found, not $version; refusing to cache it as $version"
    exit 1
fi

# Prepare the directory completely, then move it into place in one rename, so a concurrent run
# or test never sees a half-copied binary.
mkdir -p "$cache"
staged=$(mktemp -d "$cache/.etcd-v$version.XXXXXX")
cp "$work/root/usr/bin/etcd" "$staged/etcd"
chmod 755 "$staged" "$staged/etcd"
rm -rf "$target"
mv -T "$staged" "$target" 2>/dev/null || rm -rf "$staged"

log "etcd $version is at $etcd"
echo "$etcd"

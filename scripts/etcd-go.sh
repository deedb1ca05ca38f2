#!/usr/bin/env bash
# Builds etcd (and etcdctl) of a given version from its Go modules into
# .etcd-cache/etcd-v<version>/ and prints the absolute path of its etcd binary:
#
#   ETCD_BIN=$(scripts/etcd-go.sh 3.5.35) cargo test --features testkit --test watch_failover
#
# For the servers users run today (3.5's latest patch, 3.6, 3.7), which no package here ships:
# a tiny main package that calls go.etcd.io/etcd/server/v3/etcdmain.Main (and etcdctl's
# ctlv3.MustStart), built with the machine's Go from the Go module proxy. Only that path goes to
# stdout; the rest goes to stderr. Idempotent: a cached binary whose --version says <version>
# is reused. ETCD_HA_CACHE moves the cache, as for the other etcd scripts.
set -euo pipefail

version=${1:?usage: scripts/etcd-go.sh <version, e.g. 3.5.35>}
version=${version#v}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${ETCD_HA_CACHE:-$root/.etcd-cache}
target=$cache/etcd-v$version
etcd=$target/etcd

log() { echo "etcd-go.sh: $*" >&2; }

# One provisioning per version at a time, across processes: tests that need the same version run
# in parallel, and a second run that replaced the directory under the first's feet made the first
# one's path vanish (CI: "No such file or directory" right after a successful build). The others
# wait here, then find the binary cached below.
mkdir -p "$cache"
exec 9>"$cache/.etcd-v$version.lock"
flock 9

# The whole output first: `grep -q` under pipefail can kill etcd mid-write (SIGPIPE).
if [[ -x $etcd ]] && [[ $("$etcd" --version 2>/dev/null) == *"etcd Version: $version"* ]]; then
    echo "$etcd"
    exit 0
fi
command -v go >/dev/null || { log "Go is needed to build etcd $version (install golang)"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/etcd-go.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building etcd $version from its Go modules into $target ($(go version))"

mkdir -p "$work/etcd" "$work/etcdctl" "$work/out"
cat >"$work/etcd/main.go" <<'GO'
// etcd, as etcd's own server/main.go starts it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat >"$work/etcdctl/main.go" <<'GO'
// etcdctl, as etcd's own etcdctl/main.go starts it.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
GO
(
    cd "$work"
    export GOFLAGS=-mod=mod CGO_ENABLED=0
    go mod init etcd-ha-etcd-build >&2 2>/dev/null
    go get "go.etcd.io/etcd/server/v3@v$version" "go.etcd.io/etcd/etcdctl/v3@v$version" >&2
    go mod tidy >&2
    go build -trimpath -o out/etcd ./etcd >&2
    go build -trimpath -o out/etcdctl ./etcdctl >&2
)
got=$("$work/out/etcd" --version 2>/dev/null || true)
if [[ $got != *"etcd Version: $version"* ]]; then
    log "the built binary says: ${got%%$'\n'*}; expected etcd Version: $version"
    exit 1
fi
mkdir -p "$cache"
rm -rf "$target.tmp"
mv "$work/out" "$target.tmp"
rm -rf "$target"
mv "$target.tmp" "$target"
log "${got%%$'\n'*} at $etcd"
echo "$etcd"

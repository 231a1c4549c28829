#!/usr/bin/env bash
# Builds the Go tools the Pulumi and Kubernetes work needs (pulumi CLI, its Python language host, the Kubernetes
# provider plugin, the control plane, etcd, KWOK) from pinned Go modules, because the Go module proxy is the only
# place they can come from here: no release download site is reachable. Binaries land in
# $HA_OPS_CACHE/tools/<name>-<version>/bin and are linked into tools/bin of this checkout.
#
#   scripts/tools.sh              build what is missing, link everything built (exit 1 if any tool failed)
#   scripts/tools.sh NAME...      only these tools (names as in --list)
#   scripts/tools.sh --list       each tool, its version and whether it is built; runs no go command
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Pins. Bumping one changes the cache key, so the next run rebuilds just that tool.
PULUMI_VERSION=v3.274.1
PULUMI_LANGUAGE_PYTHON_VERSION=v3.79.0
# The provider module has no tags of its own (the repo tags the root and sdk/ only), so the proxy serves one
# pseudo-version: a commit of 2026-01-15, the day before v4.25.0, whose SDK module tag (sdk/v4.25.0) stands in for
# its `../sdk` replace.
PULUMI_KUBERNETES_PROVIDER_VERSION=v4.0.0-20260115033456-f47bc2d6f199
PULUMI_KUBERNETES_SDK_VERSION=v4.25.0
KUBERNETES_VERSION=v1.34.4
KUBERNETES_STAGING_VERSION=v0.${KUBERNETES_VERSION#v1.}
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0

CACHE=${HA_OPS_CACHE:-$HOME/.cache/ha-ops}
TOOLS=$CACHE/tools
GODIR=$CACHE/go
LINKS=$ROOT/tools/bin

# name|version|binaries, in build order: the quick ones first, so a cold run makes them usable early.
TOOL_TABLE="
kwok|$KWOK_VERSION|kwok kwok-stages.yaml
etcd|$ETCD_VERSION|etcd etcdctl
pulumi-language-python|$PULUMI_LANGUAGE_PYTHON_VERSION|pulumi-language-python pulumi-language-python-exec pulumi-resource-pulumi-python
pulumi-resource-kubernetes|$PULUMI_KUBERNETES_PROVIDER_VERSION|pulumi-resource-kubernetes
pulumi|$PULUMI_VERSION|pulumi
kubernetes|$KUBERNETES_VERSION|kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
"

tool_dir() { echo "$TOOLS/$1-$2"; }

is_built() { # name version bins...: file checks only, so a warm run never starts the go command
  local dir bin
  dir=$(tool_dir "$1" "$2")
  shift 2
  for bin in "$@"; do [ -f "$dir/bin/$bin" ] || return 1; done
}

link_tool() {
  local dir bin
  dir=$(tool_dir "$1" "$2")
  shift 2
  mkdir -p "$LINKS"
  for bin in "$@"; do ln -sfn "$dir/bin/$bin" "$LINKS/$bin"; done
}

if [ "${1:-}" = "--list" ]; then
  while IFS='|' read -r name version bins; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    if is_built "$name" "$version" $bins; then state=built; else state=missing; fi
    printf '%-28s %-36s %-8s %s\n' "$name" "$version" "$state" "$bins"
  done <<<"$TOOL_TABLE"
  exit 0
fi

# The Go caches live beside the binaries, so a fresh clone (CI) reuses downloads and compiled packages.
# -modcacherw keeps the module cache deletable by a plain rm -rf.
export GOPATH=$GODIR/path GOMODCACHE=$GODIR/mod GOCACHE=$GODIR/build
export GOFLAGS="-modcacherw -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export CGO_ENABLED=0

# Prints each command before it runs and remembers it, so a failure names the exact command that broke.
LASTCMD=$TOOLS/.lastcmd
run() {
  printf '+ %s\n' "$*" >&2
  printf '%s\n' "$*" >"$LASTCMD"
  "$@"
}
# The machine is shared (2 cores): compiles yield to everything else.
gocmd() { run nice -n 19 go "$@"; }

# Where `go mod download` put a module: prints "<Dir> <GoMod>".
mod_fetch() {
  # With -json, go reports a refused module only inside the JSON: surface it.
  if ! gocmd mod download -json "$1" >"$TOOLS/.modjson"; then
    python3 -c 'import json,sys; print("go:", json.load(open(sys.argv[1])).get("Error"), file=sys.stderr)' \
      "$TOOLS/.modjson" || cat "$TOOLS/.modjson" >&2
    return 1
  fi
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["Dir"], m["GoMod"])' "$TOOLS/.modjson"
}

# An upstream go.mod's replace directives, rewritten for a wrapper module: a module-to-module replace is copied
# as is; a replace into the upstream repository's own tree (`=> ../sdk`) becomes the same module at the release
# VERSION, since only the released module zips are served. Replaces of modules upstream does not require
# (etcd's FORBIDDEN_DEPENDENCY guards, kubernetes' sample-* staging modules) are dropped.
wrapper_replaces() { # go.mod version
  go mod edit -json "$1" | python3 -c '
import json, sys
m = json.load(sys.stdin)
version = sys.argv[1]
required = {r["Path"] for r in m.get("Require") or []}
for r in m.get("Replace") or []:
    old, new = r["Old"], r["New"]
    lhs = old["Path"] + (" " + old["Version"] if old.get("Version") else "")
    if new.get("Version"):
        print("replace %s => %s %s" % (lhs, new["Path"], new["Version"]))
    elif old["Path"] in required:
        print("replace %s => %s %s" % (old["Path"], old["Path"], version))
' "$2"
}

upstream_go_line() { go mod edit -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Go"])'; }
# godebug settings change runtime defaults (kubernetes pins go1.24 behaviour); only the main module's count.
upstream_godebug() { grep -E '^godebug ' "$1" || true; }

# A wrapper module stands in for the upstream main module, whose replace directives `go install mod@version`
# refuses. go.sum starts from upstream's so the hashes upstream vetted are the ones used.
# write_wrapper DIR GO_VERSION REQUIRES_FILE REPLACES_FILE [EXTRA_LINES_FILE] [GOSUM_SEED...]
write_wrapper() {
  local dir=$1 gover=$2 requires=$3 replaces=$4 extra=$5
  shift 5
  mkdir -p "$dir"
  {
    echo "module ha-ops.local/tools/$(basename "$dir")"
    echo
    echo "go $gover"
    [ -s "$extra" ] && cat "$extra"
    echo
    echo "require ("
    sed 's/^/	/' "$requires"
    echo ")"
    echo
    sort -u "$replaces"
  } >"$dir/go.mod"
  if [ ! -s "$dir/go.sum" ] && [ "$#" -gt 0 ]; then cat "$@" | sort -u >"$dir/go.sum"; fi
  printf '== %s/go.mod\n' "$dir"
  cat "$dir/go.mod"
}

# Each build_* gets the bin directory to fill and the version; it runs in a subshell with errexit on.

build_kwok() {
  local out=$1 version=$2 w=$GODIR/src/kwok-$2 dir gomod fetched
  fetched=$(mod_fetch "sigs.k8s.io/kwok@$version")
  read -r dir gomod <<<"$fetched"
  echo "sigs.k8s.io/kwok $version" >"$w.req"
  wrapper_replaces "$gomod" "$version" >"$w.rep"
  upstream_godebug "$gomod" >"$w.extra"
  write_wrapper "$w" "$(upstream_go_line "$gomod")" "$w.req" "$w.rep" "$w.extra" "$dir/go.sum"
  cd "$w"
  gocmd build -mod=mod -trimpath -ldflags "-s -w" -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
  # kwok runs nothing without Stage configs: the module's own "fast" node start, lease heartbeats and the general
  # pod lifecycle, joined into one --config file.
  local stage
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/general/pod-create \
    pod/general/pod-init-container-running pod/general/pod-init-container-completed pod/general/pod-ready \
    pod/general/pod-complete pod/general/pod-delete; do
    echo "---"
    cat "$dir/kustomize/stage/$stage.yaml"
  done >"$out/kwok-stages.yaml"
}

build_etcd() {
  # The etcd binary is the main package at the root of go.etcd.io/etcd/server/v3 (go.etcd.io/etcd/v3 is only
  # the repository's umbrella module and lags: v3.6.8 is its newest on the proxy); etcdctl is its own module.
  local out=$1 version=$2 w=$GODIR/src/etcd-$2 sdir sgomod cdir cgomod fetched
  fetched=$(mod_fetch "go.etcd.io/etcd/server/v3@$version")
  read -r sdir sgomod <<<"$fetched"
  fetched=$(mod_fetch "go.etcd.io/etcd/etcdctl/v3@$version")
  read -r cdir cgomod <<<"$fetched"
  printf '%s\n' "go.etcd.io/etcd/server/v3 $version" "go.etcd.io/etcd/etcdctl/v3 $version" >"$w.req"
  { wrapper_replaces "$sgomod" "$version"; wrapper_replaces "$cgomod" "$version"; } >"$w.rep"
  upstream_godebug "$sgomod" >"$w.extra"
  write_wrapper "$w" "$(upstream_go_line "$sgomod")" "$w.req" "$w.rep" "$w.extra" "$sdir/go.sum" "$cdir/go.sum"
  cd "$w"
  gocmd build -mod=mod -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
  gocmd build -mod=mod -trimpath -ldflags "-s -w" -o "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3
}

build_pulumi() {
  # pkg/v3 replaces sdk/v3 with its sibling directory and github.com/atotto/clipboard with a fork.
  local out=$1 version=$2 w=$GODIR/src/pulumi-$2 dir gomod sdkdir fetched
  fetched=$(mod_fetch "github.com/pulumi/pulumi/pkg/v3@$version")
  read -r dir gomod <<<"$fetched"
  fetched=$(mod_fetch "github.com/pulumi/pulumi/sdk/v3@$version")
  read -r sdkdir _ <<<"$fetched"
  printf '%s\n' "github.com/pulumi/pulumi/pkg/v3 $version" "github.com/pulumi/pulumi/sdk/v3 $version" >"$w.req"
  wrapper_replaces "$gomod" "$version" >"$w.rep"
  upstream_godebug "$gomod" >"$w.extra"
  write_wrapper "$w" "$(upstream_go_line "$gomod")" "$w.req" "$w.rep" "$w.extra" "$dir/go.sum" "$sdkdir/go.sum"
  cd "$w"
  # Without the version stamp `pulumi version` says v3.0.0-dev and plugin version checks misfire.
  gocmd build -mod=mod -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$version" \
    -o "$out/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
}

build_pulumi-language-python() {
  # Since v3.80.0 the host is its own module (sdk/python/cmd/pulumi-language-python/v3), which the proxy refuses
  # (403) at every version; up to v3.79.0 it lived inside sdk/v3, which is served. So the host comes from
  # sdk/v3@$PULUMI_LANGUAGE_PYTHON_VERSION, with its exec shim (a Python script it runs the program through, found
  # on PATH) and the dynamic provider's shim. The CLI talks to it over the versioned gRPC language protocol; tests/integration/test_pulumi.py shows
  # the pair runs a program with a dynamic provider end to end.
  local out=$1 version=$2 w=$GODIR/src/pulumi-language-python-$2 dir gomod fetched
  local mod=github.com/pulumi/pulumi/sdk/v3
  fetched=$(mod_fetch "$mod@$version")
  read -r dir gomod <<<"$fetched"
  echo "$mod $version" >"$w.req"
  wrapper_replaces "$gomod" "$version" >"$w.rep"
  upstream_godebug "$gomod" >"$w.extra"
  write_wrapper "$w" "$(upstream_go_line "$gomod")" "$w.req" "$w.rep" "$w.extra" "$dir/go.sum"
  cd "$w"
  gocmd build -mod=mod -trimpath \
    -ldflags "-s -w -X $mod/go/common/version.Version=$version" \
    -o "$out/pulumi-language-python" "$mod/python/cmd/pulumi-language-python"
  run install -m 0755 "$dir/python/cmd/pulumi-language-python-exec" "$out/pulumi-language-python-exec"
  # The provider behind Python dynamic resources: a shim running `python -m pulumi.dynamic`.
  run install -m 0755 "$dir/python/dist/pulumi-resource-pulumi-python" "$out/pulumi-resource-pulumi-python"
}

build_pulumi-resource-kubernetes() {
  local out=$1 version=$2 w=$GODIR/src/pulumi-resource-kubernetes-$2 dir gomod fetched
  local mod=github.com/pulumi/pulumi-kubernetes/provider/v4 semver=${2#v}
  fetched=$(mod_fetch "$mod@$version")
  read -r dir gomod <<<"$fetched"
  printf '%s\n' "$mod $version" >"$w.req"
  wrapper_replaces "$gomod" "$PULUMI_KUBERNETES_SDK_VERSION" >"$w.rep"
  # main.go embeds schema-embed.json and terraform-mapping-embed.json, which upstream makes with `go generate`
  # at release time (the schema with its version set, both compacted) and which the module zip lacks. go build
  # refuses overlays into the module cache, so the wrapper builds a hard-linked copy of the module (no extra disk)
  # with the two files added, made the same way generate.go makes them.
  echo "replace $mod => ./provider" >>"$w.rep"
  upstream_godebug "$gomod" >"$w.extra"
  write_wrapper "$w" "$(upstream_go_line "$gomod")" "$w.req" "$w.rep" "$w.extra" "$dir/go.sum"
  rm -rf "$w/provider"
  run cp -al "$dir" "$w/provider" || run cp -a "$dir" "$w/provider"
  # Only the directory: the files are links to the cache's own inodes, whose modes must not change.
  chmod u+w "$w/provider/cmd/pulumi-resource-kubernetes"
  run python3 - "$w/provider/cmd/pulumi-resource-kubernetes" "$semver" <<'PY'
import json, sys
cmd, version = sys.argv[1:]
schema = json.load(open(f"{cmd}/schema.json"))
schema["version"] = version
with open(f"{cmd}/schema-embed.json", "w") as f:
    json.dump(schema, f, separators=(",", ":"))
with open(f"{cmd}/terraform-mapping-embed.json", "w") as f:
    json.dump(json.load(open(f"{cmd}/terraform-mapping.json")), f, separators=(",", ":"))
PY
  cd "$w"
  gocmd build -mod=mod -trimpath -ldflags "-s -w -X $mod/pkg/version.Version=$semver" \
    -o "$out/pulumi-resource-kubernetes" "$mod/cmd/pulumi-resource-kubernetes"
}

build_kubernetes() {
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging/src/...; each is
  # published as its own module tagged v0.<minor>.<patch>, which the wrapper pins instead.
  local out=$1 version=$2 w=$GODIR/src/kubernetes-$2 dir gomod minor fetched
  fetched=$(mod_fetch "k8s.io/kubernetes@$version")
  read -r dir gomod <<<"$fetched"
  echo "k8s.io/kubernetes $version" >"$w.req"
  wrapper_replaces "$gomod" "$KUBERNETES_STAGING_VERSION" >"$w.rep"
  upstream_godebug "$gomod" >"$w.extra"
  write_wrapper "$w" "$(upstream_go_line "$gomod")" "$w.req" "$w.rep" "$w.extra" "$dir/go.sum"
  cd "$w"
  # What hack/lib/version.sh stamps; without it --version prints v0.0.0-master and the components disagree on
  # their own version with the API they serve.
  minor=${version#v1.}
  minor=${minor%%.*}
  local x ldflags="-s -w"
  for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $x.gitVersion=$version -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean"
  done
  gocmd build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
}

mkdir -p "$TOOLS/logs" "$GODIR/src"
# Two runs at once would build into the same directories.
exec 9>"$TOOLS/.lock"
flock 9

failed=()
declare -A wanted=()
for arg in "$@"; do wanted[$arg]=1; done
start_all=$SECONDS
built_any=0

count=$(grep -c '|' <<<"$TOOL_TABLE")
index=0
while IFS='|' read -r name version bins; do
  [ -n "$name" ] || continue
  index=$((index + 1))
  if [ "$#" -gt 0 ] && [ -z "${wanted[$name]:-}" ]; then continue; fi
  # shellcheck disable=SC2086
  if is_built "$name" "$version" $bins; then
    # shellcheck disable=SC2086
    link_tool "$name" "$version" $bins
    echo "tools: $name $version present"
    continue
  fi
  built_any=1
  dir=$(tool_dir "$name" "$version")
  log=$TOOLS/logs/$name-$version.log
  # Built into a scratch directory and renamed at the end, so an interrupted build never looks finished.
  rm -rf "$dir.partial"
  mkdir -p "$dir.partial/bin"
  : >"$LASTCMD"
  echo "tools: [$index/$count] building $name $version (log: $log)"
  t0=$SECONDS
  # A cold build of one tool can take 20 minutes with little output: say every minute that it is still going.
  (
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM  # no orphaned sleep keeps a pipe on this output open
    started=$(date +%s)
    while :; do
      sleep 60 & sleeper=$!
      wait "$sleeper"
      echo "tools: [$index/$count] still building $name: $(($(date +%s) - started)) s so far"
    done
  ) &
  ticker=$!
  set +e
  ( set -euo pipefail; "build_$name" "$dir.partial/bin" "$version" ) 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  took=$((SECONDS - t0))
  # shellcheck disable=SC2086
  if [ "$rc" -eq 0 ] && (cd "$dir.partial/bin" && for b in $bins; do [ -f "$b" ] || exit 1; done); then
    rm -rf "$dir"
    mv "$dir.partial" "$dir"
    # shellcheck disable=SC2086
    link_tool "$name" "$version" $bins
    echo "tools: built $name $version in ${took}s"
  else
    rm -rf "$dir.partial"
    cmdline=$(cat "$LASTCMD")
    err=$(grep -v '^+ ' "$log" | tail -n 5 || true)
    echo "tools: FAILED $name $version after ${took}s (exit $rc)"
    echo "  command: ${cmdline:-?}"
    printf '  | %s\n' "${err//$'\n'/$'\n'  | }"
    failed+=("$name $version: \`${cmdline:-?}\`: $(echo "$err" | tail -n 2 | tr -s '\t\n' '  ')")
  fi
done <<<"$TOOL_TABLE"

[ "$built_any" = 1 ] && echo "tools: done in $((SECONDS - start_all))s"
echo "tools: disk use:"
du -sh "$TOOLS" "$GODIR" 2>/dev/null | sed 's/^/  /'
if [ "${#failed[@]}" -gt 0 ]; then
  echo "tools: ${#failed[@]} tool(s) failed:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi

# Shared by e2e/run and bench/create.sh: build the binaries, make the
# network namespace, clean up on exit. Sourced; expects E2E_DIR and REPO.

# E2E_BIN may be set to build elsewhere (a cold-build measurement).
E2E_BIN="${E2E_BIN:-$E2E_DIR/.bin}"
E2E_NODE_IP=10.200.0.1
E2E_SERVICE_CIDR=10.96.0.0/24
E2E_NETNS=""
E2E_WORK=""
# How ownerguard runs in place of the chart's pods: "image" (the image
# .ci/image builds, run by podman as the chart's Deployment says) or
# "process" (the release binary, for a machine without podman).
E2E_OWNERGUARD="${E2E_OWNERGUARD:-image}"
# The image .ci/image builds (the same default, the same override).
OWNERGUARD_IMAGE="${OWNERGUARD_IMAGE:-localhost/ownerguard:$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/Cargo.toml" | head -n 1)}"
export E2E_BIN E2E_NODE_IP E2E_SERVICE_CIDR E2E_OWNERGUARD OWNERGUARD_IMAGE

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The Kubernetes minor the control plane runs: E2E_KUBE (e.g. 1.33), else
# the newest pinned in e2e/plane (k8s-<minor>.mod, written by
# e2e/plane/pin). Sets E2E_KUBE, E2E_KUBE_VERSION (the release, v1.37.2),
# E2E_PLANE_MOD and E2E_PLANE_BIN (where that minor's binaries live).
e2e_kube_select() {
  local newest
  newest="$(e2e_kube_minors | tail -n 1)"
  E2E_KUBE="${E2E_KUBE:-$newest}"
  E2E_PLANE_MOD="$E2E_DIR/plane/k8s-$E2E_KUBE.mod"
  if [[ ! -f "$E2E_PLANE_MOD" ]]; then
    log "E2E_KUBE=$E2E_KUBE: no control plane pinned for that minor; pinned: $(e2e_kube_minors | tr '\n' ' ')"
    return 1
  fi
  E2E_KUBE_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' "$E2E_PLANE_MOD")"
  E2E_PLANE_BIN="$E2E_BIN/k8s-$E2E_KUBE_VERSION"
  export E2E_KUBE E2E_KUBE_VERSION E2E_PLANE_BIN
}

# Every minor pinned in e2e/plane, oldest first.
e2e_kube_minors() {
  local f
  for f in "$E2E_DIR"/plane/k8s-*.mod; do
    f="${f##*/k8s-}"
    echo "${f%.mod}"
  done | sort -t. -k1,1n -k2,2n
}

# A stamp of the files a build reads: rebuilt when one of them changes.
e2e_stamp_of() {
  (cd "$E2E_DIR" && find "$@" -type f \( -name '*.go' -o -name '*.mod' -o -name '*.sum' \) -print0 \
    | sort -z | xargs -0 sha256sum; sha256sum lib.sh) | sha256sum | cut -d' ' -f1
}

# e2e_up_to_date STAMP FILE...: whether the build STAMP records read the
# FILEs as they are; if not, E2E_WANT is what to record once built.
e2e_up_to_date() {
  E2E_WANT="$(e2e_stamp_of "${@:2}")"
  [[ -f "$1" && "$(cat "$1")" == "$E2E_WANT" ]]
}

# The Go binaries, each rebuilt when its sources, module files or
# e2e/lib.sh changed: the control plane of the selected minor from its own
# module file (e2e/plane/k8s-<minor>.mod: Kubernetes' own pinned
# versions), cached per release in $E2E_BIN/k8s-<release>/; the scenarios
# and createbench (e2e/go.mod, the newest minor's client); Helm 4, Helm 3
# and chartcheck (e2e/helm). Builds run at the lowest priority.
e2e_build() {
  e2e_image_present
  e2e_kube_select
  e2e_build_plane
  e2e_build_nodes
  local stamp="$E2E_BIN/.stamp"
  if e2e_up_to_date "$stamp" go.mod go.sum harness scenarios cmd/createbench cmd/k8s-suite helm otelcol; then
    log "scenarios, createbench, k8s-suite, Helm, chartcheck and the collector up to date in $E2E_BIN"
  else
    local start=$SECONDS
    log "building the scenarios, createbench, k8s-suite, Helm 4, Helm 3, chartcheck and the OpenTelemetry Collector (nice -n 19)"
    mkdir -p "$E2E_BIN"
    (cd "$E2E_DIR" && nice -n 19 go build -trimpath -o "$E2E_BIN/" ./cmd/createbench ./cmd/k8s-suite)
    (cd "$E2E_DIR" && nice -n 19 go test -c -trimpath -o "$E2E_BIN/scenarios.test" ./scenarios)
    bash "$E2E_DIR/helm/build" "$E2E_BIN"
    (cd "$E2E_DIR/helm" && nice -n 19 go build -trimpath -o "$E2E_BIN/" ./chartcheck)
    # The collector's own module (e2e/otelcol: its builder's output).
    (cd "$E2E_DIR/otelcol" && nice -n 19 go build -trimpath -o "$E2E_BIN/e2e-otelcol" .)
    echo "$E2E_WANT" >"$stamp"
    log "built in $((SECONDS - start)) s"
  fi
  log "building ownerguard (cargo build --release)"
  # The flags of the release build (release/lib.sh): the image's binary
  # and this one are one build.
  (source "$REPO/release/lib.sh" && release_build "$REPO" --quiet)
  local built="${CARGO_TARGET_DIR:-$REPO/target}/release/ownerguard"
  [[ "$built" = /* ]] || built="$REPO/$built"
  # A copy: a target directory shared with other work trees may be
  # rebuilt from other sources while the suite runs.
  cp "$built" "$E2E_BIN/ownerguard"
  OWNERGUARD_BIN="$E2E_BIN/ownerguard"
  # Where release/publish leaves the release it published (the target
  # directory's release/): the suite installs it from its registry.
  E2E_RELEASE_DIR="$(dirname "$built")"
  export OWNERGUARD_BIN E2E_RELEASE_DIR
  e2e_report_crds
}

# The policy-report CRDs of TestPolicyReports, from their projects'
# published Go modules (pinned here), fetched before the suite enters its
# network namespace, which has no route to the module proxy.
E2E_REPORT_MODULES=(
  OPENREPORTS=github.com/openreports/reports-api@v0.2.1
  KYVERNO=github.com/kyverno/kyverno@v1.19.1
)
e2e_report_crds() {
  local entry name module dir scratch
  # Outside any module: `go mod download module@version` alone.
  scratch="$(mktemp -d)"
  for entry in "${E2E_REPORT_MODULES[@]}"; do
    name="${entry%%=*}" module="${entry#*=}"
    dir="$(cd "$scratch" && GOFLAGS=-mod=mod go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "$dir" ]] || { rm -rf "$scratch"; log "cannot fetch $module from the module proxy"; return 1; }
    export "E2E_MODULE_$name=$dir"
  done
  rm -rf "$scratch"
  log "policy-report CRDs from ${E2E_REPORT_MODULES[*]#*=}"
}

# etcd, kube-apiserver and kube-controller-manager of $E2E_KUBE_VERSION,
# from e2e/cmd (upstream's mains, the same on every minor) built with
# `-modfile` e2e/plane/k8s-<minor>.mod.
e2e_build_plane() {
  local stamp="$E2E_PLANE_BIN/.stamp" rel="${E2E_PLANE_MOD#"$E2E_DIR/"}"
  if e2e_up_to_date "$stamp" "$rel" "${rel%.mod}.sum" cmd/etcd cmd/kube-apiserver cmd/kube-controller-manager; then
    log "control plane of Kubernetes $E2E_KUBE_VERSION up to date in $E2E_PLANE_BIN"
    return
  fi
  local start=$SECONDS
  log "building etcd, kube-apiserver and kube-controller-manager of Kubernetes $E2E_KUBE_VERSION (nice -n 19)"
  mkdir -p "$E2E_PLANE_BIN"
  (cd "$E2E_DIR" && nice -n 19 go build -modfile="$E2E_PLANE_MOD" -trimpath -ldflags "$(e2e_version_ldflags)" \
    -o "$E2E_PLANE_BIN/" ./cmd/etcd ./cmd/kube-apiserver ./cmd/kube-controller-manager)
  echo "$E2E_WANT" >"$stamp"
  log "control plane of Kubernetes $E2E_KUBE_VERSION built in $((SECONDS - start)) s"
}

# The version Kubernetes' own build (hack/lib/version.sh) stamps in;
# without it the server says v0.0.0-master and Helm refuses the chart's
# kubeVersion.
e2e_version_ldflags() {
  local k8s="$E2E_KUBE_VERSION" ldflags="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=$(cut -d. -f1 <<<"${k8s#v}")"
    ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"$k8s") -X $pkg.gitTreeState=clean"
  done
  echo "$ldflags"
}

# kube-scheduler and kubemark's hollow node of $E2E_KUBE_VERSION, built
# like the plane: the scenarios' kubelet, and the nodes of e2e/k8s-suite.
e2e_build_nodes() {
  local stamp="$E2E_PLANE_BIN/.stamp-nodes" rel="${E2E_PLANE_MOD#"$E2E_DIR/"}"
  if e2e_up_to_date "$stamp" "$rel" "${rel%.mod}.sum" cmd/kube-scheduler cmd/kubemark; then
    log "kube-scheduler and kubemark of Kubernetes $E2E_KUBE_VERSION up to date in $E2E_PLANE_BIN"
    return
  fi
  local start=$SECONDS
  log "building kube-scheduler and kubemark of Kubernetes $E2E_KUBE_VERSION (nice -n 19)"
  (cd "$E2E_DIR" && nice -n 19 go build -modfile="$E2E_PLANE_MOD" -trimpath -ldflags "$(e2e_version_ldflags)" \
    -o "$E2E_PLANE_BIN/" ./cmd/kube-scheduler ./cmd/kubemark)
  echo "$E2E_WANT" >"$stamp"
  log "kube-scheduler and kubemark of Kubernetes $E2E_KUBE_VERSION built in $((SECONDS - start)) s"
}

# For e2e/k8s-suite: e2e.test (Kubernetes' own end-to-end tests, the
# sig-apps, sig-api-machinery and sig-network sources) of
# $E2E_KUBE_VERSION, built like the plane, beside its nodes.
e2e_build_k8s_suite() {
  e2e_build_nodes
  local stamp="$E2E_PLANE_BIN/.stamp-suite" rel="${E2E_PLANE_MOD#"$E2E_DIR/"}"
  if e2e_up_to_date "$stamp" "$rel" "${rel%.mod}.sum" cmd/k8s-e2e; then
    log "e2e.test of Kubernetes $E2E_KUBE_VERSION up to date in $E2E_PLANE_BIN"
    return
  fi
  local start=$SECONDS
  log "building e2e.test of Kubernetes $E2E_KUBE_VERSION (nice -n 19)"
  (cd "$E2E_DIR" && nice -n 19 go test -c -modfile="$E2E_PLANE_MOD" -trimpath -ldflags "$(e2e_version_ldflags)" \
    -o "$E2E_PLANE_BIN/e2e.test" ./cmd/k8s-e2e)
  echo "$E2E_WANT" >"$stamp"
  log "e2e.test of Kubernetes $E2E_KUBE_VERSION built in $((SECONDS - start)) s"
}

# With E2E_OWNERGUARD=image, the image must be there before anything is
# built (the suite checks, before it starts, that it holds this build).
e2e_image_present() {
  case "$E2E_OWNERGUARD" in
    process) log "ownerguard runs as a process (E2E_OWNERGUARD=process), not from the image" ;;
    image)
      command -v podman >/dev/null \
        || { log "E2E_OWNERGUARD=image needs podman: run \`bash .ci/image build\` (it installs it), or E2E_OWNERGUARD=process"; return 1; }
      podman image exists "$OWNERGUARD_IMAGE" \
        || { log "no image $OWNERGUARD_IMAGE: build it with \`bash .ci/image build\` (or E2E_OWNERGUARD=process)"; return 1; }
      log "ownerguard runs from the image $OWNERGUARD_IMAGE" ;;
    *) log "E2E_OWNERGUARD=$E2E_OWNERGUARD: want image or process"; return 1 ;;
  esac
}

# A network namespace of our own: loopback, and a bridge without ports
# (a "dummy" link is not in every kernel; a bridge is) holding the node
# address, the default route (nothing leaves: the bridge has no port) and,
# later, the Services' ClusterIPs.
e2e_netns_up() {
  E2E_NETNS="ownerguard-e2e-$$-$RANDOM"
  E2E_WORK="$(mktemp -d "${TMPDIR:-/tmp}/ownerguard-e2e.XXXXXX")"
  export E2E_NETNS E2E_WORK
  trap e2e_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  ip netns add "$E2E_NETNS"
  ip -n "$E2E_NETNS" link set lo up
  ip -n "$E2E_NETNS" link add og0 type bridge
  ip -n "$E2E_NETNS" addr add "$E2E_NODE_IP/24" dev og0
  ip -n "$E2E_NETNS" link set og0 up
  ip -n "$E2E_NETNS" route add default dev og0
  # ownerguard listens on a Service's port 443 with every capability
  # dropped, as the chart runs it: containerd lets a pod's containers bind
  # any port this way (enable_unprivileged_ports), for the pod's own
  # network namespace.
  ip netns exec "$E2E_NETNS" sysctl -qw net.ipv4.ip_unprivileged_port_start=0
  # podman runs from this shell's namespaces (the harness enters them),
  # as a kubelet's runtime does from the host's.
  E2E_HOST_PID=$$
  export E2E_HOST_PID
  log "network namespace $E2E_NETNS, work directory $E2E_WORK"
}

e2e_plane_env() {
  export E2E_REPO="$REPO"
}

e2e_in_netns() {
  ip netns exec "$E2E_NETNS" "$@"
}

# Whatever still runs in the namespace is ours: end it, by pid, then
# delete the namespace. Logs of a failed run are printed (tail). For
# e2e/run (E2E_SUMMARY=1) the very last line is "N passed, M failed".
e2e_cleanup() {
  local rc=$?
  set +e
  if [[ -n "$E2E_NETNS" ]] && ip netns list | grep -qw "$E2E_NETNS"; then
    local pids
    pids="$(ip netns pids "$E2E_NETNS" 2>/dev/null)"
    if [[ -n "$pids" ]]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null
      for _ in $(seq 1 50); do
        pids="$(ip netns pids "$E2E_NETNS" 2>/dev/null)"
        [[ -z "$pids" ]] && break
        sleep 0.2
      done
      # shellcheck disable=SC2086
      [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
    fi
    # The containers run in the namespace but their conmon does not (ip
    # netns pids does not see it): gone with their process (--rm); any
    # left is removed by the label the harness gives them.
    if command -v podman >/dev/null; then
      local left
      left="$(podman ps -aq --filter "label=io.ownerguard.e2e.netns=$E2E_NETNS" 2>/dev/null)"
      # shellcheck disable=SC2086
      [[ -n "$left" ]] && podman rm -f -t 0 $left >/dev/null 2>&1
    fi
    ip netns del "$E2E_NETNS"
  fi
  if [[ -n "$E2E_WORK" && -d "$E2E_WORK" ]]; then
    if [[ $rc -ne 0 ]]; then
      local f
      for f in "$E2E_WORK"/logs/*.log; do
        [[ -f "$f" && "$(basename "$f")" != audit-* ]] || continue
        printf '\n----- last lines of %s\n' "$(basename "$f")"
        tail -n 40 "$f"
      done
    fi
    if [[ -n "${E2E_KEEP:-}" ]]; then
      log "kept $E2E_WORK"
    else
      rm -rf "$E2E_WORK"
    fi
  fi
  if [[ -n "${E2E_SUMMARY:-}" ]]; then
    if [[ -z "${E2E_FAILED:-}" ]]; then
      log "failed before any scenario ran"
      E2E_PASSED=0 E2E_FAILED=1
      rc=1
    fi
    echo "$E2E_PASSED passed, $E2E_FAILED failed, ${E2E_SKIPPED:-0} skipped, each for its reason above (Kubernetes ${E2E_KUBE_VERSION:-?})"
  fi
  exit $rc
}

# Count the leaf tests of a `go test -v` log (a test with subtests counts
# through its subtests) into E2E_PASSED, E2E_FAILED and E2E_SKIPPED,
# naming each failure. A skip counts as skipped only when the scenario
# recorded it with its reason ($E2E_WORK/skipped, written by skipFor: an
# API of a later minor, the published image in a run of the binary); any
# other skip counts as failed. A binary that failed outside any test counts as one
# failure. Returns non-zero when something failed.
e2e_count() {
  local file="$1" status="$2" counts versioned="$E2E_WORK/skipped"
  [[ -f "$versioned" ]] || : >"$versioned"
  counts="$(awk -F'\t' '
    FILENAME == ARGV[1] { byversion[$1] = $2; next }
    match($0, /^ *--- (PASS|FAIL|SKIP): [^ ]+/) {
      split(substr($0, RSTART, RLENGTH), w, " ")
      sub(/:$/, "", w[2]); result[w[3]] = w[2]; order[n++] = w[3]
    }
    END {
      for (i = 0; i < n; i++) {
        name = order[i]; leaf = 1
        for (other in result) if (index(other, name "/") == 1) { leaf = 0; break }
        if (!leaf) continue
        if (result[name] == "PASS") p++
        else if (result[name] == "SKIP" && name in byversion) { s++; print "skipped: " name ": " byversion[name] > "/dev/stderr" }
        else { q++; if (result[name] == "FAIL") print "failed: " name > "/dev/stderr"; else print "skipped (counted as failed): " name > "/dev/stderr" }
      }
      printf "%d %d %d\n", p, q, s
    }' "$versioned" "$file")"
  read -r E2E_PASSED E2E_FAILED E2E_SKIPPED <<<"$counts"
  if [[ "$status" -ne 0 && "$E2E_FAILED" -eq 0 ]]; then
    log "the scenarios exited with status $status outside any test (setup, timeout or crash)"
    E2E_FAILED=1
  fi
  [[ "$E2E_FAILED" -eq 0 ]]
}

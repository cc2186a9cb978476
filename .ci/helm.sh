# Sourced by .ci/chart-check and .ci/alerts (expects REPO, the repository's
# root): the Helm both judge the chart with, and where CI's Go builds are
# cached. Helm: $OWNERGUARD_HELM if set; else built from helm.sh/helm/v3
# (the end-to-end suite's module e2e/helm when present, so both judge the
# chart with the same Helm; else the version pinned below), with the
# Kubernetes version stamped in as Helm's own Makefile does. Needs Go;
# modules come from the Go proxy. Builds are cached in $CARGO_TARGET_DIR
# (or target/) under chart-check/. Sets HELM, KUBE_VERSION, TARGET, BIN and
# exports OWNERGUARD_HELM.

HELM_VERSION=v3.19.5
# The Kubernetes version the chart is rendered for: the e2e control plane's.
KUBE_VERSION=1.34.4
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
[[ "$TARGET" = /* ]] || TARGET="$REPO/$TARGET"
BIN="$TARGET/chart-check"
mkdir -p "$BIN"

build_helm() {
  local module dir
  if [[ -f "$REPO/e2e/helm/go.mod" ]]; then
    dir="$REPO/e2e/helm"
  else
    dir="$BIN/helm-module"
    mkdir -p "$dir"
    if [[ ! -f "$dir/go.mod" ]] || ! grep -q "helm.sh/helm/v3 $HELM_VERSION" "$dir/go.mod"; then
      rm -f "$dir/go.mod" "$dir/go.sum"
      (cd "$dir" && go mod init ownerguard.io/ci/helm >/dev/null 2>&1 && go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >/dev/null 2>&1)
    fi
  fi
  module="$(cd "$dir" && go list -m -f '{{.Version}}' helm.sh/helm/v3)"
  if [[ -x "$BIN/helm" && "$(cat "$BIN/helm.version" 2>/dev/null)" == "$module $KUBE_VERSION" ]]; then
    return
  fi
  local major="${KUBE_VERSION%%.*}" minor
  minor="$(cut -d. -f2 <<<"$KUBE_VERSION")"
  local ldflags="-X helm.sh/helm/v3/internal/version.version=$module"
  local pkg
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done
  echo "building helm $module (from $dir)"
  (cd "$dir" && nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$BIN/helm" helm.sh/helm/v3/cmd/helm)
  echo "$module $KUBE_VERSION" >"$BIN/helm.version"
}

if [[ -n "${OWNERGUARD_HELM:-}" ]]; then
  HELM="$OWNERGUARD_HELM"
else
  build_helm
  HELM="$BIN/helm"
fi
export OWNERGUARD_HELM="$HELM"

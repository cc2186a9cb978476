# Sourced by .ci/chart-check and .ci/alerts (expects REPO, the repository's
# root): the Helm both judge the chart with, and where CI's Go builds are
# cached. Helm: $OWNERGUARD_HELM if set; else real Helm 4 built from its
# Go module by e2e/helm/build (the end-to-end suite's pins, so both judge
# the chart with the same Helm; Helm 3 beside it as $HELM3). Needs Go;
# modules come from the Go proxy. Builds are cached in $CARGO_TARGET_DIR
# (or target/) under chart-check/. Sets HELM, HELM3, KUBE_VERSION,
# KUBE_VERSION_OLDEST, TARGET, BIN, AHLINT and exports OWNERGUARD_HELM.

# The Kubernetes releases the chart is rendered for: the newest and the
# oldest control plane the end-to-end suite pins (e2e/plane/k8s-<minor>.mod).
kube_release() { awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { sub(/^v/, "", $2); print $2; exit }' "$1"; }
mapfile -t _planes < <(ls "$REPO"/e2e/plane/k8s-*.mod | sort -t. -k2,2n)
KUBE_VERSION="$(kube_release "${_planes[-1]}")"
KUBE_VERSION_OLDEST="$(kube_release "${_planes[0]}")"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
[[ "$TARGET" = /* ]] || TARGET="$REPO/$TARGET"
BIN="$TARGET/chart-check"
mkdir -p "$BIN"

if [[ -n "${OWNERGUARD_HELM:-}" ]]; then
  HELM="$OWNERGUARD_HELM"
  HELM3="${OWNERGUARD_HELM3:-}"
else
  bash "$REPO/e2e/helm/build" "$BIN"
  HELM="$BIN/helm"
  HELM3="$BIN/helm3"
fi
export OWNERGUARD_HELM="$HELM"
export OWNERGUARD_KUBE_VERSION="$KUBE_VERSION"

# The chart's Artifact Hub metadata, as Artifact Hub reads it
# (e2e/helm/ahlint); Go's build cache makes a rebuild cheap.
AHLINT="$BIN/ahlint"
(cd "$REPO/e2e/helm" && nice -n 19 go build -trimpath -o "$AHLINT" ./ahlint)

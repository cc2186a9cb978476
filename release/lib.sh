# Sourced by release/sbom and release/publish (expects VERSION, ARCHIVE,
# work, and die): what both require before they describe or publish an
# image.

# The image must hold the build of this checkout, and the checkout must
# be what was committed: the SBOMs and the provenance describe the
# checkout, and are attached to the image.
require_image_of_checkout() {
  python3 release/check-sbom.py extract-binary "$ARCHIVE" "$work/image-ownerguard"
  chmod +x "$work/image-ownerguard"
  local built commit
  built="$("$work/image-ownerguard" --version)"
  commit="$(git rev-parse --short=12 HEAD)"
  [[ "$built" == "ownerguard $VERSION (commit $commit, "* ]] \
    || die "the image holds '$built', not the build of this checkout (ownerguard $VERSION, commit $commit): bash .ci/image first"
  [[ -z "$(git status --porcelain --untracked-files=no)" ]] \
    || die "the work tree has changes the image was not built from: commit them, then bash .ci/image"
}

# Sourced by the scripts that build, describe or publish a release:
# .ci/image, e2e/lib.sh, bench/lib.sh, release/*.

# The flags of every build of target/release/ownerguard, given as
# CARGO_ENCODED_RUSTFLAGS (paths with spaces survive it):
#
#   CARGO_ENCODED_RUSTFLAGS="$(release_rustflags "$REPO")" cargo build --release --locked
#
# rustc writes the paths of the sources it compiles into the binary (the
# locations that panic and assertion messages name): the dependencies'
# under the cargo home, this crate's under the checkout, generated code
# under the target directory. Mapped to fixed prefixes, they no longer
# depend on where the checkout, the cargo home or the target directory
# is, and two builds of one commit are the same binary (release/reproduce
# proves it). Every script that builds the release binary uses the same
# flags, so that one build serves them all instead of each rebuilding
# the others' (the flags are part of cargo's fingerprint). Flags of your
# own in RUSTFLAGS are not added: a release is built with these alone.
release_rustflags() {
  local repo cargo_home target sep=$'\x1f'
  # Physical paths, as cargo hands them to rustc (getcwd resolves links).
  repo="$(realpath -m "$1")"
  cargo_home="$(realpath -m "${CARGO_HOME:-$HOME/.cargo}")"
  target="$(cd "$repo" && realpath -m "${CARGO_TARGET_DIR:-target}")"
  # rustc applies the last mapping that matches: the most specific last
  # (a target directory inside the checkout is /src/target either way).
  printf '%s' "--remap-path-prefix=$cargo_home=/cargo$sep--remap-path-prefix=$repo=/src$sep--remap-path-prefix=$target=/src/target"
}

# Before release/sbom and release/publish describe or publish an image
# (expects VERSION, ARCHIVE, work, and die):

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

# Sourced by the scripts that build, describe or publish a release:
# .ci/image, e2e/lib.sh, bench/lib.sh, release/*.

# The flags of every build of target/release/ownerguard, given as
# CARGO_ENCODED_RUSTFLAGS (paths with spaces survive it); release_build
# below builds with them.
#
# rustc writes the paths of the sources it compiles into the binary (the
# locations that panic and assertion messages name): the dependencies'
# under the cargo home, this crate's under the checkout, generated code
# under the target directory. Mapped to fixed prefixes, they no longer
# depend on where the checkout, the cargo home or the target directory
# is, and two builds of one commit are the same binary (release/reproduce
# proves it). Every script that builds the release binary uses the same
# flags, so that one build serves them all instead of each rebuilding
# the others' (the flags are part of cargo's fingerprint: a release build
# with other flags in the same target directory rebuilds everything).
# CARGO_ENCODED_RUSTFLAGS replaces RUSTFLAGS and the rustflags of any
# .cargo/config.toml: a release is built with these flags alone.
release_rustflags() {
  local repo given target from to maps=()
  repo="$(realpath -m "${1:?release_rustflags: which checkout?}")" || return 1
  given="${CARGO_HOME:-${HOME:?release_rustflags: neither CARGO_HOME nor HOME is set}/.cargo}"
  # cargo takes a relative CARGO_HOME from where it runs: the checkout.
  [[ "$given" == /* ]] || given="$repo/$given"
  target="$(cd "$repo" && realpath -m "${CARGO_TARGET_DIR:-target}")" || return 1
  # The cargo home as cargo gives it to rustc (as set, links kept) and
  # resolved; the checkout as cargo sees it (getcwd resolves links).
  maps=("$given=/cargo" "$(realpath -m "$given")=/cargo" "$repo=/src" "$target=/src/target")
  for from in "${maps[@]}"; do
    [[ "${from%=*}" == /?* ]] || { echo "release_rustflags: empty or relative prefix in '$from'" >&2; return 1; }
  done
  # rustc applies the last mapping that matches: shortest prefix first,
  # so that the most specific one wins (a cargo home or a target
  # directory inside the checkout).
  local sep=$'\x1f' out=""
  while IFS= read -r to; do
    out+="${out:+$sep}--remap-path-prefix=$to"
  done < <(for from in "${maps[@]}"; do printf '%d\t%s\n' "${#from}" "$from"; done \
    | sort -n -s -k1,1 | cut -f2- | awk '!seen[$0]++')
  printf '%s' "$out"
}

# release_build CHECKOUT [CARGO ARGS...]: `cargo build --release --locked`
# in CHECKOUT with the flags above: the one way every script builds the
# release binary.
release_build() {
  local repo="$1" flags
  shift
  flags="$(release_rustflags "$repo")" || return 1
  (cd "$repo" && CARGO_ENCODED_RUSTFLAGS="$flags" cargo build --release --locked "$@")
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

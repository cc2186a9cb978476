# syntax=docker/dockerfile:1
# A small non-root image: the release binary on distroless cc (glibc,
# libgcc_s, CA certificates, tzdata; no shell, no package manager), running
# as uid 65532.
#
#   docker build -t ownerguard:0.5.0 .
#
# compiles in BUILD_IMAGE and runs on RUNTIME_IMAGE, both pulled from their
# public registries. CI, which reaches no registry, makes both bases from
# Debian's packages and hands in the release binary it already built
# (.ci/image):
#
#   podman build --build-arg BUILD_IMAGE=<local> --build-arg RUNTIME_IMAGE=<local> \
#     --build-arg BINARY=prebuilt .
#
# Either way the last stage, `runtime`, is the one users get. Podman before
# 4.4 (Debian 12's 4.3) ignores BINARY's default when it picks the stages to
# build ("build: image not known"): give it, --build-arg BINARY=build.

ARG BUILD_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# Where the binary comes from: `build` compiles it here, `prebuilt` takes
# target/release/ownerguard from the build context (`cargo build --release
# --locked` on a glibc no newer than the runtime's: Debian 12's 2.36).
ARG BINARY=build

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# The paths rustc writes into the binary (panic locations) without the
# cargo home's place, as every release build maps them (release/lib.sh):
# the sources here are under /src already.
ENV RUSTFLAGS="--remap-path-prefix=${CARGO_HOME:-/usr/local/cargo}=/cargo"
# Dependencies first, so that a source change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY src ./src
# What `ownerguard --version` names: the build context has no .git, so give
# --build-arg OWNERGUARD_COMMIT=$(git rev-parse --short=12 HEAD)
# --build-arg SOURCE_DATE_EPOCH=$(git log -1 --format=%ct); else "unknown".
ARG OWNERGUARD_COMMIT
ARG SOURCE_DATE_EPOCH
COPY build.rs ./
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin ownerguard \
    && strip target/release/ownerguard

FROM ${BUILD_IMAGE} AS prebuilt
WORKDIR /src
COPY target/release/ownerguard target/release/ownerguard
RUN strip target/release/ownerguard

# The chosen one of the two above; a stage that is not used is not built.
FROM ${BINARY} AS binary

FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=binary /src/target/release/ownerguard /usr/local/bin/ownerguard
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/ownerguard"]
CMD ["serve", "--tls-cert=/etc/ownerguard/tls/tls.crt", "--tls-key=/etc/ownerguard/tls/tls.key"]

# syntax=docker/dockerfile:1
# A small non-root image: the release binary on distroless (glibc, CA
# certificates, no shell), running as uid 65532.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so that a source change does not rebuild them.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src
COPY src ./src
RUN touch src/main.rs src/lib.rs && cargo build --release --locked --bin ownerguard \
    && strip target/release/ownerguard

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/ownerguard /usr/local/bin/ownerguard
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/ownerguard"]
CMD ["serve", "--tls-cert=/etc/ownerguard/tls/tls.crt", "--tls-key=/etc/ownerguard/tls/tls.key"]

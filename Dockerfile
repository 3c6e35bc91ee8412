# syntax=docker/dockerfile:1
# jobgate's container image: a static-ish Rust binary on distroless, run as a non-root user.
#
#   docker build -t jobgate:0.1.0 .
#
# Three stages: the browser assets the binary embeds (npm, pinned by web/package-lock.json),
# the release build, and a runtime image holding only the binary and glibc. The build stage
# and the runtime share a Debian release (bookworm = debian12), so the binary finds the
# glibc it was linked against. See docs/DEPLOY.md.

ARG RUST_VERSION=1.95
ARG NODE_VERSION=20

# --- web assets: GraphiQL and React, fetched at build time, never at run time -------------
FROM node:${NODE_VERSION}-bookworm-slim AS web
WORKDIR /src/web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts --loglevel=error

# --- the binary ---------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
COPY . .
# build.rs uses web/node_modules as it is when the assets are there, so it needs no npm.
COPY --from=web /src/web/node_modules web/node_modules
# The caches keep crates and compiled dependencies between builds; the binary is copied
# out in the same step because the target cache is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin jobgate \
 && install -D -m 0755 target/release/jobgate /out/jobgate \
 && mkdir -p /out/data

# --- runtime ------------------------------------------------------------------------------
# distroless/cc: glibc, libgcc and CA certificates, no shell or package manager. Its
# `nonroot` user is 65532; it is given by number so that Kubernetes' runAsNonRoot can verify
# it without reading /etc/passwd.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="jobgate" \
      org.opencontainers.image.description="Asynchronous job gateway: GraphQL API, pushed status changes, jobs as Kubernetes Jobs" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/jobgate /usr/local/bin/jobgate
# The data directory, owned by the runtime user, for `docker run` without a volume;
# deploy/ mounts a PersistentVolumeClaim here.
COPY --from=build --chown=65532:65532 /out/data /var/lib/jobgate
USER 65532:65532
ENV JOBGATE_LISTEN=0.0.0.0:8080 \
    JOBGATE_DATA_DIR=/var/lib/jobgate
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/jobgate"]

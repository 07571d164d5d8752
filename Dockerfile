# Sandgate's container image: the one `sandgate` binary on a distroless base.
#
#   docker build -t registry.example.com/sandgate:0.1.0 .
#
# The image runs as the distroless `nonroot` user (uid/gid 65532), has no shell and no package
# manager, and is meant for a read-only root filesystem (the manifests mount an emptyDir on
# /tmp). The subcommand is the container's argument: `edge`, `runtime-api`, `model-gw`,
# `health-check ...` (the probes), `check-config`, `gen-secrets`, `admin ...`.

# ---- build ------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /src
# protobuf is compiled by protox (a Rust crate), so no system protoc is needed.
COPY . .
# The cache mounts keep the crate registry and the target directory between builds; the
# binary is copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && install -D -m 0755 target/release/sandgate /out/sandgate

# ---- run --------------------------------------------------------------------------------
# glibc, libgcc and the CA certificates (upstream HTTPS uses the system trust store).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/sandgate /sandgate
USER nonroot
# edge (REST and /metrics), runtime-api gRPC, model-gw gRPC, metrics of the gRPC services
EXPOSE 8080 50051 50052 9090
ENTRYPOINT ["/sandgate"]

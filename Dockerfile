# redis-lease image: Debian bookworm's Redis 7.0 (the server the whole test suite runs on;
# CI runs the module suite on Redis 8.2.3 and Valkey 9.1.2 too) with the module built in,
# plus `lease-run` and Debian's redis-sentinel. One image serves every role of
# docker-compose.yml: data node (`redis-server ... --loadmodule ...`), Sentinel
# (`redis-sentinel ...`) and elector (`lease-run ...` as the container's entrypoint).
# CI validates docker-compose.yml with `docker-compose config` (no Docker engine there) and,
# with scripts/check-docker-copyset, that the build stage's COPY lines hold the whole Cargo
# workspace (every member of Cargo.toml), so `cargo build --locked` can resolve it;
# scripts/tests/test_docker.py, that both stages are the Debian release the suite runs on and
# the runtime's redis-server is that release's own package (no other apt source).

# --- build: the module (cdylib) and lease-run, release ---
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libclang-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY lease-core ./lease-core
# Cargo.toml names bench/ (measurement programs, built as examples).
COPY bench ./bench
COPY testsupport ./testsupport
COPY client ./client
COPY harness ./harness
COPY fuzz ./fuzz
COPY model ./model
# Two builds: `--bin` selects targets in every package named, so one command with both -p
# built lease-run alone and no libredis_lease.so. scripts/package runs these RUN cargo lines
# as they stand, so its test fails when they do not produce both binaries.
RUN cargo build --release --locked -p redis-lease
RUN cargo build --release --locked -p redis-lease-client --bin lease-run

# --- runtime: the same Debian release and Redis package the tests use ---
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server redis-sentinel redis-tools ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /usr/local/lib/redis /data \
    && chown redis:redis /data
COPY --from=build /src/target/release/libredis_lease.so /usr/local/lib/redis/libredis_lease.so
COPY --from=build /src/target/release/lease-run /usr/local/bin/lease-run
# The binaries are the project's (BSD-3-Clause) and link the crates of
# THIRD-PARTY-LICENSES.txt (scripts/third-party): both licenses travel with them.
COPY LICENSE THIRD-PARTY-LICENSES.txt /usr/share/doc/redis-lease/
WORKDIR /data
USER redis
EXPOSE 6379 26379
# Module arguments (or `loadmodule ... lease.max-ttl N lease.grace-ms M` in a redis.conf) set
# lease.max-ttl, lease.grace-ms, lease.max-owner-len. After every start the module grants no
# new lease for lease.grace-ms (default = lease.max-ttl): see docs/deploy.md.
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", \
     "--loadmodule", "/usr/local/lib/redis/libredis_lease.so", \
     "--appendonly", "yes", "--appendfsync", "always"]

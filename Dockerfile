# redis-server with the redis-lease module built and loaded (for users; CI only validates
# docker-compose.yml, no Docker engine runs there).
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libclang-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY testsupport ./testsupport
COPY client ./client
COPY harness ./harness
RUN cargo build --release -p redis-lease

FROM redis:7.2-bookworm
COPY --from=build /src/target/release/libredis_lease.so /usr/local/lib/redis/libredis_lease.so
EXPOSE 6379
# Module arguments (or `lease.*` lines in a redis.conf) set lease.max-ttl, lease.grace-ms,
# lease.max-owner-len.
CMD ["redis-server", "--loadmodule", "/usr/local/lib/redis/libredis_lease.so", "--appendonly", "yes", "--appendfsync", "always"]

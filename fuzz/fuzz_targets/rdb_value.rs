#![no_main]
//! See `redis_lease_fuzz::rdb_value`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_lease_fuzz::rdb_value(data));

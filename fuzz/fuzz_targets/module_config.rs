#![no_main]
//! See `redis_lease_fuzz::module_config`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_lease_fuzz::module_config(data));

#![no_main]
//! See `redis_lease_fuzz::apply_effect`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_lease_fuzz::apply_effect(data));

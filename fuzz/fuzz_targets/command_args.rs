#![no_main]
//! See `redis_lease_fuzz::command_args`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_lease_fuzz::command_args(data));

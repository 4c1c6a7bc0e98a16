#![no_main]
//! See `redis_lease_fuzz::history_jsonl`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| redis_lease_fuzz::history_jsonl(data));

//! See `fuzz/harness.rs` (`urls`).
#![no_main]

// Each target uses one of the shared bodies.
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::urls(data));

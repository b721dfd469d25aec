//! See `fuzz/harness.rs` (`csr`).
#![no_main]

// Each target uses one of the shared bodies.
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::csr(data));

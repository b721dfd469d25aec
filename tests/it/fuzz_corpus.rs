//! The fuzz targets' committed corpora (`fuzz/corpus/<target>`) and any
//! crash that fuzzing found (`fuzz/regressions/<target>`), replayed through
//! the same bodies on the stable toolchain (`fuzz/harness.rs`): a decoder
//! change that panics on a known input fails here, without cargo-fuzz.

#[path = "../../fuzz/harness.rs"]
mod harness;

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            let data = std::fs::read(e.path()).unwrap();
            f(&data);
            n += 1;
        }
    }
    n
}

#[test]
fn rpc_message_corpus() {
    assert!(
        replay("rpc_message", harness::rpc_message) >= 22,
        "a seed per recorded fixture"
    );
}

#[test]
fn oslo_config_corpus() {
    assert!(replay("oslo_config", harness::oslo_config) >= 3);
}

#[test]
fn urls_corpus() {
    assert!(replay("urls", harness::urls) >= 6);
}

#[test]
fn csr_corpus() {
    assert!(replay("csr", harness::csr) >= 2);
}

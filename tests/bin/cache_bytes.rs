//! What the status cache holds per cluster, counted rather than timed
//! (issue 33): one cluster's objects as a real kube-apiserver serves them
//! (`tests/fixtures/status-cache/*.json`, captured from a
//! `scripts/bench-status.sh` fleet: capi-sim's objects after Magnum's client
//! created the cluster, `managedFields` and all) are filed in a
//! [`conductor::lifecycle::cache::Cache`] under N cluster names, as the
//! conductor's watches file them, and the heap the cache then holds is
//! counted by this binary's allocator: bytes asked for (deterministic: the
//! regression check in `tests/python/test_benchmarks.py` uses it) and
//! glibc's own figure (`mallinfo2`: with its per-allocation overhead, closer
//! to what RSS pays).
//!
//!     mc-cache-bytes --fixture tests/fixtures/status-cache/v1beta1.json --clusters 3000
//!
//! Prints one JSON line.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;
use conductor::lifecycle::cache::{Cache, Role};

use serde_json::Value;

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the
// counters only add and subtract the sizes the caller states.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
            LIVE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE_ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Parser)]
#[command(about = "Heap the status cache holds per cluster (one cluster's objects filed N times)")]
struct Args {
    /// A JSON array of one CAPI cluster's objects as the apiserver serves them.
    #[arg(long)]
    fixture: std::path::PathBuf,
    /// How many clusters to file.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Print each fixture object as the cache keeps it (projected), with
    /// its size as served and as kept, instead of counting.
    #[arg(long)]
    show: bool,
}

/// The cache's role of an object, from its kind (as the watches assign it).
fn role_of(o: &Value) -> Option<Role> {
    Some(match o.get("kind")?.as_str()? {
        "Cluster" => Role::Cluster,
        "OpenStackCluster" => Role::Infra,
        "KubeadmControlPlane" => Role::ControlPlane,
        "MachineDeployment" => Role::MachineDeployment,
        "Machine" => Role::Machine,
        "HelmReleaseProxy" => Role::HelmRelease,
        "EndpointSlice" => Role::ApiSlice,
        _ => return None,
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_in_use() -> usize {
    // SAFETY: mallinfo2 only reads glibc's arena statistics.
    unsafe { libc::mallinfo2().uordblks }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn malloc_in_use() -> usize {
    0
}

fn main() -> ExitCode {
    let args = Args::parse();
    let text = match std::fs::read_to_string(&args.fixture) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mc-cache-bytes: {}: {e}", args.fixture.display());
            return ExitCode::from(2);
        }
    };
    let objects: Vec<Value> = match serde_json::from_str(&text) {
        Ok(Value::Array(a)) => a,
        _ => {
            eprintln!(
                "mc-cache-bytes: {}: not a JSON array of objects",
                args.fixture.display()
            );
            return ExitCode::from(2);
        }
    };
    // The seed cluster's name, replaced in every object's text by each copy's.
    let Some(seed) = objects
        .iter()
        .find(|o| o.get("kind").and_then(Value::as_str) == Some("Cluster"))
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        eprintln!("mc-cache-bytes: the fixture has no Cluster");
        return ExitCode::from(2);
    };
    let seeds: Vec<(Role, String)> = objects
        .iter()
        .filter_map(|o| Some((role_of(o)?, o.to_string())))
        .collect();
    if args.show {
        for (role, text) in &seeds {
            let Ok(o) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            let kept = conductor::lifecycle::cache::project(*role, o).to_string();
            println!(
                "{role:?}: {} bytes served, {} kept\n{kept}",
                text.len(),
                kept.len()
            );
        }
        return ExitCode::SUCCESS;
    }
    let mut cache = Cache::default();
    let (bytes0, allocations0, malloc0) = (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_ALLOCATIONS.load(Ordering::Relaxed),
        malloc_in_use(),
    );
    for i in 0..args.clusters {
        let name = format!("{seed}-c{i:05}");
        for (role, text) in &seeds {
            match serde_json::from_str::<Value>(&text.replace(&seed, &name)) {
                Ok(o) => {
                    cache.apply(*role, o);
                }
                Err(e) => {
                    eprintln!("mc-cache-bytes: a renamed object does not parse: {e}");
                    return ExitCode::from(2);
                }
            }
        }
    }
    let n = args.clusters.max(1) as f64;
    let per = |now: usize, before: usize| (now.saturating_sub(before)) as f64 / n;
    let text_bytes: usize = Role::ALL.iter().map(|r| cache.size(*r).bytes).sum();
    let cached: usize = Role::ALL.iter().map(|r| cache.size(*r).objects).sum();
    let out = serde_json::json!({
        "clusters": args.clusters,
        "objects_per_cluster": cached as f64 / n,
        "heap_bytes_per_cluster": per(LIVE_BYTES.load(Ordering::Relaxed), bytes0).round(),
        "allocations_per_cluster": per(LIVE_ALLOCATIONS.load(Ordering::Relaxed), allocations0),
        "malloc_in_use_bytes_per_cluster": per(malloc_in_use(), malloc0).round(),
        "projected_json_bytes_per_cluster": (text_bytes as f64 / n).round(),
    });
    println!("{out}");
    ExitCode::SUCCESS
}

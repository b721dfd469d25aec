//! Handing freed memory back to the system.
//!
//! glibc's allocator keeps what a burst freed in its arenas. After 10,000
//! creates through the RPC path (their messages, rendered objects, rows)
//! the process held 270 MiB, of which `malloc_trim(0)` returned 77 MiB at
//! once (docs/benchmarks.md): RSS then says what the fleet needs, not the
//! largest burst seen. Trimming walks the arenas (milliseconds); once a
//! minute is enough. Other allocators and platforms: nothing to do.

use std::time::Duration;

/// How often the allocator is asked to give free memory back.
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

/// Trim every `every` for the life of the process.
pub fn spawn_trimmer(every: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate: nothing to give back yet
        loop {
            tick.tick().await;
            trim();
        }
    });
}

/// Set `gauge` (labels `in_use`, `free`) from [`heap_now`] (at each scrape).
pub fn export_heap(gauge: &prometheus::IntGaugeVec) {
    let clamp = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    if let Some(h) = heap_now() {
        gauge.with_label_values(&["in_use"]).set(clamp(h.in_use));
        gauge.with_label_values(&["free"]).set(clamp(h.free));
    }
}

/// The allocator's own account of its heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    /// Bytes in allocations the process holds.
    pub in_use: usize,
    /// Bytes freed and kept by the allocator (not given back to the system).
    pub free: usize,
}

/// The heap now (glibc's `mallinfo2`: it walks the arenas, milliseconds).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_now() -> Option<Heap> {
    // SAFETY: mallinfo2 only reads glibc's arena statistics under their locks.
    let m = unsafe { libc::mallinfo2() };
    Some(Heap {
        in_use: m.uordblks.saturating_add(m.hblkhd),
        free: m.fordblks,
    })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_now() -> Option<Heap> {
    None
}

/// Release free memory held by the allocator; true if some was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim() -> bool {
    // SAFETY: malloc_trim only walks glibc's own arenas and takes their
    // locks; it is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

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

//! Crash points for the restart tests. With `MAGNUM_CONDUCTOR_FAILPOINT=<name>`
//! in the environment, the first time the process reaches the point called
//! `<name>` it stops itself with SIGSTOP: every thread freezes at once, before
//! the next step runs, so the test can `kill -9` it there (no cleanup, no
//! acknowledgement, no later step of the same operation). With
//! `<name>:sleep=<ms>`, every pass through that point waits that long instead:
//! a slow handler (call-monitor heartbeat test) or a window in which a test
//! breaks something (database outage test). With `<name>:wait=<path>`, every
//! pass waits until the file `<path>` exists: a handler held for exactly as
//! long as the test needs, whatever the machine's load (backlog test).
//!
//! Compiled only with the `failpoints` cargo feature (the test suite builds
//! with it; `cargo build` and `cargo build --release` do not): without it a
//! hit is an empty inline function and the binary holds no trace of them
//! (`scripts/test-all.sh` checks that no crash-point string is in a
//! feature-less build).

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn hit(_name: &str) {}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn delay(_scope: &str, _name: &str) {}

#[cfg(feature = "failpoints")]
pub use armed::{delay, hit};

#[cfg(feature = "failpoints")]
mod armed {

    use std::sync::OnceLock;

    static ARMED: OnceLock<Option<String>> = OnceLock::new();

    /// Freeze the whole process here if this point is armed (`<name>`), or
    /// wait if it is armed with `<name>:sleep=<ms>`.
    pub async fn hit(name: &str) {
        let armed = ARMED.get_or_init(|| std::env::var("MAGNUM_CONDUCTOR_FAILPOINT").ok());
        match armed.as_deref() {
            Some(a) if a == name => stop(name),
            Some(a) if armed_point(a).is_some_and(|(p, _)| p == name) => {
                if let Some((scope, point)) = name.split_once('.') {
                    delay(scope, point).await;
                }
            }
            _ => {}
        }
    }

    fn stop(name: &str) {
        tracing::error!(failpoint = name, "failpoint reached: stopping for kill -9");
        eprintln!("magnum-conductor: failpoint {name} reached: stopping (SIGSTOP) for kill -9");
        // SAFETY: raise(3) takes a plain signal number and touches no memory of ours.
        let rc = unsafe { libc::raise(libc::SIGSTOP) };
        if rc != 0 {
            // Cannot stop: die here instead, which is as abrupt.
            std::process::abort();
        }
        // Resumed by SIGCONT instead of killed: the test did not want the
        // process to carry on from a failpoint.
        std::process::abort();
    }

    /// The point and the wait of `<point>:sleep=<ms>` or `<point>:wait=<path>`.
    fn armed_point(armed: &str) -> Option<(&str, Wait<'_>)> {
        if let Some((point, ms)) = armed.split_once(":sleep=") {
            return Some((point, Wait::Sleep(ms)));
        }
        armed
            .split_once(":wait=")
            .map(|(point, path)| (point, Wait::File(path)))
    }

    enum Wait<'a> {
        Sleep(&'a str),
        File(&'a str),
    }

    /// Wait here if the point `<scope>.<name>` is armed with `...:sleep=<ms>`
    /// or `...:wait=<path>`.
    pub async fn delay(scope: &str, name: &str) {
        let armed = ARMED.get_or_init(|| std::env::var("MAGNUM_CONDUCTOR_FAILPOINT").ok());
        let Some((point, wait)) = armed.as_deref().and_then(armed_point) else {
            return;
        };
        if point.split_once('.') != Some((scope, name)) {
            return;
        }
        match wait {
            Wait::Sleep(ms) => match ms.parse::<u64>() {
                Ok(ms) => {
                    tracing::warn!(failpoint = point, ms, "failpoint reached: sleeping");
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                Err(_) => {
                    tracing::warn!(failpoint = point, "failpoint sleep is not a number of ms")
                }
            },
            Wait::File(path) => {
                tracing::warn!(
                    failpoint = point,
                    path,
                    "failpoint reached: waiting for the file"
                );
                while !std::path::Path::new(path).exists() {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
    }
}

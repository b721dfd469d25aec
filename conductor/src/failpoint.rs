//! Crash points for the restart tests: with `MAGNUM_CONDUCTOR_FAILPOINT=<name>`
//! in the environment, the process aborts (no cleanup, no acknowledgement,
//! like `kill -9`) the first time it reaches the point called `<name>`.
//! Unset (always, in production) it is one cached comparison.

use std::sync::OnceLock;

static ARMED: OnceLock<Option<String>> = OnceLock::new();

/// Abort here if this point is armed.
pub fn hit(name: &str) {
    let armed = ARMED.get_or_init(|| std::env::var("MAGNUM_CONDUCTOR_FAILPOINT").ok());
    if armed.as_deref() == Some(name) {
        tracing::error!(failpoint = name, "failpoint reached: aborting");
        eprintln!("magnum-conductor: failpoint {name} reached: aborting");
        std::process::abort();
    }
}

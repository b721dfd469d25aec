//! Small pieces the I/O modules share.

use std::sync::{Mutex, MutexGuard};

/// A lock whose holder panicked is still the data (the simulator keeps
/// going; a poisoned cache is no reason to stop).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// What went wrong that a test should see: each message once, the newest
/// [`Recent::KEPT`], also logged.
#[derive(Debug, Default)]
pub struct Recent(Mutex<Vec<String>>);

impl Recent {
    pub const KEPT: usize = 50;

    pub fn push(&self, msg: String) {
        tracing::warn!("{msg}");
        let mut all = lock(&self.0);
        if !all.contains(&msg) {
            all.push(msg);
            if all.len() > Self::KEPT {
                all.remove(0);
            }
        }
    }

    /// Oldest first.
    pub fn all(&self) -> Vec<String> {
        lock(&self.0).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_kept_once_and_only_the_newest_stay() {
        let r = Recent::default();
        r.push("a".into());
        r.push("a".into());
        assert_eq!(r.all(), vec!["a".to_string()]);
        for i in 0..Recent::KEPT {
            r.push(format!("m{i}"));
        }
        let all = r.all();
        assert_eq!(all.len(), Recent::KEPT);
        assert_eq!(all[0], "m0");
        assert_eq!(all.last().map(String::as_str), Some("m49"));
    }
}

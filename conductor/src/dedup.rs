//! Recently seen `_unique_id`s. oslo keeps the last 16 per listener; we keep
//! more, and also know which ones are still being handled, so a broker
//! redelivery (after a reconnect) of a request still in progress waits for
//! it instead of running it twice.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// How many completed ids are remembered.
pub const CAPACITY: usize = 4096;

#[derive(Clone)]
enum Entry {
    InFlight(Arc<Notify>),
    Done,
}

/// What to do with a message, given its `_unique_id`.
pub enum Seen {
    /// First time: handle it, then call [`Dedup::finish`].
    New,
    /// Being handled right now: wait on this, then just acknowledge.
    InFlight(Arc<Notify>),
    /// Handled already: acknowledge and drop.
    Done,
}

#[derive(Default)]
pub struct Dedup {
    inner: Mutex<(HashMap<String, Entry>, VecDeque<String>)>,
}

impl Dedup {
    pub fn check(&self, id: &str) -> Seen {
        let Ok(mut guard) = self.inner.lock() else {
            return Seen::New;
        };
        let (map, order) = &mut *guard;
        match map.get(id) {
            Some(Entry::InFlight(n)) => Seen::InFlight(n.clone()),
            Some(Entry::Done) => Seen::Done,
            None => {
                map.insert(id.to_string(), Entry::InFlight(Arc::new(Notify::new())));
                order.push_back(id.to_string());
                // Evict the oldest completed ids; in-flight ones go to the back.
                let mut scanned = 0;
                while order.len() > CAPACITY && scanned < order.len() {
                    scanned += 1;
                    let Some(old) = order.pop_front() else { break };
                    if matches!(map.get(&old), Some(Entry::InFlight(_))) {
                        order.push_back(old);
                    } else {
                        map.remove(&old);
                    }
                }
                Seen::New
            }
        }
    }

    /// Mark `id` handled and wake anyone waiting on it.
    pub fn finish(&self, id: &str) {
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        if let Some(Entry::InFlight(n)) = guard.0.insert(id.to_string(), Entry::Done) {
            n.notify_waiters();
        }
    }

    /// Forget `id` (the handler could not run; a redelivery must be handled).
    pub fn forget(&self, id: &str) {
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        if let Some(Entry::InFlight(n)) = guard.0.remove(id) {
            n.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_inflight_done() {
        let d = Dedup::default();
        assert!(matches!(d.check("a"), Seen::New));
        assert!(matches!(d.check("a"), Seen::InFlight(_)));
        d.finish("a");
        assert!(matches!(d.check("a"), Seen::Done));
        assert!(matches!(d.check("b"), Seen::New));
        d.forget("b");
        assert!(matches!(d.check("b"), Seen::New));
    }

    #[test]
    fn bounded() {
        let d = Dedup::default();
        for i in 0..(CAPACITY + 100) {
            let id = i.to_string();
            assert!(matches!(d.check(&id), Seen::New));
            d.finish(&id);
        }
        assert!(matches!(d.check("0"), Seen::New), "oldest evicted");
        assert!(matches!(d.check(&(CAPACITY + 99).to_string()), Seen::Done));
    }
}

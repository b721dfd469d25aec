//! Scriptable faults, so tests can watch a client cope with a misbehaving
//! apiserver: error answers (500, 429 with Retry-After, 503...), slow
//! answers, answers that never come, watches dropped or expired.
//!
//! A rule matches requests by method and path substring and fires a number
//! of times (or forever). Rules are set in process ([`crate::Sim::faults`])
//! or over HTTP: `POST /_sim/faults` with a [`Rule`] as JSON, `DELETE
//! /_sim/faults` to clear, `POST /_sim/compact` to expire all history.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a matching request gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Action {
    /// An error `Status` with this code (429 also sends `Retry-After: 1`).
    Error { code: u16 },
    /// Handle normally after a pause.
    Delay { ms: u64 },
    /// Never answer (the client's timeout fires).
    Hang,
    /// Watches: end the stream after this many events.
    DropWatch { after_events: usize },
    /// Watches: answer an ERROR event with 410 Gone.
    ExpireWatch,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// `GET`, `POST`, ... (any when absent).
    #[serde(default)]
    pub method: Option<String>,
    /// Substring of the path (any when absent), e.g. `/openstackclusters`.
    #[serde(default)]
    pub path: Option<String>,
    /// Only watch requests (`?watch=true`).
    #[serde(default)]
    pub watch_only: bool,
    /// How many requests it fires for (forever when absent).
    #[serde(default)]
    pub times: Option<usize>,
    pub action: Action,
}

#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
}

impl Faults {
    pub fn add(&self, rule: Rule) {
        self.lock().push(rule);
    }
    pub fn clear(&self) {
        self.lock().clear();
    }
    pub fn rules(&self) -> Vec<Rule> {
        self.lock().clone()
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        match self.rules.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The action for this request, if a rule fires (and count it).
    pub fn take(&self, method: &str, path: &str, is_watch: bool) -> Option<Action> {
        let mut rules = self.lock();
        let i = rules.iter().position(|r| {
            r.method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
                && r.path.as_deref().is_none_or(|p| path.contains(p))
                && (!r.watch_only || is_watch)
                && r.times != Some(0)
        })?;
        let action = rules[i].action.clone();
        if let Some(t) = rules[i].times.as_mut() {
            *t -= 1;
            if *t == 0 {
                rules.remove(i);
            }
        }
        Some(action)
    }
}

pub const HANG: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_fire_and_expire() {
        let f = Faults::default();
        f.add(Rule {
            method: Some("GET".into()),
            path: Some("/clusters".into()),
            watch_only: false,
            times: Some(2),
            action: Action::Error { code: 500 },
        });
        assert_eq!(f.take("POST", "/apis/x/v1/clusters", false), None);
        assert_eq!(
            f.take("get", "/apis/x/v1/clusters", false),
            Some(Action::Error { code: 500 })
        );
        assert!(f.take("GET", "/apis/x/v1/clusters/a", false).is_some());
        assert_eq!(
            f.take("GET", "/apis/x/v1/clusters", false),
            None,
            "fired twice, gone"
        );
        f.add(Rule {
            method: None,
            path: None,
            watch_only: true,
            times: None,
            action: Action::ExpireWatch,
        });
        assert_eq!(f.take("GET", "/x", false), None);
        assert_eq!(f.take("GET", "/x", true), Some(Action::ExpireWatch));
        assert_eq!(
            f.take("GET", "/x", true),
            Some(Action::ExpireWatch),
            "forever"
        );
    }
}

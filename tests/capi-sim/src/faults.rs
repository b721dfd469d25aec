//! Scriptable faults for the apiserver proxy ([`crate::proxy`]), so tests can
//! watch a client cope with a misbehaving apiserver: error answers (500,
//! 429 with Retry-After, 503...), slow answers, answers that never come,
//! watches cut. (A resumed watch answered 410 Gone is not faked: restart
//! the apiserver, [`crate::controlplane::ControlPlane::restart_apiserver`].)
//!
//! A rule matches requests by method and path substring and fires a number
//! of times (or forever). Rules are set in process ([`crate::proxy::Proxy`])
//! or over HTTP: `POST /_sim/faults` with a [`Rule`] as JSON, `DELETE
//! /_sim/faults` to clear.

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
    /// Only requests from this client (the User-Agent's product, e.g.
    /// `magnum-conductor`; any when absent): a test's own reads pass.
    #[serde(default)]
    pub client: Option<String>,
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
        self.take_for("", method, path, is_watch)
    }

    /// [`Faults::take`] for a request of `client` (User-Agent product).
    pub fn take_for(
        &self,
        client: &str,
        method: &str,
        path: &str,
        is_watch: bool,
    ) -> Option<Action> {
        let mut rules = self.lock();
        let i = rules.iter().position(|r| {
            r.client.as_deref().is_none_or(|c| c == client)
                && r.method
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
    fn rules_can_match_one_client() {
        let f = Faults::default();
        f.add(Rule {
            method: None,
            path: None,
            watch_only: false,
            client: Some("magnum-conductor".into()),
            times: Some(1),
            action: Action::Error { code: 429 },
        });
        assert_eq!(f.take_for("python-urllib", "GET", "/x", false), None);
        assert_eq!(f.take("GET", "/x", false), None);
        assert_eq!(
            f.take_for("magnum-conductor", "GET", "/x", false),
            Some(Action::Error { code: 429 })
        );
        assert_eq!(f.take_for("magnum-conductor", "GET", "/x", false), None);
    }

    #[test]
    fn rules_fire_and_expire() {
        let f = Faults::default();
        f.add(Rule {
            method: Some("GET".into()),
            path: Some("/clusters".into()),
            watch_only: false,
            client: None,
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
            client: None,
            times: None,
            action: Action::DropWatch { after_events: 0 },
        });
        assert_eq!(f.take("GET", "/x", false), None);
        assert_eq!(
            f.take("GET", "/x", true),
            Some(Action::DropWatch { after_events: 0 })
        );
        assert_eq!(
            f.take("GET", "/x", true),
            Some(Action::DropWatch { after_events: 0 }),
            "forever"
        );
    }
}

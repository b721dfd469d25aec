//! The request context carried as `_context_*` keys.
//!
//! `magnum.common.context.RequestContext.from_dict` accepts and ignores
//! unknown keys, so do we; every key is kept (for notifications and for
//! calls we make on the user's behalf), and the secret ones never show in
//! `Debug` output.

use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// Keys whose values are credentials and must never be logged.
const SECRET_KEYS: &[&str] = &[
    "auth_token",
    "auth_token_info",
    "password",
    "trust_id",
    "trustee_password",
];

/// The deserialized RPC request context.
///
/// Read from a message's text, it keeps that text and where each entry's key
/// and value are in it; the entries become a map only when something asks
/// for more than a string (most handlers read a request id and little else,
/// and a call's ~30 entries parsed into a hashed map were a third of its
/// decoding; docs/benchmarks.md, "Instructions per message").
#[derive(Clone, Default)]
pub struct RequestContext {
    text: Option<Source>,
    map: OnceLock<Map<String, Value>>,
}

/// A message's text and its context's entries, in order.
#[derive(Clone)]
struct Source {
    text: String,
    entries: Vec<(EntryKey, EntryValue)>,
}

/// An entry's key (without `_context_`): where it is in the text, or
/// unescaped when the text had an escape in it.
#[derive(Clone)]
pub(crate) enum EntryKey {
    At(Range<usize>),
    Owned(String),
}

/// An entry's value: a string with no escape in it, where it is in the text
/// (without its quotes); any other value, parsed.
#[derive(Clone)]
pub(crate) enum EntryValue {
    At(Range<usize>),
    Parsed(Value),
}

impl Source {
    fn key<'a>(&'a self, k: &'a EntryKey) -> &'a str {
        match k {
            EntryKey::At(r) => self.text.get(r.clone()).unwrap_or_default(),
            EntryKey::Owned(s) => s,
        }
    }

    /// The last value given for `key` (a key given twice keeps its last
    /// value, as a dict does) if it is a string.
    fn str_of(&self, key: &str) -> Option<&str> {
        match &self
            .entries
            .iter()
            .rev()
            .find(|(k, _)| self.key(k) == key)?
            .1
        {
            EntryValue::At(r) => self.text.get(r.clone()),
            EntryValue::Parsed(v) => v.as_str(),
        }
    }

    fn parse(&self) -> Map<String, Value> {
        let mut map = Map::with_capacity(self.entries.len());
        for (k, v) in &self.entries {
            let value = match v {
                EntryValue::At(r) => {
                    Value::String(self.text.get(r.clone()).unwrap_or_default().to_string())
                }
                EntryValue::Parsed(v) => v.clone(),
            };
            map.insert(self.key(k).to_string(), value);
        }
        map
    }
}

impl RequestContext {
    /// Build from the `_context_`-stripped keys of a message.
    pub fn from_map(raw: Map<String, Value>) -> RequestContext {
        RequestContext {
            text: None,
            map: OnceLock::from(raw),
        }
    }

    /// A context whose entries are read from `text` (a message's, by
    /// [`crate::Incoming::from_body`]).
    pub(crate) fn from_text(text: String, entries: Vec<(EntryKey, EntryValue)>) -> RequestContext {
        RequestContext {
            text: Some(Source { text, entries }),
            map: OnceLock::new(),
        }
    }

    /// All keys, as received (secrets included: handle with care).
    pub fn raw(&self) -> &Map<String, Value> {
        self.map
            .get_or_init(|| self.text.as_ref().map(Source::parse).unwrap_or_default())
    }

    /// A string value; `None` when absent or not a string.
    fn str_of(&self, key: &str) -> Option<&str> {
        match (self.map.get(), &self.text) {
            (None, Some(source)) => source.str_of(key),
            _ => self.raw().get(key).and_then(Value::as_str),
        }
    }

    fn str_key(&self, keys: &[&str]) -> Option<&str> {
        keys.iter().find_map(|k| self.str_of(k))
    }

    fn bool_key(&self, key: &str) -> bool {
        match self.raw().get(key) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => {
                matches!(s.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on")
            }
            Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
            _ => false,
        }
    }

    pub fn user_id(&self) -> Option<&str> {
        self.str_key(&["user_id", "user"])
    }
    pub fn project_id(&self) -> Option<&str> {
        self.str_key(&["project_id", "project", "tenant"])
    }
    pub fn user_name(&self) -> Option<&str> {
        self.str_key(&["user_name"])
    }
    pub fn project_name(&self) -> Option<&str> {
        self.str_key(&["project_name"])
    }
    pub fn request_id(&self) -> Option<&str> {
        self.str_key(&["request_id"])
    }
    pub fn global_request_id(&self) -> Option<&str> {
        self.str_key(&["global_request_id"])
    }
    pub fn is_admin(&self) -> bool {
        self.bool_key("is_admin")
    }
    pub fn all_tenants(&self) -> bool {
        self.bool_key("all_tenants")
    }
    pub fn roles(&self) -> Vec<&str> {
        self.raw()
            .get("roles")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
    /// The Keystone token; a secret.
    pub fn auth_token(&self) -> Option<&str> {
        self.str_key(&["auth_token"])
    }
    pub fn auth_url(&self) -> Option<&str> {
        self.str_key(&["auth_url"])
    }
    /// The full token body (with catalog) from keystonemiddleware; a secret.
    pub fn auth_token_info(&self) -> Option<&Value> {
        self.raw().get("auth_token_info").filter(|v| !v.is_null())
    }
}

impl PartialEq for RequestContext {
    fn eq(&self, other: &RequestContext) -> bool {
        self.raw() == other.raw()
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_map();
        for (k, v) in self.raw() {
            if SECRET_KEYS.contains(&k.as_str()) && !v.is_null() {
                d.entry(k, &"<redacted>");
            } else {
                d.entry(k, v);
            }
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accessors_and_redaction() {
        let raw = json!({
            "user": "u1", "project_id": "p1", "is_admin": true, "all_tenants": "True",
            "auth_token": "gAAAAAsecret", "auth_token_info": {"token": {"catalog": []}},
            "password": "hunter2", "roles": ["member", "reader"], "trace_info": {"x": 1}
        });
        let ctx = RequestContext::from_map(raw.as_object().cloned().unwrap());
        assert_eq!(ctx.user_id(), Some("u1"));
        assert_eq!(ctx.project_id(), Some("p1"));
        assert!(ctx.is_admin() && ctx.all_tenants());
        assert_eq!(ctx.roles(), vec!["member", "reader"]);
        let dbg = format!("{ctx:?}");
        assert!(
            !dbg.contains("gAAAAAsecret") && !dbg.contains("hunter2") && !dbg.contains("catalog"),
            "{dbg}"
        );
        assert!(dbg.contains("trace_info"));
        assert!(RequestContext::default().user_id().is_none());
    }
}

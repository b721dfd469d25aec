//! The inner message dict of a request: routing keys (`_msg_id`,
//! `_reply_q`, `_timeout`, `_unique_id`), the flattened context, and the
//! `method`/`args`/`namespace`/`version` the dispatcher looks at.

use std::fmt;
use std::ops::Range;

use serde::Deserialize as _;
use serde::de::{self, Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::context::{EntryKey, EntryValue, RequestContext};
use crate::envelope::{self, EnvelopeError, Outer, type_name, version_is_compatible};
use crate::failure::RemoteFailure;

/// The RPC API version every Magnum conductor endpoint implements.
pub const ENDPOINT_VERSION: &str = "1.0";
const CONTEXT_PREFIX: &str = "_context_";

/// A decoded request, before its method is validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// `_msg_id`: present (and non-empty) for calls only.
    pub msg_id: Option<String>,
    /// `_reply_q`: where the reply goes (default exchange, this routing key).
    pub reply_q: Option<String>,
    /// `_unique_id`: duplicate detection.
    pub unique_id: Option<String>,
    /// `_timeout`: the call-monitor timeout in seconds, when the client set one.
    pub call_monitor_timeout: Option<f64>,
    pub context: RequestContext,
    /// What is left: `method`, `args`, `namespace`, `version`, anything else.
    pub body: Map<String, Value>,
}

/// A request that passed the dispatcher's checks.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcRequest {
    pub method: String,
    pub args: Map<String, Value>,
}

fn string_of(v: Option<Value>) -> Option<String> {
    match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// A message's keys sorted as they come: each key hashed once, into the map
/// it belongs to, the context's keys kept without their prefix. A key given
/// twice keeps its first place and its last value, as a JSON object parsed
/// into a dict does.
struct Split {
    ctx: Map<String, Value>,
    body: Map<String, Value>,
    msg_id: Option<Value>,
    reply_q: Option<Value>,
    unique_id: Option<Value>,
    timeout: Option<Value>,
}

impl Split {
    /// `context`: how many context keys to make room for (none when the
    /// context is read from the text instead).
    fn new(context: usize) -> Split {
        Split {
            // Sized for oslo's context (~30 keys) and the dispatcher's four:
            // no map grows (and rehashes) while a message is read.
            ctx: Map::with_capacity(context),
            body: Map::with_capacity(4),
            msg_id: None,
            reply_q: None,
            unique_id: None,
            timeout: None,
        }
    }

    fn add(&mut self, mut k: String, v: Value) {
        if k.starts_with(CONTEXT_PREFIX) {
            k.drain(..CONTEXT_PREFIX.len());
            self.ctx.insert(k, v);
            return;
        }
        match k.as_str() {
            "_msg_id" => self.msg_id = Some(v),
            "_reply_q" => self.reply_q = Some(v),
            "_unique_id" => self.unique_id = Some(v),
            "_timeout" => self.timeout = Some(v),
            _ => {
                self.body.insert(k, v);
            }
        }
    }

    fn finish(self, context: RequestContext) -> Incoming {
        let call_monitor_timeout = match self.timeout {
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        Incoming {
            msg_id: string_of(self.msg_id),
            reply_q: string_of(self.reply_q),
            unique_id: string_of(self.unique_id),
            call_monitor_timeout,
            context,
            body: self.body,
        }
    }
}

/// Reads a message's JSON text straight into a [`Split`]: no dict of the
/// whole message is built first and taken apart after (a fifth of a
/// `ping_conductor` call's instructions went into hashing every key into
/// both; docs/benchmarks.md). The context's entries go into no map: a key,
/// and a string value without escapes, are kept as places in the text; any
/// other value is parsed as met; the context makes its map only when asked
/// ([`RequestContext`]).
/// Anything but an object gives the name of what was found instead.
struct SplitVisitor<'de> {
    text: &'de str,
}

/// What [`SplitVisitor`] read: the split, and the context's entries.
type Read = (Split, Vec<(EntryKey, EntryValue)>);

/// Where `part` (borrowed from `text`) is in `text`.
fn place(text: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= text.len()).then_some(start..end)
}

/// A key or a context value as the text has it: a string borrowed when it
/// had no escape in it; any other value parsed.
enum Text<'de> {
    Borrowed(&'de str),
    Value(Value),
}

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::String(s.to_string())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::String(s)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::Null))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::Bool(b)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::from(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::from(n)))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Text<'de>, E> {
                Ok(Text::Value(Value::from(n)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text<'de>, A::Error> {
                Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Text::Value)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text<'de>, A::Error> {
                Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Text::Value)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Visitor<'de> for SplitVisitor<'de> {
    type Value = Result<Read, &'static str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut split = Split::new(0);
        let mut entries = Vec::with_capacity(32);
        let misplaced = || de::Error::custom("a borrowed part outside the message");
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let key = match key {
                Text::Borrowed(k) => match k.strip_prefix(CONTEXT_PREFIX) {
                    Some(name) => Some(EntryKey::At(place(self.text, name).ok_or_else(misplaced)?)),
                    None => {
                        let v: Value = map.next_value()?;
                        split.add(k.to_string(), v);
                        continue;
                    }
                },
                Text::Value(Value::String(k)) => match k.strip_prefix(CONTEXT_PREFIX) {
                    Some(name) => Some(EntryKey::Owned(name.to_string())),
                    None => {
                        let v: Value = map.next_value()?;
                        split.add(k, v);
                        continue;
                    }
                },
                // JSON keys are strings.
                Text::Value(_) => None,
            };
            let value = match map.next_value::<Text<'de>>()? {
                Text::Borrowed(v) => EntryValue::At(place(self.text, v).ok_or_else(misplaced)?),
                Text::Value(v) => EntryValue::Parsed(v),
            };
            if let Some(key) = key {
                entries.push((key, value));
            }
        }
        Ok(Ok((split, entries)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Parsed as values (not skipped), so a bad number deep inside fails
        // as it would in a dict.
        while seq.next_element::<Value>()?.is_some() {}
        Ok(Err("array"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Err("null"))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err("boolean"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err("number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err("number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err("number"))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err("string"))
    }
}

impl Incoming {
    /// Split a message dict into routing keys, context and body, as
    /// oslo's `unpack_context` does.
    pub fn from_message(msg: Map<String, Value>) -> Incoming {
        let mut split = Split::new(32);
        for (k, v) in msg {
            split.add(k, v);
        }
        let context = RequestContext::from_map(std::mem::take(&mut split.ctx));
        split.finish(context)
    }

    /// Decode an AMQP body (after decompression) into a request: what
    /// `Incoming::from_message(envelope::decode(body)?)` gives, errors
    /// included (a property test checks both ways agree), without building
    /// the inner dict (the conductor's path for every message).
    pub fn from_body(body: &[u8], limit: usize) -> Result<Incoming, EnvelopeError> {
        let inner = match envelope::outer(body, limit)? {
            Outer::Legacy(m) => return Ok(Incoming::from_message(m)),
            Outer::Enveloped(inner) => inner,
        };
        let mut de = serde_json::Deserializer::from_str(&inner);
        let (split, entries) = de
            .deserialize_any(SplitVisitor { text: &inner })
            .and_then(|r| de.end().map(|()| r))
            .map_err(|e| EnvelopeError::BadInnerMessage(e.to_string()))?
            .map_err(|found| EnvelopeError::BadInnerMessage(format!("found {found}")))?;
        Ok(split.finish(RequestContext::from_text(inner, entries)))
    }

    /// A call expects a reply; a cast does not (decided by `_msg_id` alone).
    pub fn is_call(&self) -> bool {
        self.msg_id.is_some()
    }

    /// The method name, when there is a usable one (for logs and metrics).
    pub fn method_name(&self) -> Option<&str> {
        self.body.get("method").and_then(Value::as_str)
    }

    /// Apply oslo's dispatcher rules: namespace must be null and the version
    /// compatible with 1.0 (else `UnsupportedVersion`), the method a string
    /// not starting with `_` that `is_known` accepts (else `NoSuchMethod`),
    /// `args` an object.
    pub fn request(&self, is_known: impl Fn(&str) -> bool) -> Result<RpcRequest, RemoteFailure> {
        let method = match self.body.get("method") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => String::from("None"),
            Some(other) => crate::pyvalue::py_str(other),
        };
        let version = match self.body.get("version") {
            None | Some(Value::Null) => ENDPOINT_VERSION.to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => crate::pyvalue::py_str(other),
        };
        let namespace_ok = matches!(self.body.get("namespace"), None | Some(Value::Null));
        match version_is_compatible(ENDPOINT_VERSION, &version) {
            None => {
                return Err(RemoteFailure::builtin(
                    "ValueError",
                    &format!(
                        "invalid RPC version {version:?}: expected major.minor[.revision] integers"
                    ),
                ));
            }
            Some(false) => return Err(RemoteFailure::unsupported_version(&version, Some(&method))),
            Some(true) if !namespace_ok => {
                return Err(RemoteFailure::unsupported_version(&version, Some(&method)));
            }
            Some(true) => {}
        }
        let method_ok = matches!(self.body.get("method"), Some(Value::String(_)));
        if !method_ok || method.starts_with('_') || !is_known(&method) {
            return Err(RemoteFailure::no_such_method(&method));
        }
        let args = match self.body.get("args") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(other) => {
                return Err(RemoteFailure::builtin(
                    "TypeError",
                    &format!("RPC args must be a JSON object, not {}", type_name(other)),
                ));
            }
        };
        Ok(RpcRequest { method, args })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn incoming(v: Value) -> Incoming {
        Incoming::from_message(v.as_object().cloned().unwrap())
    }

    #[test]
    fn unpacks_context_and_routing() {
        let i = incoming(json!({
            "method": "ping_conductor", "args": {}, "_msg_id": "m1", "_reply_q": "reply_x",
            "_timeout": null, "_unique_id": "u1", "_context_user": "bob", "_context_new_thing": 1
        }));
        assert!(i.is_call());
        assert_eq!(i.reply_q.as_deref(), Some("reply_x"));
        assert_eq!(i.context.user_id(), Some("bob"));
        assert_eq!(i.context.raw()["new_thing"], 1);
        assert!(!i.body.contains_key("_msg_id") && !i.body.contains_key("_context_user"));
        assert_eq!(
            i.request(|m| m == "ping_conductor").unwrap().method,
            "ping_conductor"
        );
    }

    #[test]
    fn the_split_keeps_every_key_once_in_its_order() {
        let i = incoming(json!({
            "version": "1.0", "_context_roles": ["a"], "method": "m", "_timeout": " 30 ",
            "_context_": "empty name", "args": {"x": 1}, "namespace": null, "extra": true,
            "_unique_id": "", "_context_request_id": "req-1"
        }));
        let body: Vec<&str> = i.body.keys().map(String::as_str).collect();
        assert_eq!(body, ["version", "method", "args", "namespace", "extra"]);
        let ctx: Vec<&str> = i.context.raw().keys().map(String::as_str).collect();
        assert_eq!(ctx, ["roles", "", "request_id"]);
        assert_eq!(i.context.raw()[""], "empty name");
        assert_eq!(i.call_monitor_timeout, Some(30.0));
        assert_eq!(i.unique_id, None, "an empty _unique_id is none");
        assert!(!i.is_call());
    }

    #[test]
    fn a_context_read_from_the_text_answers_as_the_dict_does() {
        // As Python's json.dumps writes it: non-ASCII escaped, a key given
        // twice (the last value wins), a string with an escape, a list.
        let inner = r#"{"_context_user": "first", "_context_request_id": "req-1",
            "_context_user_name": "Ren\u00e9", "_context_user": "bob", "_context_roles": ["a", "b"],
            "_context_is_admin": true, "_context_auth_token": "t\"k", "_context_project_id": null,
            "method": "ping_conductor", "args": {}, "_msg_id": "m"}"#;
        let body =
            serde_json::to_vec(&json!({"oslo.version": "2.0", "oslo.message": inner})).unwrap();
        let i = Incoming::from_body(&body, 1 << 20).unwrap();
        // Strings first (read from the text), then what needs the map.
        assert_eq!(i.context.user_id(), Some("bob"));
        assert_eq!(i.context.request_id(), Some("req-1"));
        assert_eq!(i.context.user_name(), Some("Ren\u{e9}"));
        assert_eq!(i.context.auth_token(), Some("t\"k"));
        assert_eq!(i.context.project_id(), None);
        assert!(i.context.is_admin());
        assert_eq!(i.context.roles(), ["a", "b"]);
        let keys: Vec<&str> = i.context.raw().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "user",
                "request_id",
                "user_name",
                "roles",
                "is_admin",
                "auth_token",
                "project_id"
            ]
        );
        assert_eq!(i.context.raw()["user"], "bob");
        // After the map exists, the same answers from it.
        assert_eq!(i.context.user_name(), Some("Ren\u{e9}"));
        assert!(format!("{:?}", i.context).contains(r#""auth_token": "<redacted>""#));
        let via_dict = Incoming::from_message(envelope::decode(&body, 1 << 20).unwrap());
        assert_eq!(i, via_dict);
    }

    #[test]
    fn dispatcher_rules() {
        let known = |m: &str| m == "ping_conductor";
        let f = incoming(json!({"method": "nope", "args": {}}))
            .request(known)
            .unwrap_err();
        assert_eq!(f.class, "NoSuchMethod");
        let f = incoming(json!({"method": "ping_conductor", "version": "1.1"}))
            .request(known)
            .unwrap_err();
        assert_eq!(f.class, "UnsupportedVersion");
        let f = incoming(json!({"method": "ping_conductor", "namespace": "x"}))
            .request(known)
            .unwrap_err();
        assert_eq!(f.class, "UnsupportedVersion");
        let f = incoming(json!({"method": "ping_conductor", "version": "one"}))
            .request(known)
            .unwrap_err();
        assert_eq!(f.class, "ValueError");
        let f = incoming(json!({"args": {}})).request(known).unwrap_err();
        assert_eq!(f.message, "Endpoint does not support RPC method None");
        let f = incoming(json!({"method": "ping_conductor", "args": [1]}))
            .request(known)
            .unwrap_err();
        assert_eq!(f.class, "TypeError");
        let f = incoming(json!({"method": "_private"}))
            .request(|_| true)
            .unwrap_err();
        assert_eq!(f.class, "NoSuchMethod");
        assert!(!incoming(json!({"method": "x", "_msg_id": ""})).is_call());
        assert!(
            incoming(json!({"method": "ping_conductor", "version": "1.0"}))
                .request(known)
                .is_ok()
        );
    }
}

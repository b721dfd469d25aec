//! The inner message dict of a request: routing keys (`_msg_id`,
//! `_reply_q`, `_timeout`, `_unique_id`), the flattened context, and the
//! `method`/`args`/`namespace`/`version` the dispatcher looks at.

use serde_json::{Map, Value};

use crate::context::RequestContext;
use crate::envelope::{type_name, version_is_compatible};
use crate::failure::RemoteFailure;

/// The RPC API version every Magnum conductor endpoint implements.
pub const ENDPOINT_VERSION: &str = "1.0";
const CONTEXT_PREFIX: &str = "_context_";

/// A decoded request, before its method is validated.
#[derive(Debug, Clone)]
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

impl Incoming {
    /// Split a message dict into routing keys, context and body, as
    /// oslo's `unpack_context` does.
    pub fn from_message(msg: Map<String, Value>) -> Incoming {
        // One pass, each key hashed once (into the map it belongs to), the
        // context's keys reused without their prefix: this runs for every
        // message (a quarter of a `ping_conductor` call's instructions went
        // into splitting by removals; docs/benchmarks.md).
        let mut ctx = Map::new();
        let mut body = Map::new();
        let (mut msg_id, mut reply_q, mut unique_id, mut timeout) = (None, None, None, None);
        for (mut k, v) in msg {
            if k.starts_with(CONTEXT_PREFIX) {
                k.drain(..CONTEXT_PREFIX.len());
                ctx.insert(k, v);
                continue;
            }
            match k.as_str() {
                "_msg_id" => msg_id = Some(v),
                "_reply_q" => reply_q = Some(v),
                "_unique_id" => unique_id = Some(v),
                "_timeout" => timeout = Some(v),
                _ => {
                    body.insert(k, v);
                }
            }
        }
        let call_monitor_timeout = match timeout {
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        Incoming {
            msg_id: string_of(msg_id),
            reply_q: string_of(reply_q),
            unique_id: string_of(unique_id),
            call_monitor_timeout,
            context: RequestContext::from_map(ctx),
            body,
        }
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

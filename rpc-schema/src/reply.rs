//! Replies to calls: the dict oslo's `_send_reply` builds, enveloped.

use serde_json::{Map, Value, json};

use crate::envelope;
use crate::failure::RemoteFailure;

/// What a call handler produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A serialized return value (`null` for `None`).
    Result(Value),
    Failure(RemoteFailure),
}

/// A fresh `_unique_id` (uuid4 hex, as oslo's `_add_unique_id`).
pub fn new_unique_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The body of the final reply to call `msg_id`.
pub fn encode_reply(msg_id: &str, outcome: &Outcome) -> Vec<u8> {
    let (result, failure) = match outcome {
        Outcome::Result(v) => (v.clone(), Value::Null),
        Outcome::Failure(f) => (Value::Null, Value::String(f.to_failure_string())),
    };
    encode(msg_id, result, failure, true)
}

/// A call-monitor heartbeat (`ending: false`, no result, no failure).
pub fn encode_heartbeat(msg_id: &str) -> Vec<u8> {
    encode(msg_id, Value::Null, Value::Null, false)
}

fn encode(msg_id: &str, result: Value, failure: Value, ending: bool) -> Vec<u8> {
    let mut m = Map::new();
    m.insert("result".into(), result);
    m.insert("failure".into(), failure);
    m.insert("ending".into(), json!(ending));
    m.insert("_msg_id".into(), json!(msg_id));
    m.insert("_unique_id".into(), json!(new_unique_id()));
    envelope::encode(&m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_has_oslo_keys_in_order() {
        let body = encode_reply("abc", &Outcome::Result(json!(true)));
        let inner = envelope::decode(&body, 1 << 20).unwrap();
        let keys: Vec<&str> = inner.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["result", "failure", "ending", "_msg_id", "_unique_id"]
        );
        assert_eq!(inner["result"], true);
        assert_eq!(inner["_unique_id"].as_str().unwrap().len(), 32);
        let hb = envelope::decode(&encode_heartbeat("abc"), 1 << 20).unwrap();
        assert_eq!(hb["ending"], false);
        let f = envelope::decode(
            &encode_reply("abc", &Outcome::Failure(RemoteFailure::not_supported("x"))),
            1 << 20,
        )
        .unwrap();
        assert!(f["result"].is_null());
        assert!(RemoteFailure::from_failure_string(f["failure"].as_str().unwrap()).is_some());
    }
}

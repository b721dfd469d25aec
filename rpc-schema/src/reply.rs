//! Replies to calls: the dict oslo's `_send_reply` builds, enveloped.

use serde_json::Value;

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
    match outcome {
        Outcome::Result(v) => encode(msg_id, v, None, true),
        Outcome::Failure(f) => encode(msg_id, &Value::Null, Some(f.to_failure_string()), true),
    }
}

/// A call-monitor heartbeat (`ending: false`, no result, no failure).
pub fn encode_heartbeat(msg_id: &str) -> Vec<u8> {
    encode(msg_id, &Value::Null, None, false)
}

/// The dict oslo's `_send_reply` builds, its keys in its order.
#[derive(serde::Serialize)]
struct Reply<'a> {
    result: &'a Value,
    failure: Option<String>,
    ending: bool,
    #[serde(rename = "_msg_id")]
    msg_id: &'a str,
    #[serde(rename = "_unique_id")]
    unique_id: String,
}

fn encode(msg_id: &str, result: &Value, failure: Option<String>, ending: bool) -> Vec<u8> {
    envelope::encode_message(&Reply {
        result,
        failure,
        ending,
        msg_id,
        unique_id: new_unique_id(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pyjson;
    use serde_json::{Map, json};

    /// The structs write the bytes the dicts did (oslo's key order, Python's
    /// separators and escapes), both layers.
    #[test]
    fn reply_bytes_are_the_dicts() {
        let failure = RemoteFailure::not_supported("caf\u{e9} \"x\"");
        let cases = [
            (
                encode_reply(
                    "m-1",
                    &Outcome::Result(json!({"a": [1, "\u{1f600}"], "b": null})),
                ),
                true,
            ),
            (
                encode_reply("m-1", &Outcome::Failure(failure.clone())),
                true,
            ),
            (encode_heartbeat("m-1"), false),
        ];
        for (i, (body, ending)) in cases.into_iter().enumerate() {
            let got = envelope::decode(&body, 1 << 20).unwrap();
            let mut inner = Map::new();
            inner.insert(
                "result".into(),
                if i == 0 {
                    json!({"a": [1, "\u{1f600}"], "b": null})
                } else {
                    Value::Null
                },
            );
            inner.insert(
                "failure".into(),
                if i == 1 {
                    json!(failure.to_failure_string())
                } else {
                    Value::Null
                },
            );
            inner.insert("ending".into(), json!(ending));
            inner.insert("_msg_id".into(), json!("m-1"));
            inner.insert("_unique_id".into(), got["_unique_id"].clone());
            let mut outer = Map::new();
            outer.insert("oslo.version".into(), json!("2.0"));
            outer.insert("oslo.message".into(), json!(pyjson::to_string(&inner)));
            assert_eq!(String::from_utf8(body).unwrap(), pyjson::to_string(&outer));
        }
    }

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

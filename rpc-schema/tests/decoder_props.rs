//! Property tests: the decoders never panic, whatever the bytes, and what
//! we encode decodes back unchanged.

use proptest::prelude::*;
use rpc_schema::{
    Compression, ConductorRequest, Incoming, MagnumObject, RequestContext, envelope, methods,
};
use serde_json::{Map, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z0-9_.\\- \u{e9}\u{1f600}\"\\\\\n]{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "magnum_object.name",
            "Cluster",
            "magnum",
            "1.24",
            "magnum_object.data",
            "oslo.message",
            "2.0",
        ])
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS.to_vec()), inner), 0..6).prop_map(
                |kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

const KEYS: &[&str] = &[
    "method",
    "args",
    "version",
    "namespace",
    "_msg_id",
    "_reply_q",
    "_unique_id",
    "_timeout",
    "_context_user",
    "_context_request_id",
    "_context_roles",
    "_context_",
    "_context_a\"b\\",
    "cluster",
    "uuid",
    "node_count",
    "magnum_object.name",
    "magnum_object.namespace",
    "magnum_object.version",
    "magnum_object.data",
    "magnum_object.changes",
    "labels",
    "status",
    "oslo.version",
    "oslo.message",
];

/// The conductor's path (straight from the text) and the dict's agree,
/// failures included.
fn agrees(bytes: &[u8]) -> Result<(), TestCaseError> {
    let via_dict = envelope::decode(bytes, 1 << 20).map(Incoming::from_message);
    let via_text = Incoming::from_body(bytes, 1 << 20);
    if let (Ok(text), Ok(dict)) = (&via_text, &via_dict) {
        // The context's strings as read from the text (before anything
        // parses its entries into a map) and from the dict.
        let strings = |c: &RequestContext| {
            [c.user_id(), c.request_id(), c.project_id(), c.auth_token()]
                .map(|s| s.map(str::to_string))
        };
        prop_assert_eq!(strings(&text.context), strings(&dict.context));
    }
    prop_assert_eq!(via_text, via_dict);
    Ok(())
}

fn exercise(inner: Map<String, Value>) {
    let incoming = Incoming::from_message(inner);
    if let Ok(req) = incoming.request(|m| methods::method(m).is_some()) {
        let _ = ConductorRequest::decode(&req.method, &req.args);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        agrees(&bytes)?;
        if let Ok(m) = envelope::decode(&bytes, 1 << 20) {
            exercise(m);
        }
        for c in [Compression::Zlib, Compression::Bz2, Compression::Xz] {
            let _ = c.decompress(&bytes, 1 << 16);
        }
    }

    #[test]
    fn arbitrary_json_messages_never_panic(v in json_value(), method in prop::sample::select(
        methods::METHODS.iter().map(|m| m.name).collect::<Vec<_>>()), args in json_value()) {
        let _ = MagnumObject::from_primitive(&v);
        let mut m = match v { Value::Object(m) => m, other => { let mut m = Map::new(); m.insert("args".into(), other); m } };
        m.insert("method".into(), Value::String(method.to_string()));
        if let Value::Object(_) = args { m.insert("args".into(), args); }
        let body = envelope::encode(&m);
        agrees(&body)?;
        let decoded = envelope::decode(&body, 1 << 20).expect("our own encoding decodes");
        prop_assert_eq!(&decoded, &m);
        exercise(decoded);
    }

    #[test]
    fn the_text_and_the_dict_agree_on_any_inner_message(
        pairs in prop::collection::vec((prop::sample::select(KEYS.to_vec()), json_value()), 0..12),
        other in json_value(),
        as_object in any::<bool>(),
        cut in 0usize..40,
    ) {
        // An object written by hand so that a key can come twice, or any
        // other value; then the same text cut short.
        let text = if as_object {
            let fields: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::from(*k), v))
                .collect();
            format!("{{{}}}", fields.join(", "))
        } else {
            other.to_string()
        };
        let ends: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        let cut_at = ends[ends.len().saturating_sub(1 + cut % ends.len())];
        for inner in [&text[..], &text[..cut_at], &format!("{text} x")[..]] {
            let mut outer = Map::new();
            outer.insert("oslo.version".into(), Value::from("2.0"));
            outer.insert("oslo.message".into(), Value::from(inner));
            agrees(&serde_json::to_vec(&outer).expect("a map serializes"))?;
        }
    }
}

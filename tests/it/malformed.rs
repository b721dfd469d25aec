//! At least 20 malformed inputs published as raw bytes through the real
//! RabbitMQ: calls get a failure reply Python can raise, undecodable
//! messages and bad casts get a warning and a metric, and the conductor
//! keeps serving.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use integration_tests::{RawClient, TestConductor, Vhost, oslo_properties, request};
use lapin::types::{AMQPValue, FieldTable, LongString};
use rpc_schema::{Compression, RemoteFailure, envelope};
use serde_json::{Map, Value, json};

const TOPIC: &str = "magnum-conductor";

fn cluster(version: &str, data: Value) -> Value {
    json!({"magnum_object.name": "Cluster", "magnum_object.namespace": "magnum",
           "magnum_object.version": version, "magnum_object.data": data})
}

/// Changes a well-formed ping request into a malformed one.
type Mutator = Box<dyn Fn(&mut serde_json::Map<String, Value>)>;

/// (name, request mutator, expected failure class or "OK:<json result>")
fn call_cases() -> Vec<(&'static str, Mutator, &'static str)> {
    vec![
        (
            "missing method",
            Box::new(|m| {
                m.remove("method");
            }),
            "NoSuchMethod",
        ),
        (
            "unknown method",
            Box::new(|m| {
                m.insert("method".into(), json!("drop_all_clusters"));
            }),
            "NoSuchMethod",
        ),
        (
            "method not a string",
            Box::new(|m| {
                m.insert("method".into(), json!(42));
            }),
            "NoSuchMethod",
        ),
        (
            "private method",
            Box::new(|m| {
                m.insert("method".into(), json!("_private"));
            }),
            "NoSuchMethod",
        ),
        (
            "version 1.1",
            Box::new(|m| {
                m.insert("version".into(), json!("1.1"));
            }),
            "UnsupportedVersion",
        ),
        (
            "version 2.0",
            Box::new(|m| {
                m.insert("version".into(), json!("2.0"));
            }),
            "UnsupportedVersion",
        ),
        (
            "namespace",
            Box::new(|m| {
                m.insert("namespace".into(), json!("baremetal"));
            }),
            "UnsupportedVersion",
        ),
        (
            "version not a number",
            Box::new(|m| {
                m.insert("version".into(), json!("one"));
            }),
            "ValueError",
        ),
        (
            "args is a list",
            Box::new(|m| {
                m.insert("args".into(), json!([1, 2]));
            }),
            "TypeError",
        ),
        (
            "unexpected kwarg",
            Box::new(|m| {
                m.insert("args".into(), json!({"force": true}));
            }),
            "TypeError",
        ),
        (
            "missing kwarg",
            Box::new(|m| {
                m.insert("method".into(), json!("cluster_delete"));
                m.insert("args".into(), json!({}));
            }),
            "TypeError",
        ),
        (
            "wrong arg type",
            Box::new(|m| {
                m.insert("method".into(), json!("cluster_delete"));
                m.insert("args".into(), json!({"uuid": 12}));
            }),
            "InvalidParameterValue",
        ),
        (
            "unknown object name",
            Box::new(|m| {
                m.insert("method".into(), json!("credential_rotate"));
                m.insert("args".into(), json!({"cluster": {"magnum_object.name": "Bay", "magnum_object.namespace": "magnum",
                "magnum_object.version": "1.0", "magnum_object.data": {}}}));
            }),
            "UnsupportedObjectError",
        ),
        (
            "object version too new",
            Box::new(|m| {
                m.insert("method".into(), json!("credential_rotate"));
                m.insert(
                    "args".into(),
                    json!({"cluster": cluster("1.99", json!({}))}),
                );
            }),
            "IncompatibleObjectVersion",
        ),
        (
            "object from another project",
            Box::new(|m| {
                m.insert("method".into(), json!("credential_rotate"));
                let mut c = cluster("1.24", json!({}));
                c["magnum_object.namespace"] = json!("nova");
                m.insert("args".into(), json!({"cluster": c}));
            }),
            "UnsupportedObjectError",
        ),
        (
            "object data not a dict",
            Box::new(|m| {
                m.insert("method".into(), json!("credential_rotate"));
                m.insert(
                    "args".into(),
                    json!({"cluster": cluster("1.24", json!([1]))}),
                );
            }),
            "InvalidParameterValue",
        ),
        (
            "bad enum value",
            Box::new(|m| {
                m.insert("method".into(), json!("credential_rotate"));
                m.insert(
                    "args".into(),
                    json!({"cluster": cluster("1.24", json!({"status": "ON_FIRE"}))}),
                );
            }),
            "InvalidParameterValue",
        ),
        (
            "object where a string is expected",
            Box::new(|m| {
                m.insert("method".into(), json!("cluster_delete"));
                m.insert("args".into(), json!({"uuid": cluster("1.24", json!({}))}));
            }),
            "InvalidParameterValue",
        ),
        (
            "context without any keys",
            Box::new(|m| {
                m.retain(|k, _| !k.starts_with("_context_"));
            }),
            "OK:true",
        ),
        (
            "unknown context keys",
            Box::new(|m| {
                m.insert("_context_traceparent".into(), json!("00-abc"));
                m.insert("_context_trust_id".into(), json!("t"));
                m.insert("_context_password".into(), json!("hunter2"));
            }),
            "OK:true",
        ),
        (
            "federation call",
            Box::new(|m| {
                m.insert("method".into(), json!("federation_delete"));
                m.insert("args".into(), json!({"uuid": "x"}));
            }),
            "NotImplementedError",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_inputs_get_failures_metrics_and_never_kill_the_conductor() {
    let vhost = Vhost::new("malformed");
    let conductor = TestConductor::start(&vhost, "").await;
    let mut client = RawClient::connect(&vhost).await;
    let mut checked = 0;

    for (name, mutate, expected) in call_cases() {
        let (msg_id, mut m) = request("ping_conductor", json!({}), true, &client.reply_q);
        mutate(&mut m);
        client
            .publish(
                "magnum",
                TOPIC,
                &envelope::encode(&m),
                oslo_properties(true),
            )
            .await;
        let reply = client
            .reply(&msg_id, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{name}: no reply"));
        match expected.strip_prefix("OK:") {
            Some(result) => {
                assert!(reply["failure"].is_null(), "{name}: {reply:?}");
                assert_eq!(
                    reply["result"],
                    serde_json::from_str::<Value>(result).unwrap(),
                    "{name}"
                );
            }
            None => {
                let failure = reply["failure"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: no failure: {reply:?}"));
                let f = RemoteFailure::from_failure_string(failure)
                    .unwrap_or_else(|| panic!("{name}: {failure}"));
                assert_eq!(f.class, expected, "{name}: {failure}");
                assert_eq!(
                    f.args.len(),
                    1,
                    "{name}: one positional arg, so Python can rebuild it"
                );
            }
        }
        checked += 1;
    }

    // A legacy un-enveloped body and a zlib-compressed one are fine.
    let (msg_id, m) = request("ping_conductor", json!({}), true, &client.reply_q);
    client
        .publish(
            "magnum",
            TOPIC,
            serde_json::to_string(&m).unwrap().as_bytes(),
            oslo_properties(true),
        )
        .await;
    assert_eq!(
        client
            .reply(&msg_id, Duration::from_secs(10))
            .await
            .expect("legacy reply")["result"],
        true
    );
    let (msg_id, m) = request("ping_conductor", json!({}), true, &client.reply_q);
    let mut headers = FieldTable::default();
    headers.insert(
        "compression".into(),
        AMQPValue::LongString(LongString::from("application/x-gzip")),
    );
    client
        .publish(
            "magnum",
            TOPIC,
            &Compression::Zlib.compress(&envelope::encode(&m)),
            oslo_properties(true).with_headers(headers),
        )
        .await;
    assert_eq!(
        client
            .reply(&msg_id, Duration::from_secs(10))
            .await
            .expect("compressed reply")["result"],
        true
    );
    checked += 2;

    // Undecodable bodies: rejected with a warning and a metric, no reply possible.
    let zstd = {
        let mut h = FieldTable::default();
        h.insert(
            "compression".into(),
            AMQPValue::LongString(LongString::from("application/zstd")),
        );
        h
    };
    let gzip = {
        let mut h = FieldTable::default();
        h.insert(
            "compression".into(),
            AMQPValue::LongString(LongString::from("application/x-gzip")),
        );
        h
    };
    let big = vec![b'x'; 16 << 20];
    let undecodable: Vec<(&str, Vec<u8>, Option<FieldTable>, &str)> = vec![
        ("not json", b"hello".to_vec(), None, "not_json"),
        (
            "invalid utf-8",
            vec![b'{', 0xff, 0xfe, b'}'],
            None,
            "not_json",
        ),
        ("json array", b"[1, 2]".to_vec(), None, "not_object"),
        (
            "envelope 3.0",
            br#"{"oslo.version": "3.0", "oslo.message": "{}"}"#.to_vec(),
            None,
            "envelope_version",
        ),
        (
            "nested oslo.message",
            br#"{"oslo.version": "2.0", "oslo.message": {"method": "x"}}"#.to_vec(),
            None,
            "bad_inner_message",
        ),
        (
            "inner not an object",
            br#"{"oslo.version": "2.0", "oslo.message": "[1]"}"#.to_vec(),
            None,
            "bad_inner_message",
        ),
        ("16 MiB of garbage", big, None, "not_json"),
        (
            "unsupported compression",
            b"{}".to_vec(),
            Some(zstd),
            "unsupported_compression",
        ),
        (
            "corrupt zlib",
            b"not zlib at all".to_vec(),
            Some(gzip),
            "decompress",
        ),
    ];
    for (name, body, headers, reason) in undecodable {
        let before =
            conductor.counter("magnum_conductor_rpc_rejected_total", &[("reason", reason)]);
        let props = match headers {
            Some(h) => oslo_properties(false).with_headers(h),
            None => oslo_properties(false),
        };
        client.publish("magnum", TOPIC, &body, props).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while conductor.counter("magnum_conductor_rpc_rejected_total", &[("reason", reason)])
            < before + 1.0
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: no rejection counted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        checked += 1;
    }

    // A bad cast: logged and counted, no reply.
    let before = conductor.counter(
        "magnum_conductor_rpc_rejected_total",
        &[("reason", "bad_request"), ("kind", "cast")],
    );
    let (_, m) = request("no_such_method", json!({}), false, &client.reply_q);
    client
        .publish(
            "magnum",
            TOPIC,
            &envelope::encode(&m),
            oslo_properties(false),
        )
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while conductor.counter(
        "magnum_conductor_rpc_rejected_total",
        &[("reason", "bad_request"), ("kind", "cast")],
    ) < before + 1.0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "bad cast not counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    checked += 1;

    // Duplicate `_unique_id`: handled once.
    let (msg_id, m) = request("ping_conductor", json!({}), true, &client.reply_q);
    let body = envelope::encode(&m);
    client
        .publish("magnum", TOPIC, &body, oslo_properties(true))
        .await;
    assert!(
        client
            .reply(&msg_id, Duration::from_secs(10))
            .await
            .is_some()
    );
    client
        .publish("magnum", TOPIC, &body, oslo_properties(true))
        .await;
    assert!(
        client
            .reply(&msg_id, Duration::from_secs(2))
            .await
            .is_none(),
        "a duplicate gets no second reply"
    );
    checked += 1;

    assert!(checked >= 20, "only {checked} cases");
    // Still alive and serving.
    let (msg_id, m) = request("ping_conductor", json!({}), true, &client.reply_q);
    client
        .publish(
            "magnum",
            TOPIC,
            &envelope::encode(&m),
            oslo_properties(true),
        )
        .await;
    assert_eq!(
        client
            .reply(&msg_id, Duration::from_secs(10))
            .await
            .expect("alive")["result"],
        true
    );
    assert!(
        conductor
            .health
            .consuming
            .load(std::sync::atomic::Ordering::SeqCst)
    );
    let _ = client.conn.close(200, "bye".into()).await;
    conductor.stop().await;
}

/// Handlers whose first `panics` requests panic (then answer as the base
/// handlers do).
struct Panicking {
    panics: AtomicUsize,
}

impl conductor::handlers::Handlers for Panicking {
    async fn handle(&self, req: conductor::handlers::HandlerRequest) -> rpc_schema::Outcome {
        if self
            .panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            // A yield first: the panic comes from a later poll of the
            // handler, not from its first.
            tokio::task::yield_now().await;
            panic!("a bug in a handler");
        }
        conductor::handlers::BaseHandlers::base_outcome(&req.request)
    }
}

/// A `ping_conductor` call, as oslo sends it, and its reply.
async fn ping(client: &mut RawClient) -> Option<Map<String, Value>> {
    let (msg_id, m) = request("ping_conductor", json!({}), true, &client.reply_q);
    client
        .publish(
            "magnum",
            TOPIC,
            &envelope::encode(&m),
            oslo_properties(true),
        )
        .await;
    client.reply(&msg_id, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_gets_a_failure_reply_and_the_conductor_serves_on() {
    let vhost = Vhost::new("panic");
    let handlers = Arc::new(Panicking {
        panics: AtomicUsize::new(1),
    });
    let conductor = TestConductor::start_with(&vhost, "", handlers).await;
    let mut client = RawClient::connect(&vhost).await;
    let reply = ping(&mut client)
        .await
        .expect("a reply to the call whose handler panicked");
    let failure = reply["failure"].as_str().expect("a failure");
    let f = RemoteFailure::from_failure_string(failure).expect("a failure Python can raise");
    assert_eq!(f.class, "MagnumException", "{failure}");
    assert!(
        failure.contains("Internal error while handling ping_conductor"),
        "{failure}"
    );
    // The same conductor answers the next call.
    let reply = ping(&mut client).await.expect("a reply after the panic");
    assert_eq!(reply["result"], json!(true), "{reply:?}");
    assert_eq!(
        conductor.counter(
            "magnum_conductor_rpc_messages_total",
            &[("method", "ping_conductor"), ("outcome", "failure")]
        ),
        1.0
    );
    conductor.stop().await;
}

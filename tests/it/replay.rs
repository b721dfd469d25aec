//! Replay of the messages Magnum 23.0.0's client code really sends
//! (recorded by tests/python/record_fixtures.py into tests/fixtures/rpc):
//! every fixture decodes into a typed request, re-encodes byte for byte,
//! and, published through the real RabbitMQ, gets a reply (calls) or is
//! handled (casts).

use std::path::PathBuf;
use std::time::Duration;

use integration_tests::{RawClient, TestConductor, Vhost, oslo_properties};
use lapin::BasicProperties;
use rpc_schema::{ConductorRequest, Incoming, envelope, methods, pyjson};
use serde_json::Value;

struct Fixture {
    name: String,
    method: String,
    kind: String,
    exchange: String,
    routing_key: String,
    properties: Value,
    body: String,
}

fn fixtures() -> Vec<Fixture> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/rpc");
    let mut out: Vec<Fixture> = std::fs::read_dir(&dir)
        .expect("fixtures directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let s = |k: &str| {
                v[k].as_str()
                    .unwrap_or_else(|| panic!("{p:?}: {k}"))
                    .to_string()
            };
            Fixture {
                name: s("name"),
                method: s("method"),
                kind: s("kind"),
                exchange: s("exchange"),
                routing_key: s("routing_key"),
                properties: v["properties"].clone(),
                body: s("body"),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[test]
fn every_fixture_decodes_and_reencodes_byte_for_byte() {
    let all = fixtures();
    assert!(
        all.len() >= 20,
        "expected a fixture per method, found {}",
        all.len()
    );
    let mut methods_seen: Vec<&str> = all.iter().map(|f| f.method.as_str()).collect();
    methods_seen.sort();
    methods_seen.dedup();
    assert_eq!(
        methods_seen.len(),
        methods::METHODS.len(),
        "every conductor method is recorded"
    );
    for f in &all {
        let inner = envelope::decode(f.body.as_bytes(), 1 << 26)
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        // Our JSON writer produces exactly Python's bytes.
        let outer: Value = serde_json::from_str(&f.body).unwrap();
        assert_eq!(
            pyjson::to_string(&inner),
            outer["oslo.message"].as_str().unwrap(),
            "{}",
            f.name
        );
        assert_eq!(
            String::from_utf8(envelope::encode(&inner)).unwrap(),
            f.body,
            "{}",
            f.name
        );
        let incoming = Incoming::from_message(inner);
        assert_eq!(incoming.is_call(), f.kind == "call", "{}", f.name);
        assert_eq!(incoming.context.user_name(), Some("demo"), "{}", f.name);
        let req = incoming
            .request(|m| methods::method(m).is_some())
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let typed = ConductorRequest::decode(&req.method, &req.args)
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert_eq!(typed.method(), f.method, "{}", f.name);
        assert_eq!(f.properties["content_type"], "application/json");
        assert_eq!(f.properties["delivery_mode"], 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_replays_through_rabbitmq() {
    let vhost = Vhost::new("replay");
    let conductor = TestConductor::start(&vhost, "").await;
    let mut client = RawClient::connect(&vhost).await;
    for f in fixtures() {
        let mut inner = envelope::decode(f.body.as_bytes(), 1 << 26).unwrap();
        let routing_key = if f.routing_key.starts_with("magnum-conductor.") {
            format!("magnum-conductor.{}", conductor.server_id)
        } else {
            f.routing_key.clone()
        };
        let props: BasicProperties = oslo_properties(f.kind == "call");
        let before = conductor.counter(
            "magnum_conductor_rpc_messages_total",
            &[("method", &f.method), ("kind", &f.kind)],
        );
        if f.kind == "call" {
            // The recorder's reply queue is gone: reply to ours.
            inner.insert("_reply_q".into(), Value::String(client.reply_q.clone()));
            let msg_id = inner["_msg_id"].as_str().unwrap().to_string();
            client
                .publish(&f.exchange, &routing_key, &envelope::encode(&inner), props)
                .await;
            let reply = client
                .reply(&msg_id, Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("{}: no reply", f.name));
            assert!(
                reply.contains_key("result") && reply.contains_key("failure"),
                "{}: {reply:?}",
                f.name
            );
        } else {
            client
                .publish(&f.exchange, &routing_key, f.body.as_bytes(), props)
                .await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while conductor.counter(
            "magnum_conductor_rpc_messages_total",
            &[("method", &f.method), ("kind", &f.kind)],
        ) < before + 1.0
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: not handled",
                f.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let _ = client.conn.close(200, "bye".into()).await;
    conductor.stop().await;
}

//! Test support: a fresh RabbitMQ vhost per test, our conductor running
//! in-process against it, and a raw AMQP client that publishes exact bytes
//! and reads replies.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::config::{Config, Layered};
use conductor::handlers::BaseHandlers;
use conductor::metrics::Metrics;
use conductor::server::{Health, RpcServer};
use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

/// A RabbitMQ vhost that is deleted when dropped.
pub struct Vhost(pub String);

impl Vhost {
    pub fn new(prefix: &str) -> Vhost {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        Vhost(name)
    }
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/{}", rabbit_port(), self.0)
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        rabbitmqctl(&["delete_vhost", &self.0]);
    }
}

/// The AMQP port of the run's RabbitMQ on 127.0.0.1: the node of its own
/// that `scripts/services.sh` starts for `scripts/test-all.sh`
/// (`MAGNUM_RS_RABBITMQ_PORT`), else the machine's (5672).
pub fn rabbit_port() -> u16 {
    std::env::var("MAGNUM_RS_RABBITMQ_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(5672)
}

/// `rabbitmqctl ARGS` against the run's RabbitMQ: its node
/// (`MAGNUM_RS_RABBITMQ_NODE`), with the Erlang cookie under
/// `MAGNUM_RS_RABBITMQ_HOME` and its epmd port when they are set, as
/// `scripts/services.sh` prints them; else the machine's default node.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut cmd = match var("MAGNUM_RS_RABBITMQ_HOME") {
        Some(home) => {
            let bin = var("RABBITMQ_BIN_DIR").unwrap_or_else(|| "/usr/lib/rabbitmq/bin".into());
            let mut c = Command::new(format!("{bin}/rabbitmqctl"));
            // No erl_crash.dump in the working directory when its node is gone.
            c.env("HOME", home).env("ERL_CRASH_DUMP_SECONDS", "0");
            if let Some(port) = var("MAGNUM_RS_RABBITMQ_EPMD_PORT") {
                c.env("ERL_EPMD_PORT", port);
            }
            c
        }
        None => Command::new("rabbitmqctl"),
    };
    if let Some(node) = var("MAGNUM_RS_RABBITMQ_NODE") {
        cmd.args(["-n", &node]);
    }
    let out = cmd.arg("-q").args(args).output().expect("rabbitmqctl runs");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Our conductor, running in this process.
pub struct TestConductor {
    pub metrics: Metrics,
    pub health: Arc<Health>,
    pub server_id: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestConductor {
    pub async fn start(vhost: &Vhost, extra: &str) -> TestConductor {
        Self::start_with(vhost, extra, Arc::new(BaseHandlers)).await
    }

    /// As [`TestConductor::start`], with these handlers.
    pub async fn start_with<H: conductor::handlers::Handlers>(
        vhost: &Vhost,
        extra: &str,
        handlers: Arc<H>,
    ) -> TestConductor {
        let text = format!(
            "[DEFAULT]\ntransport_url = rabbit://guest:guest@127.0.0.1:{}/{}\nrpc_response_timeout = 10\n{extra}\n",
            rabbit_port(),
            vhost.0
        );
        let mut l = Layered::default();
        l.push_text(Path::new("test.conf"), &text)
            .expect("test config parses");
        let cfg = Arc::new(Config::from_layered(&l).expect("test config is valid"));
        let metrics = Metrics::new();
        let health = Arc::new(Health::default());
        let server_id = common::short_id::generate_id();
        let server = RpcServer::new(
            cfg,
            server_id.clone(),
            handlers,
            metrics.clone(),
            health.clone(),
        );
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        let c = TestConductor {
            metrics,
            health,
            server_id,
            stop: Some(tx),
            task,
        };
        c.wait_consuming(Duration::from_secs(20)).await;
        c
    }

    pub async fn wait_consuming(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while !self
            .health
            .consuming
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "conductor did not start consuming"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = self.metrics.render();
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut self.task).await;
    }
}

/// A raw client: publishes exact bodies and reads replies from its own queue.
pub struct RawClient {
    pub conn: Connection,
    pub channel: Channel,
    pub reply_q: String,
    replies: Consumer,
}

/// The properties oslo.messaging puts on requests.
pub fn oslo_properties(call: bool) -> BasicProperties {
    let p = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_delivery_mode(2)
        .with_priority(0)
        .with_headers(FieldTable::default());
    if call {
        p.with_expiration("60000".into())
    } else {
        p
    }
}

impl RawClient {
    pub async fn connect(vhost: &Vhost) -> RawClient {
        let conn = Connection::connect(&vhost.amqp_url(), ConnectionProperties::default())
            .await
            .expect("connect");
        let channel = conn.create_channel().await.expect("channel");
        let reply_q = format!("reply_{}", uuid::Uuid::new_v4().simple());
        let mut args = FieldTable::default();
        args.insert(
            "x-expires".into(),
            lapin::types::AMQPValue::LongInt(1_800_000),
        );
        channel
            .queue_declare(
                reply_q.as_str().into(),
                QueueDeclareOptions::default(),
                args,
            )
            .await
            .expect("reply queue");
        let replies = channel
            .basic_consume(
                reply_q.as_str().into(),
                "replies".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("consume replies");
        RawClient {
            conn,
            channel,
            reply_q,
            replies,
        }
    }

    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        props: BasicProperties,
    ) {
        self.channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions::default(),
                body,
                props,
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
    }

    /// The next reply for `msg_id` (heartbeats skipped), decoded.
    pub async fn reply(&mut self, msg_id: &str, limit: Duration) -> Option<Map<String, Value>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = tokio::time::timeout_at(deadline, self.replies.next())
                .await
                .ok()??;
            let d = next.ok()?;
            let m = rpc_schema::envelope::decode(&d.data, 1 << 26).ok()?;
            if m.get("_msg_id").and_then(Value::as_str) == Some(msg_id)
                && m.get("ending") == Some(&Value::Bool(true))
            {
                return Some(m);
            }
        }
    }
}

/// Build an oslo request dict (a call when `call`), with a minimal context.
pub fn request(
    method: &str,
    args: Value,
    call: bool,
    reply_q: &str,
) -> (String, Map<String, Value>) {
    let msg_id = uuid::Uuid::new_v4().simple().to_string();
    let mut m = Map::new();
    m.insert("method".into(), Value::String(method.into()));
    m.insert("args".into(), args);
    if call {
        m.insert("_msg_id".into(), Value::String(msg_id.clone()));
        m.insert("_reply_q".into(), Value::String(reply_q.into()));
        m.insert("_timeout".into(), Value::Null);
    }
    m.insert(
        "_unique_id".into(),
        Value::String(uuid::Uuid::new_v4().simple().to_string()),
    );
    m.insert("_context_user_id".into(), Value::String("u".into()));
    m.insert("_context_project_id".into(), Value::String("p".into()));
    (msg_id, m)
}

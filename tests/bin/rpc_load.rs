//! `mc-rpc-load`: oslo.messaging load on a conductor's topic, for benchmarks.
//!
//! One Python client process (one GIL, one reply consumer) saturates before
//! a conductor does, so `scripts/bench-rpc.sh` drives both conductors with
//! this instead. It speaks the wire Magnum's client does: requests are the
//! recorded `ping_conductor` message (tests/fixtures/rpc) with fresh ids,
//! enveloped as oslo.messaging does, with its properties, to the `magnum`
//! exchange; replies come back on `reply_<uuid>` queues declared as oslo
//! declares them. `check` proves the bytes: re-encoding the recorded
//! messages gives the recorded bodies, and fresh ones differ only in ids.
//!
//! - `check`: the byte comparison (exit 1 on a difference);
//! - `load`: N calls at a concurrency (p50/p99 per call), or N casts (until
//!   the queue is drained), over K connections; prints one JSON line;
//! - `echo`: a trivial consumer on the topic that answers every call with
//!   `None` (no handler, no DB): the broker's ceiling on this machine.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use rpc_schema::envelope;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

type Error = Box<dyn std::error::Error + Send + Sync>;

const PING_CALL: &str = include_str!("../fixtures/rpc/ping_conductor_call.json");
const A_CAST: &str = include_str!("../fixtures/rpc/cluster_delete_cast.json");
const EXCHANGE: &str = "magnum";
const LIMIT: usize = 1 << 26;

#[derive(Parser)]
#[command(about = "oslo.messaging load on a conductor topic")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Our request bodies against the recorded ones.
    Check,
    /// Send calls or casts; one JSON line of results.
    Load {
        #[arg(long)]
        url: String,
        #[arg(long, default_value = "magnum-conductor")]
        topic: String,
        /// `call` or `cast`.
        #[arg(long, default_value = "call")]
        kind: String,
        #[arg(long, default_value_t = 2000)]
        messages: usize,
        /// Calls in flight at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        #[arg(long, default_value_t = 1)]
        connections: usize,
        /// Calls before timing starts.
        #[arg(long, default_value_t = 50)]
        warmup: usize,
    },
    /// Answer every call on the topic at once (the broker ceiling).
    Echo {
        #[arg(long)]
        url: String,
        #[arg(long, default_value = "magnum-conductor")]
        topic: String,
        /// Consumers (one channel each).
        #[arg(long, default_value_t = 4)]
        consumers: usize,
    },
}

/// A recorded message: (inner dict, enveloped body as recorded).
fn recorded(fixture: &str) -> Result<(Map<String, Value>, Vec<u8>), Error> {
    let f: Value = serde_json::from_str(fixture)?;
    let body = f["body"]
        .as_str()
        .ok_or("fixture without a body")?
        .as_bytes();
    Ok((envelope::decode(body, LIMIT)?, body.to_vec()))
}

fn hex_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A `ping_conductor` request from the recorded one: a call to `reply_q`
/// (fresh `_msg_id`), or a cast (oslo's cast has no `_msg_id`, `_reply_q`
/// or `_timeout`); always a fresh `_unique_id`.
fn request(template: &Map<String, Value>, reply_q: Option<&str>) -> (String, Vec<u8>) {
    let mut m = template.clone();
    let msg_id = hex_id();
    match reply_q {
        Some(q) => {
            m.insert("_msg_id".into(), Value::String(msg_id.clone()));
            m.insert("_reply_q".into(), Value::String(q.into()));
        }
        None => {
            for k in ["_msg_id", "_reply_q", "_timeout"] {
                m.shift_remove(k);
            }
        }
    }
    m.insert("_unique_id".into(), Value::String(hex_id()));
    (msg_id, envelope::encode(&m))
}

/// Byte-compare against the fixtures; the differences listed.
fn check() -> Result<Vec<String>, Error> {
    let mut bad = Vec::new();
    for (name, fixture) in [
        ("ping_conductor_call", PING_CALL),
        ("cluster_delete_cast", A_CAST),
    ] {
        let (inner, body) = recorded(fixture)?;
        if envelope::encode(&inner) != body {
            bad.push(format!(
                "{name}: re-encoded body differs from the recording"
            ));
        }
    }
    let (ping, ping_body) = recorded(PING_CALL)?;
    let q = ping["_reply_q"].as_str().unwrap_or_default().to_string();
    let (_, ours) = request(&ping, Some(&q));
    let same_but_ids = |a: &[u8], b: &[u8]| -> bool {
        let (Ok(a), Ok(b)) = (envelope::decode(a, LIMIT), envelope::decode(b, LIMIT)) else {
            return false;
        };
        let strip = |m: Map<String, Value>| {
            m.into_iter()
                .map(|(k, v)| match k.as_str() {
                    "_msg_id" | "_unique_id" => (k, Value::Null),
                    _ => (k, v),
                })
                .collect::<Vec<_>>()
        };
        strip(a) == strip(b)
    };
    if ours.len() != ping_body.len() || !same_but_ids(&ours, &ping_body) {
        bad.push("a generated call differs from the recording in more than its ids".into());
    }
    // A cast: the call's dict without the reply keys, in oslo's key order
    // (compared with a recorded cast's order of the keys they share).
    let (_, cast) = request(&ping, None);
    let cast_keys: Vec<String> = envelope::decode(&cast, LIMIT)?.keys().cloned().collect();
    let (recorded_cast, _) = recorded(A_CAST)?;
    let recorded_keys: Vec<String> = recorded_cast
        .keys()
        .filter(|k| cast_keys.contains(k))
        .cloned()
        .collect();
    if cast_keys != recorded_keys
        || ["_msg_id", "_reply_q", "_timeout"]
            .iter()
            .any(|k| cast_keys.iter().any(|c| c == k))
    {
        bad.push(format!(
            "a generated cast's keys {cast_keys:?} are not a recorded cast's"
        ));
    }
    Ok(bad)
}

/// One connection with its reply queue; replies are routed to waiters.
struct Client {
    channel: Channel,
    reply_q: String,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
    _conn: Connection,
}

impl Client {
    async fn connect(url: &str) -> Result<Client, Error> {
        let conn = Connection::connect(url, ConnectionProperties::default()).await?;
        let channel = conn.create_channel().await?;
        let reply_q = format!("reply_{}", hex_id());
        // As oslo declares its reply queue (amqp_auto_delete off, 30 min expiry).
        let mut args = FieldTable::default();
        args.insert("x-expires".into(), AMQPValue::LongInt(1_800_000));
        channel
            .queue_declare(
                reply_q.as_str().into(),
                QueueDeclareOptions::default(),
                args,
            )
            .await?;
        let mut replies = channel
            .basic_consume(
                reply_q.as_str().into(),
                "replies".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        let waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>> = Arc::default();
        let w = waiting.clone();
        tokio::spawn(async move {
            while let Some(Ok(d)) = replies.next().await {
                let Ok(m) = envelope::decode(&d.data, LIMIT) else {
                    continue;
                };
                if m.get("ending") != Some(&Value::Bool(true)) {
                    continue; // a call-monitor heartbeat
                }
                let id = m.get("_msg_id").and_then(Value::as_str).unwrap_or_default();
                let tx = w.lock().ok().and_then(|mut w| w.remove(id));
                if let Some(tx) = tx {
                    let _ = tx.send(m.get("failure").cloned().unwrap_or(Value::Null));
                }
            }
        });
        Ok(Client {
            channel,
            reply_q,
            waiting,
            _conn: conn,
        })
    }

    async fn publish(&self, topic: &str, body: &[u8], call: bool) -> Result<(), Error> {
        self.channel
            .basic_publish(
                EXCHANGE.into(),
                topic.into(),
                BasicPublishOptions::default(),
                body,
                // What oslo.messaging puts on a request (as recorded).
                integration_tests::oslo_properties(call),
            )
            .await?;
        Ok(())
    }

    /// One call; Ok(latency) or why it failed.
    async fn call(&self, template: &Map<String, Value>, topic: &str) -> Result<Duration, String> {
        let (id, body) = request(template, Some(&self.reply_q));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(id.clone(), tx);
        }
        let t = Instant::now();
        self.publish(topic, &body, true)
            .await
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(Value::Null)) => Ok(t.elapsed()),
            Ok(Ok(failure)) => Err(format!("failure reply: {failure}")),
            Ok(Err(_)) => Err("reply consumer ended".into()),
            Err(_) => {
                if let Ok(mut w) = self.waiting.lock() {
                    w.remove(&id);
                }
                Err("no reply in 60 s".into())
            }
        }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn load_calls(
    clients: Arc<Vec<Client>>,
    topic: &str,
    messages: usize,
    concurrency: usize,
) -> Result<Value, Error> {
    let (template, _) = recorded(PING_CALL)?;
    let template = Arc::new(template);
    let next = Arc::new(AtomicUsize::new(0));
    let lat = Arc::new(Mutex::new(Vec::with_capacity(messages)));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency.max(1) {
        let (clients, topic, template) = (clients.clone(), topic.to_string(), template.clone());
        let (next, lat, errors) = (next.clone(), lat.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let c = &clients[w % clients.len()];
            while next.fetch_add(1, Ordering::Relaxed) < messages {
                match c.call(&template, &topic).await {
                    Ok(d) => {
                        if let Ok(mut l) = lat.lock() {
                            l.push(d.as_secs_f64() * 1000.0);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut es) = errors.lock() {
                            es.push(e);
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let secs = t.elapsed().as_secs_f64();
    let mut lat = lat.lock().map_err(|_| "poisoned")?.clone();
    lat.sort_by(f64::total_cmp);
    let errors = errors.lock().map_err(|_| "poisoned")?.clone();
    Ok(json!({
        "kind": "call", "messages": messages, "concurrency": concurrency,
        "connections": clients.len(), "seconds": secs,
        "per_second": lat.len() as f64 / secs,
        "p50_ms": quantile(&lat, 0.50), "p99_ms": quantile(&lat, 0.99),
        "failed": errors.len(), "first_error": errors.first(),
    }))
}

/// Casts, published as fast as the connections go; done when the topic
/// queue is empty and a call sent after the last cast is answered (the
/// consumers' prefetch windows bound the error: a few messages).
async fn load_casts(
    clients: Arc<Vec<Client>>,
    topic: &str,
    messages: usize,
) -> Result<Value, Error> {
    let (template, _) = recorded(PING_CALL)?;
    let template = Arc::new(template);
    let t = Instant::now();
    let mut tasks = Vec::new();
    let per = messages.div_ceil(clients.len());
    for i in 0..clients.len() {
        let (clients, topic, template) = (clients.clone(), topic.to_string(), template.clone());
        let n = per.min(messages.saturating_sub(i * per));
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                let (_, body) = request(&template, None);
                clients[i].publish(&topic, &body, false).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let published = t.elapsed().as_secs_f64();
    let ch = &clients[0].channel;
    loop {
        let q = ch
            .queue_declare(
                topic.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        if q.message_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    clients[0]
        .call(&template, topic)
        .await
        .map_err(|e| format!("the closing call: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    Ok(json!({
        "kind": "cast", "messages": messages, "connections": clients.len(),
        "publish_seconds": published, "seconds": secs, "per_second": messages as f64 / secs,
    }))
}

async fn echo(url: &str, topic: &str, consumers: usize) -> Result<(), Error> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    // As oslo declares the topic (non-durable exchange and queue).
    ch.exchange_declare(
        EXCHANGE.into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.queue_declare(
        topic.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.queue_bind(
        topic.into(),
        EXCHANGE.into(),
        topic.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let mut tasks = Vec::new();
    for i in 0..consumers.max(1) {
        let ch = conn.create_channel().await?;
        ch.basic_qos(64, BasicQosOptions::default()).await?;
        let mut deliveries = ch
            .basic_consume(
                topic.into(),
                format!("echo-{i}").as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        tasks.push(tokio::spawn(async move {
            while let Some(d) = deliveries.next().await {
                let d = d?;
                if let Ok(m) = envelope::decode(&d.data, LIMIT)
                    && let (Some(id), Some(q)) = (
                        m.get("_msg_id").and_then(Value::as_str),
                        m.get("_reply_q").and_then(Value::as_str),
                    )
                {
                    let mut r = Map::new();
                    r.insert("result".into(), Value::Null);
                    r.insert("failure".into(), Value::Null);
                    r.insert("ending".into(), Value::Bool(true));
                    r.insert("_msg_id".into(), Value::String(id.into()));
                    ch.basic_publish(
                        "".into(),
                        q.into(),
                        BasicPublishOptions::default(),
                        &envelope::encode(&r),
                        // What the conductor puts on a reply.
                        conductor::reply::properties(None),
                    )
                    .await?;
                }
                d.ack(BasicAckOptions::default()).await?;
            }
            Ok::<_, Error>(())
        }));
    }
    eprintln!("echo: {} consumers on {topic}", tasks.len());
    for t in tasks {
        t.await??;
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), Error> {
    match args.cmd {
        Cmd::Check => {
            let bad = check()?;
            for b in &bad {
                eprintln!("mc-rpc-load check: {b}");
            }
            if !bad.is_empty() {
                std::process::exit(1);
            }
            println!("{}", json!({"check": "ok", "fixtures": 2}));
        }
        Cmd::Load {
            url,
            topic,
            kind,
            messages,
            concurrency,
            connections,
            warmup,
        } => {
            let mut clients = Vec::new();
            for _ in 0..connections.max(1) {
                clients.push(Client::connect(&url).await?);
            }
            let clients = Arc::new(clients);
            if warmup > 0 {
                load_calls(clients.clone(), &topic, warmup, 1).await?;
            }
            let out = match kind.as_str() {
                "call" => load_calls(clients, &topic, messages, concurrency).await?,
                "cast" => load_casts(clients, &topic, messages).await?,
                other => return Err(format!("--kind {other}: call or cast").into()),
            };
            println!("{out}");
        }
        Cmd::Echo {
            url,
            topic,
            consumers,
        } => echo(&url, &topic, consumers).await?,
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    if let Err(e) = run(Args::parse()).await {
        eprintln!("mc-rpc-load: {e}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn requests_are_the_recorded_bytes_but_for_their_ids() {
        assert_eq!(super::check().unwrap(), Vec::<String>::new());
    }
}

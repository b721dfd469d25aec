//! The oslo.messaging RPC server: connect, declare, consume, decode,
//! dispatch, reply, acknowledge; reconnect on any broker failure; finish
//! in-flight work on shutdown.
//!
//! Delivery guarantee (stronger than oslo's ack-on-receipt): a message is
//! acknowledged once its handler signals that the first durable effect is
//! recorded ([`DurableSignal`]), or once it is done (after the reply, for
//! calls). If the conductor dies before that, the broker redelivers the
//! message; `_unique_id`s being handled or recently handled are not run
//! twice, and handlers are idempotent by object uuid across restarts.
//! Undecodable messages are rejected without requeue (dead-lettered if the
//! operator configured it), so a poison message cannot loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use amq_protocol::types::AMQPValue;
use common::config::Config;
use futures_util::StreamExt;
use rpc_schema::{Compression, Incoming};
use tokio::sync::{Semaphore, watch};

use crate::amqp::client::{Delivery, QueueDeleteOptions};
use crate::amqp::{self, Channel, Connection};
use crate::dedup::Dedup;
use crate::handlers::Handlers;
use crate::metrics::Metrics;
use crate::reply::Replier;
use crate::topology::{self, ArgValue, ConsumerDecl, ConsumerKind};

mod delivery;
use delivery::{Settle, process};

/// State shared with the health endpoint.
#[derive(Debug, Default)]
pub struct Health {
    /// True while consuming from the broker.
    pub consuming: AtomicBool,
}

/// The RPC server.
pub struct RpcServer<H: Handlers> {
    cfg: Arc<Config>,
    server_id: String,
    handlers: Arc<H>,
    metrics: Metrics,
    health: Arc<Health>,
    /// The current publisher channel, for replies and forwards.
    publisher: (
        watch::Sender<Option<Channel>>,
        watch::Receiver<Option<Channel>>,
    ),
    /// The current connection, for the broker leader election
    /// (`crate::lifecycle::coordination::elect`).
    connection: watch::Sender<Option<Arc<Connection>>>,
}

/// The publisher channel the RPC server will keep current (give the
/// receiver to whoever else publishes on it; the notifier opens a channel
/// of its own).
pub fn publisher_channel() -> (
    watch::Sender<Option<Channel>>,
    watch::Receiver<Option<Channel>>,
) {
    watch::channel(None)
}

struct Shared<H: Handlers> {
    cfg: Arc<Config>,
    handlers: Arc<H>,
    metrics: Metrics,
    dedup: Dedup,
    replier: Replier,
    /// Republishes requests the handlers route elsewhere.
    forwarder: crate::forward::Forwarder,
    /// Handler slots for calls (someone waits for the reply).
    call_slots: Arc<Semaphore>,
    /// Handler slots for casts. Two lanes of `executor_thread_pool_size`
    /// each: a burst of long casts (a thousand `cluster_create`, each
    /// generating four RSA keys) must not make magnum-api's calls (every
    /// object read of its API goes through the indirection calls) queue
    /// behind it for seconds.
    cast_slots: Arc<Semaphore>,
    ping_enabled: bool,
}

enum SessionEnd {
    Shutdown,
    Lost(String),
}

impl<H: Handlers> RpcServer<H> {
    pub fn new(
        cfg: Arc<Config>,
        server_id: String,
        handlers: Arc<H>,
        metrics: Metrics,
        health: Arc<Health>,
    ) -> Self {
        Self::with_publisher(
            cfg,
            server_id,
            handlers,
            metrics,
            health,
            publisher_channel(),
        )
    }

    /// Like [`RpcServer::new`], keeping `publisher` current.
    pub fn with_publisher(
        cfg: Arc<Config>,
        server_id: String,
        handlers: Arc<H>,
        metrics: Metrics,
        health: Arc<Health>,
        publisher: (
            watch::Sender<Option<Channel>>,
            watch::Receiver<Option<Channel>>,
        ),
    ) -> Self {
        RpcServer {
            cfg,
            server_id,
            handlers,
            metrics,
            health,
            publisher,
            connection: watch::channel(None).0,
        }
    }

    /// Keep `connection` current (`None` while disconnected).
    pub fn with_connection_watch(
        mut self,
        connection: watch::Sender<Option<Arc<Connection>>>,
    ) -> Self {
        self.connection = connection;
        self
    }

    /// Run until `shutdown` resolves; then stop consuming, wait (bounded by
    /// `rpc_response_timeout`) for in-flight requests, clean up and return.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let cfg = self.cfg.clone();
        let r = &cfg.rabbit;
        let fanout_unique = if r.use_queue_manager {
            amqp::queue_manager_name(&r.hostname, &r.processname)
        } else {
            uuid::Uuid::new_v4().simple().to_string()
        };
        let mut decls = topology::rpc_server_consumers(
            r,
            &cfg.default.control_exchange,
            &cfg.conductor.topic,
            &self.server_id,
            &fanout_unique,
        );
        tracing::info!(
            topic = %cfg.conductor.topic, server = %self.server_id, exchange = %cfg.default.control_exchange,
            queues = ?decls.iter().map(|d| d.queue.as_str()).collect::<Vec<_>>(), "starting RPC server"
        );
        let (chan_tx, chan_rx) = self.publisher.clone();
        let compression = r
            .kombu_compression
            .as_deref()
            .and_then(Compression::from_option);
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            handlers: self.handlers.clone(),
            metrics: self.metrics.clone(),
            dedup: Dedup::default(),
            forwarder: crate::forward::Forwarder::new(
                chan_rx.clone(),
                &cfg.default.control_exchange,
            ),
            replier: Replier::new(
                chan_rx,
                r.direct_mandatory_flag,
                Duration::from_secs(r.kombu_missing_consumer_retry_timeout),
                compression,
                self.metrics.clone(),
            ),
            call_slots: Arc::new(Semaphore::new(cfg.default.executor_thread_pool_size)),
            cast_slots: Arc::new(Semaphore::new(cfg.default.executor_thread_pool_size)),
            ping_enabled: cfg.default.rpc_ping_enabled,
        });
        let targets = amqp::targets(&cfg);
        tokio::pin!(shutdown);
        let mut attempt: u32 = 0;
        let mut connected_once = false;
        let mut stream_offset: Option<i64> = None;
        loop {
            let target = &targets[attempt as usize % targets.len()];
            let conn = tokio::select! {
                _ = &mut shutdown => break,
                c = amqp::connect(&cfg, target) => c,
            };
            let conn = match conn {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    self.metrics.amqp_connect_failures.inc();
                    let delay = amqp::retry_delay(&cfg, attempt);
                    tracing::error!(error = %e, retry_in_s = delay.as_secs_f64(), "AMQP server unreachable");
                    attempt = attempt.saturating_add(1);
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            if let Some(off) = stream_offset {
                for d in decls
                    .iter_mut()
                    .filter(|d| d.kind == ConsumerKind::Fanout && r.rabbit_stream_fanout)
                {
                    d.consumer_args = vec![("x-stream-offset", ArgValue::Int(off))];
                }
            }
            let mut session = match open_session(&cfg, &conn, &decls).await {
                Ok(s) => s,
                Err(e) => {
                    self.metrics.amqp_connect_failures.inc();
                    let delay = amqp::retry_delay(&cfg, attempt);
                    tracing::error!(target = %target.label, error = %e, "declaring the RPC topology failed");
                    let _ = conn.close(320, "declare failed").await;
                    attempt = attempt.saturating_add(1);
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            if connected_once {
                self.metrics.amqp_reconnects.inc();
            }
            connected_once = true;
            attempt = 0;
            tracing::info!(target = %target.label, "connected to AMQP server, consuming");
            let _ = chan_tx.send(Some(session.publisher.clone()));
            self.connection.send_replace(Some(conn.clone()));
            self.metrics.amqp_connected.set(1);
            self.health.consuming.store(true, Ordering::SeqCst);

            let end = run_session(&shared, &mut session, &mut shutdown, &mut stream_offset).await;

            self.health.consuming.store(false, Ordering::SeqCst);
            self.metrics.amqp_connected.set(0);
            match end {
                SessionEnd::Shutdown => {
                    tracing::info!("shutting down: no new requests; waiting for in-flight ones");
                    bounded_step("cancelling the consumers", async {
                        for (tag, _) in &session.consumer_tags {
                            let _ = session.consumer_channel.basic_cancel(tag).await;
                        }
                    })
                    .await;
                    wait_idle(
                        &shared,
                        Duration::from_secs(cfg.default.rpc_response_timeout),
                    )
                    .await;
                    if topology::delete_fanout_on_shutdown(r)
                        && let Some(f) = decls.iter().find(|d| d.kind == ConsumerKind::Fanout)
                    {
                        bounded_step("deleting the fanout queue", async {
                            let _ = session
                                .consumer_channel
                                .queue_delete(&f.queue, QueueDeleteOptions::default())
                                .await;
                        })
                        .await;
                    }
                    let _ = chan_tx.send(None);
                    self.connection.send_replace(None);
                    // The leader election holds the broker lock on this
                    // connection: it lets go first (deleting the lock queue
                    // and closing its channel), so nothing is torn down
                    // while the connection closes.
                    bounded_step("waiting for the leader election to let go", async {
                        while Arc::strong_count(&conn) > 1 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    })
                    .await;
                    bounded_step("closing the AMQP connection", async {
                        let _ = conn.close(200, "shutdown").await;
                    })
                    .await;
                    return;
                }
                SessionEnd::Lost(why) => {
                    let _ = chan_tx.send(None);
                    self.connection.send_replace(None);
                    tracing::error!(reason = %why, "lost the AMQP connection; reconnecting");
                    let _ = conn.close(320, "reconnecting").await;
                    let delay = Duration::from_secs_f64(r.kombu_reconnect_delay);
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        tracing::info!("shutting down while disconnected; waiting for in-flight requests");
        wait_idle(
            &shared,
            Duration::from_secs(cfg.default.rpc_response_timeout),
        )
        .await;
    }
}

/// How long one clean-up step at shutdown (after the in-flight requests)
/// may take before the conductor goes on without it: a broker or apiserver
/// that does not answer must not keep a stopping conductor alive until
/// systemd kills it.
pub const SHUTDOWN_STEP: Duration = Duration::from_secs(5);

/// Run one shutdown step, giving up (with a warning naming it) after
/// [`SHUTDOWN_STEP`].
pub async fn bounded_step(what: &str, step: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(SHUTDOWN_STEP, step).await.is_err() {
        tracing::warn!(
            step = what,
            "shutdown step unfinished after {}s; going on without it",
            SHUTDOWN_STEP.as_secs()
        );
    }
}

async fn wait_idle<H: Handlers>(shared: &Shared<H>, limit: Duration) {
    let n = shared.cfg.default.executor_thread_pool_size as u32;
    // Casts still waiting for a slot go ahead of this (the semaphores are
    // fair) and give theirs back at once: their session has ended.
    let both = async {
        let calls = shared.call_slots.acquire_many(n).await;
        let casts = shared.cast_slots.acquire_many(n).await;
        (calls, casts)
    };
    match tokio::time::timeout(limit, both).await {
        Ok(_) => tracing::info!("all in-flight requests finished"),
        Err(_) => tracing::warn!(
            "in-flight requests still running after {}s; unacknowledged ones will be redelivered",
            limit.as_secs()
        ),
    }
}

struct Session {
    consumer_channel: Channel,
    publisher: Channel,
    consumer_tags: Vec<(String, ConsumerKind)>,
    /// Taken by the session's loop.
    consumers: Vec<(ConsumerKind, amqp::Consumer)>,
}

async fn open_session(
    cfg: &Config,
    conn: &Connection,
    decls: &[ConsumerDecl],
) -> Result<Session, amqp::client::Error> {
    let mut ch = conn.create_channel().await?;
    if cfg.rabbit.rabbit_qos_prefetch_count > 0 {
        ch.basic_qos(cfg.rabbit.rabbit_qos_prefetch_count).await?;
    }
    for d in decls {
        ch = amqp::declare(conn, ch, d).await?;
    }
    let mut consumers = Vec::new();
    let mut consumer_tags = Vec::new();
    for (i, d) in decls.iter().enumerate() {
        let tag = (i + 1).to_string();
        consumers.push((d.kind, amqp::consume(&ch, d, &tag).await?));
        consumer_tags.push((tag, d.kind));
    }
    let publisher = conn.create_channel().await?;
    publisher.confirm_select().await?;
    Ok(Session {
        consumer_channel: ch,
        publisher,
        consumer_tags,
        consumers,
    })
}

async fn run_session<H: Handlers>(
    shared: &Arc<Shared<H>>,
    session: &mut Session,
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    stream_offset: &mut Option<i64>,
) -> SessionEnd {
    // Each consumer's stream ends with a `None` marker: `select_all` alone
    // would only end once *every* consumer is gone, so one queue deleted
    // under us (the broker cancels its consumer) would go unnoticed.
    let streams = std::mem::take(&mut session.consumers)
        .into_iter()
        .map(|(kind, c)| {
            c.map(move |d| (kind, Some(d)))
                .chain(futures_util::stream::once(async move { (kind, None) }))
                .boxed()
        });
    let mut merged = futures_util::stream::select_all(streams);
    // Cleared when this session ends: casts still waiting for a slot then
    // leave their delivery unacknowledged for the broker to hand out again.
    let live = Arc::new(AtomicBool::new(true));
    let _ended = SessionEnded(live.clone());
    let channel = &session.consumer_channel;
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => return SessionEnd::Shutdown,
            next = merged.next() => match next {
                None => return SessionEnd::Lost("every consumer cancelled by the broker".into()),
                Some((kind, None)) => {
                    return SessionEnd::Lost(format!("{kind:?} consumer cancelled by the broker"));
                }
                Some((_, Some(Err(e)))) => return SessionEnd::Lost(e.to_string()),
                Some((kind, Some(Ok(delivery)))) => {
                    if kind == ConsumerKind::Fanout
                        && shared.cfg.rabbit.rabbit_stream_fanout
                        && let Some(off) = stream_offset_of(&delivery)
                    {
                        *stream_offset = Some(off + 1);
                    }
                    let started = Instant::now();
                    // A cast is known without decoding it (it is decoded
                    // once, when its turn comes); anything else is decoded
                    // here to find its lane.
                    let known = lane_without_decoding(
                        &delivery.data,
                        compression_header(&delivery).is_some(),
                    );
                    let decoded = match known {
                        Some(_) => None,
                        None => Some(decode(shared, &delivery)),
                    };
                    match decoded {
                        Some(decoded) if lane(&decoded) == Lane::Call => {
                            // Backpressure: wait for a free call slot before
                            // taking more (calls are short).
                            let permit = match shared.call_slots.clone().acquire_owned().await {
                                Ok(p) => p,
                                Err(_) => return SessionEnd::Shutdown,
                            };
                            let shared = shared.clone();
                            let settle = Settle::new(channel.clone(), &delivery);
                            // The message's state boxed: the task stays small,
                            // so spawning it copies a few words, not the
                            // handlers' state (kilobytes, copied three times).
                            tokio::spawn(async move {
                                Box::pin(process(&shared, delivery, settle, decoded, started)).await;
                                drop(permit);
                            });
                        }
                        _ => {
                            // Wait for a cast slot without holding up the
                            // calls behind this cast: the broker has
                            // delivered it already (the prefetch count,
                            // when set, bounds how many wait), and the
                            // slots are handed out in arrival order. A
                            // waiting cast keeps its bytes, not the decoded
                            // message (several times their size): it is
                            // decoded when its turn comes.
                            drop(decoded);
                            let shared = shared.clone();
                            let live = live.clone();
                            let settle = Settle::new(channel.clone(), &delivery);
                            shared.metrics.rpc_waiting_casts.inc();
                            tokio::spawn(async move {
                                let permit = shared.cast_slots.clone().acquire_owned().await;
                                shared.metrics.rpc_waiting_casts.dec();
                                if permit.is_err() || !live.load(Ordering::SeqCst) {
                                    return;
                                }
                                let decoded = decode(&shared, &delivery);
                                Box::pin(process(&shared, delivery, settle, decoded, started)).await;
                                drop(permit);
                            });
                        }
                    }
                }
            }
        }
    }
}

/// Decode a delivery, timed.
fn decode<H: Handlers>(
    shared: &Shared<H>,
    delivery: &Delivery,
) -> Result<Incoming, rpc_schema::EnvelopeError> {
    let started = Instant::now();
    let decoded = decode_delivery(
        &delivery.data,
        compression_header(delivery).as_deref(),
        shared.cfg.conductor.max_message_bytes,
    );
    shared
        .metrics
        .decode_duration
        .observe(started.elapsed().as_secs_f64());
    decoded
}

/// Which handler slots a message takes: a cast waits for a cast slot;
/// calls, and anything that did not decode (refused at once), take a call
/// slot. A body with no `_msg_id` in its bytes is taken for a cast without
/// decoding it ([`lane_without_decoding`]): if it does not decode either,
/// it is refused when its turn comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Call,
    Cast,
}

/// A lane read off a body's bytes alone, where that is certain: a body
/// (not compressed) with no `_msg_id` anywhere in it is no call (a call's
/// inner message has that key, oslo's `_msg_id`). `None`: decode to know.
fn lane_without_decoding(body: &[u8], compressed: bool) -> Option<Lane> {
    if compressed || memchr::memmem::find(body, b"_msg_id").is_some() {
        return None;
    }
    Some(Lane::Cast)
}

fn lane(decoded: &Result<Incoming, rpc_schema::EnvelopeError>) -> Lane {
    match decoded {
        Ok(i) if !i.is_call() => Lane::Cast,
        _ => Lane::Call,
    }
}

/// Marks a session's waiting casts stale when the session ends, however
/// `run_session` returns.
struct SessionEnded(Arc<AtomicBool>);

impl Drop for SessionEnded {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

fn stream_offset_of(d: &Delivery) -> Option<i64> {
    let headers = d.properties.headers().as_ref()?;
    match headers.inner().get("x-stream-offset")? {
        AMQPValue::LongLongInt(v) => Some(*v),
        AMQPValue::LongInt(v) => Some(i64::from(*v)),
        AMQPValue::LongUInt(v) => Some(i64::from(*v)),
        _ => None,
    }
}

fn compression_header(d: &Delivery) -> Option<String> {
    let headers = d.properties.headers().as_ref()?;
    match headers.inner().get("compression")? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

/// Turn an AMQP body into an [`Incoming`] message, or say why not.
pub fn decode_delivery(
    body: &[u8],
    compression: Option<&str>,
    limit: usize,
) -> Result<Incoming, rpc_schema::EnvelopeError> {
    let plain;
    let body = match compression {
        None => body,
        Some(mime) => {
            let c = Compression::from_header(mime).ok_or_else(|| {
                rpc_schema::EnvelopeError::UnsupportedCompression(mime.to_string())
            })?;
            plain = c.decompress(body, limit)?;
            &plain[..]
        }
    };
    Incoming::from_body(body, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_delivery_handles_compression_and_garbage() {
        let body = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"ping_conductor\", \"args\": {}, \"_msg_id\": \"m\", \"_reply_q\": \"r\"}"}"#;
        let i = decode_delivery(body, None, 1 << 20).unwrap();
        assert!(i.is_call());
        let z = Compression::Zlib.compress(body);
        assert!(
            decode_delivery(&z, Some("application/x-gzip"), 1 << 20)
                .unwrap()
                .is_call()
        );
        assert!(decode_delivery(&z, Some("application/zstd"), 1 << 20).is_err());
        assert!(decode_delivery(b"\x00\x01", None, 1 << 20).is_err());
    }

    #[test]
    fn casts_take_the_cast_lane_and_everything_else_the_call_lane() {
        let call = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"ping_conductor\", \"args\": {}, \"_msg_id\": \"m\", \"_reply_q\": \"r\"}"}"#;
        let cast = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"cluster_delete\", \"args\": {\"uuid\": \"u\"}}"}"#;
        assert_eq!(lane(&decode_delivery(call, None, 1 << 20)), Lane::Call);
        assert_eq!(lane(&decode_delivery(cast, None, 1 << 20)), Lane::Cast);
        // Refused at once, whatever it was meant to be: no reason to wait.
        assert_eq!(lane(&decode_delivery(b"{", None, 1 << 20)), Lane::Call);
    }

    #[test]
    fn a_cast_is_known_by_its_bytes_and_a_call_never_taken_for_one() {
        let call = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"ping_conductor\", \"args\": {}, \"_msg_id\": \"m\", \"_reply_q\": \"r\"}"}"#;
        let cast = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"cluster_delete\", \"args\": {\"uuid\": \"u\"}}"}"#;
        let cast_naming_it = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"cluster_delete\", \"args\": {\"uuid\": \"_msg_id\"}}"}"#;
        assert_eq!(lane_without_decoding(cast, false), Some(Lane::Cast));
        assert_eq!(lane_without_decoding(call, false), None);
        // Unsure: decoded to know (and found a cast).
        assert_eq!(lane_without_decoding(cast_naming_it, false), None);
        assert_eq!(
            lane(&decode_delivery(cast_naming_it, None, 1 << 20)),
            Lane::Cast
        );
        assert_eq!(
            lane_without_decoding(cast, true),
            None,
            "compressed: not read"
        );
        // Every recorded call has the key where the bytes show it.
        for fixture in [
            include_str!("../../tests/fixtures/rpc/ping_conductor_call.json"),
            include_str!("../../tests/fixtures/rpc/cluster_create_call.json"),
            include_str!("../../tests/fixtures/rpc/cluster_upgrade_call.json"),
        ] {
            let f: serde_json::Value = serde_json::from_str(fixture).unwrap();
            let body = f["body"].as_str().unwrap().as_bytes();
            assert!(lane(&decode_delivery(body, None, 1 << 20)) == Lane::Call);
            assert_eq!(lane_without_decoding(body, false), None);
        }
    }
}

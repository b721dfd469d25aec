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
use tracing::Instrument;

use common::config::Config;
use futures_util::StreamExt;
use lapin::Acker;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicQosOptions, BasicRejectOptions, ConfirmSelectOptions,
    QueueDeleteOptions,
};
use lapin::types::AMQPValue;
use lapin::{Channel, Connection};
use rpc_schema::{
    Compression, ConductorRequest, Incoming, Outcome, RemoteFailure, envelope, methods,
    reply as wire_reply,
};
use tokio::sync::{Semaphore, watch};

use crate::amqp;
use crate::dedup::{Dedup, Seen};
use crate::handlers::{Durability, DurableSignal, HandlerRequest, Handlers, Route};
use crate::metrics::{Metrics, method_label};
use crate::reply::Replier;
use crate::topology::{self, ArgValue, ConsumerDecl, ConsumerKind};

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
    /// The current publisher channel, for replies and notifications.
    publisher: (
        watch::Sender<Option<Channel>>,
        watch::Receiver<Option<Channel>>,
    ),
    /// The current connection, for the broker leader election
    /// (`crate::lifecycle::coordination::elect`).
    connection: watch::Sender<Option<Arc<Connection>>>,
}

/// The publisher channel the RPC server will keep current (give the
/// receiver to whoever else publishes, e.g. the notifier).
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
            let session = match open_session(&cfg, &conn, &decls).await {
                Ok(s) => s,
                Err(e) => {
                    self.metrics.amqp_connect_failures.inc();
                    let delay = amqp::retry_delay(&cfg, attempt);
                    tracing::error!(target = %target.label, error = %e, "declaring the RPC topology failed");
                    let _ = conn.close(320, "declare failed".into()).await;
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

            let end = run_session(&shared, &session, &mut shutdown, &mut stream_offset).await;

            self.health.consuming.store(false, Ordering::SeqCst);
            self.metrics.amqp_connected.set(0);
            match end {
                SessionEnd::Shutdown => {
                    tracing::info!("shutting down: no new requests; waiting for in-flight ones");
                    for (tag, _) in &session.consumer_tags {
                        let _ = session
                            .consumer_channel
                            .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
                            .await;
                    }
                    wait_idle(
                        &shared,
                        Duration::from_secs(cfg.default.rpc_response_timeout),
                    )
                    .await;
                    if topology::delete_fanout_on_shutdown(r)
                        && let Some(f) = decls.iter().find(|d| d.kind == ConsumerKind::Fanout)
                    {
                        let _ = session
                            .consumer_channel
                            .queue_delete(f.queue.as_str().into(), QueueDeleteOptions::default())
                            .await;
                    }
                    let _ = chan_tx.send(None);
                    self.connection.send_replace(None);
                    let _ = conn.close(200, "shutdown".into()).await;
                    return;
                }
                SessionEnd::Lost(why) => {
                    let _ = chan_tx.send(None);
                    self.connection.send_replace(None);
                    tracing::error!(reason = %why, "lost the AMQP connection; reconnecting");
                    let _ = conn.close(320, "reconnecting".into()).await;
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
    consumers: Vec<(ConsumerKind, lapin::Consumer)>,
}

async fn open_session(
    cfg: &Config,
    conn: &Connection,
    decls: &[ConsumerDecl],
) -> Result<Session, lapin::Error> {
    let mut ch = conn.create_channel().await?;
    if cfg.rabbit.rabbit_qos_prefetch_count > 0 {
        ch.basic_qos(
            cfg.rabbit.rabbit_qos_prefetch_count,
            BasicQosOptions::default(),
        )
        .await?;
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
    publisher
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(Session {
        consumer_channel: ch,
        publisher,
        consumer_tags,
        consumers,
    })
}

async fn run_session<H: Handlers>(
    shared: &Arc<Shared<H>>,
    session: &Session,
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    stream_offset: &mut Option<i64>,
) -> SessionEnd {
    // Each consumer's stream ends with a `None` marker: `select_all` alone
    // would only end once *every* consumer is gone, so one queue deleted
    // under us (the broker cancels its consumer) would go unnoticed.
    let streams = session.consumers.iter().map(|(kind, c)| {
        let kind = *kind;
        c.clone()
            .map(move |d| (kind, Some(d)))
            .chain(futures_util::stream::once(async move { (kind, None) }))
            .boxed()
    });
    let mut merged = futures_util::stream::select_all(streams);
    // Cleared when this session ends: casts still waiting for a slot then
    // leave their delivery unacknowledged for the broker to hand out again.
    let live = Arc::new(AtomicBool::new(true));
    let _ended = SessionEnded(live.clone());
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
                    let decoded = decode(shared, &delivery);
                    match lane(&decoded) {
                        Lane::Call => {
                            // Backpressure: wait for a free call slot before
                            // taking more (calls are short).
                            let permit = match shared.call_slots.clone().acquire_owned().await {
                                Ok(p) => p,
                                Err(_) => return SessionEnd::Shutdown,
                            };
                            let shared = shared.clone();
                            tokio::spawn(async move {
                                process(&shared, delivery, decoded, started).await;
                                drop(permit);
                            });
                        }
                        Lane::Cast => {
                            // Wait for a cast slot without holding up the
                            // calls behind this cast: the broker has
                            // delivered it already (the prefetch count,
                            // when set, bounds how many wait), and the
                            // slots are handed out in arrival order. A
                            // waiting cast keeps its bytes, not the decoded
                            // message (several times their size): it is
                            // decoded again when its turn comes.
                            drop(decoded);
                            let shared = shared.clone();
                            let live = live.clone();
                            shared.metrics.rpc_waiting_casts.inc();
                            tokio::spawn(async move {
                                let permit = shared.cast_slots.clone().acquire_owned().await;
                                shared.metrics.rpc_waiting_casts.dec();
                                if permit.is_err() || !live.load(Ordering::SeqCst) {
                                    return;
                                }
                                let decoded = decode(&shared, &delivery);
                                process(&shared, delivery, decoded, started).await;
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

/// Which handler slots a message takes: a well-formed cast waits for a
/// cast slot; calls, and anything that did not decode (refused at once),
/// take a call slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Call,
    Cast,
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
    Ok(Incoming::from_message(envelope::decode(body, limit)?))
}

async fn ack(acker: &Acker, what: &str) {
    if let Err(e) = acker.ack(BasicAckOptions::default()).await {
        // The channel is gone: the broker will redeliver; dedup handles it.
        tracing::warn!(error = %e, what, "failed to acknowledge a message");
    }
}

async fn process<H: Handlers>(
    shared: &Arc<Shared<H>>,
    delivery: Delivery,
    decoded: Result<Incoming, rpc_schema::EnvelopeError>,
    started: Instant,
) {
    let m = &shared.metrics;
    if delivery.redelivered {
        m.rpc_redeliveries.inc();
    }
    let incoming = match decoded {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, routing_key = %delivery.routing_key, bytes = delivery.data.len(), "dropping an undecodable message");
            m.rpc_rejected
                .with_label_values(&[e.metric_label(), "unknown"])
                .inc();
            if let Err(e) = delivery
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await
            {
                tracing::warn!(error = %e, "failed to reject a message");
            }
            return;
        }
    };
    let kind = if incoming.is_call() { "call" } else { "cast" };
    let label = method_label(incoming.method_name());
    let unique_id = incoming.unique_id.clone();
    if let Some(id) = &unique_id {
        match shared.dedup.check(id) {
            Seen::New => {}
            Seen::Done => {
                tracing::info!(unique_id = %id, method = label, "ignoring duplicate message");
                m.rpc_messages
                    .with_label_values(&[label, kind, "duplicate"])
                    .inc();
                ack(&delivery.acker, "duplicate").await;
                return;
            }
            Seen::InFlight(done) => {
                tracing::info!(unique_id = %id, method = label, "message redelivered while still being handled; acknowledging when done");
                m.rpc_messages
                    .with_label_values(&[label, kind, "duplicate"])
                    .inc();
                done.notified().await;
                ack(&delivery.acker, "duplicate").await;
                return;
            }
        }
    }
    if kind == "call" && incoming.reply_q.is_none() {
        tracing::warn!(method = label, "call without _reply_q: cannot reply");
        m.rpc_rejected
            .with_label_values(&["no_reply_queue", kind])
            .inc();
    }
    m.rpc_inflight.inc();
    let ping_enabled = shared.ping_enabled;
    let decoded = incoming
        .request(|name| {
            methods::method(name).is_some() || (ping_enabled && name == methods::PING_METHOD)
        })
        .and_then(|req| ConductorRequest::decode(&req.method, &req.args));
    let (outcome, state) = match decoded {
        Err(failure) => {
            tracing::warn!(method = label, kind, failure = %failure, "refusing request");
            m.rpc_rejected
                .with_label_values(&["bad_request", kind])
                .inc();
            (Outcome::Failure(failure), AckState::Pending)
        }
        Ok(request) => match shared.handlers.route(&request).await {
            Route::Forward { topic, driver } => {
                forward(shared, &delivery, &incoming, kind, &topic, &driver).await;
                m.rpc_inflight.dec();
                m.rpc_duration
                    .with_label_values(&[label])
                    .observe(started.elapsed().as_secs_f64());
                return;
            }
            Route::Here => {
                run_handler(
                    shared,
                    &incoming,
                    request,
                    delivery.redelivered,
                    &delivery.acker,
                )
                .await
            }
        },
    };
    let requeue = state == AckState::Requeue && kind == "cast";
    let outcome_label = match &outcome {
        _ if requeue => "requeued",
        Outcome::Result(_) => "ok",
        Outcome::Failure(_) => "failure",
    };
    if requeue {
        // Nothing was recorded and a dependency is down: hand the cast back
        // to the broker (after a pause, so an outage is not a hot loop) and
        // let the redelivery run again here or on another conductor.
        tracing::warn!(method = label, failure = %outcome_failure(&outcome).unwrap_or_default(), retry_in_s = REQUEUE_DELAY.as_secs(),
            "a dependency is unavailable; the cast goes back to the queue");
        requeue_later(shared, &delivery, unique_id.as_deref()).await;
    } else {
        if let Outcome::Failure(f) = &outcome
            && kind == "cast"
        {
            tracing::warn!(method = label, failure = %f, "cast failed");
        }
        answer(
            shared,
            &delivery,
            &incoming,
            &outcome,
            state != AckState::Acked,
        )
        .await;
    }
    m.rpc_inflight.dec();
    m.rpc_messages
        .with_label_values(&[label, kind, outcome_label])
        .inc();
    m.rpc_duration
        .with_label_values(&[label])
        .observe(started.elapsed().as_secs_f64());
}

/// Republish a request about another driver's cluster to `topic`
/// ([`crate::forward`]); acknowledge it once the copy is confirmed. A copy
/// that could not be placed sends a cast back to the queue (after a pause)
/// and answers a call with the reason.
async fn forward<H: Handlers>(
    shared: &Arc<Shared<H>>,
    delivery: &Delivery,
    incoming: &Incoming,
    kind: &'static str,
    topic: &str,
    driver: &str,
) {
    let m = &shared.metrics;
    let label = method_label(incoming.method_name());
    let unique_id = incoming.unique_id.clone();
    crate::failpoint::hit("forward.before_publish").await;
    match shared
        .forwarder
        .forward(&delivery.data, delivery.properties.clone(), topic)
        .await
    {
        Ok(()) => {
            crate::failpoint::hit("forward.after_confirm").await;
            tracing::info!(method = label, kind, %topic, %driver, "another driver's cluster: forwarded");
            ack(&delivery.acker, "forwarded").await;
            if let Some(id) = &unique_id {
                shared.dedup.finish(id);
            }
            m.rpc_forwarded
                .with_label_values(&[label, driver, "forwarded"])
                .inc();
            m.rpc_messages
                .with_label_values(&[label, kind, "forwarded"])
                .inc();
        }
        Err(why) => {
            m.rpc_forwarded
                .with_label_values(&[label, driver, "failed"])
                .inc();
            if kind == "cast" {
                tracing::warn!(method = label, %topic, %driver, reason = %why, retry_in_s = REQUEUE_DELAY.as_secs(),
                    "cannot forward; the cast goes back to the queue");
                requeue_later(shared, delivery, unique_id.as_deref()).await;
                m.rpc_messages
                    .with_label_values(&[label, kind, "requeued"])
                    .inc();
            } else {
                tracing::warn!(method = label, %topic, %driver, reason = %why, "cannot forward; the call is answered");
                let failure = Outcome::Failure(RemoteFailure::magnum_with_message(
                    "MagnumException",
                    &format!(
                        "{label} is about a cluster of the {driver} driver, which this \
                         conductor forwards to topic {topic}, and the forward failed: {why}"
                    ),
                    Default::default(),
                ));
                answer(shared, delivery, incoming, &failure, true).await;
                m.rpc_messages
                    .with_label_values(&[label, kind, "failure"])
                    .inc();
            }
        }
    }
}

/// Hand a cast back to the broker after [`REQUEUE_DELAY`] (so an outage
/// is not a hot loop), for a redelivery here or on another conductor.
async fn requeue_later<H: Handlers>(
    shared: &Shared<H>,
    delivery: &Delivery,
    unique_id: Option<&str>,
) {
    tokio::time::sleep(REQUEUE_DELAY).await;
    if let Some(id) = unique_id {
        shared.dedup.forget(id);
    }
    if let Err(e) = delivery
        .acker
        .reject(BasicRejectOptions { requeue: true })
        .await
    {
        // The channel is gone: the broker redelivers it anyway.
        tracing::warn!(error = %e, "failed to requeue a message");
    }
}

/// The end of a handled message: the reply (calls), the acknowledgement
/// (unless already given) and the duplicate filter's record.
async fn answer<H: Handlers>(
    shared: &Shared<H>,
    delivery: &Delivery,
    incoming: &Incoming,
    outcome: &Outcome,
    acknowledge: bool,
) {
    if let (Some(msg_id), Some(reply_q)) = (&incoming.msg_id, &incoming.reply_q) {
        let body = wire_reply::encode_reply(msg_id, outcome);
        shared.replier.send(reply_q, msg_id, body, "final").await;
    }
    if acknowledge {
        ack(&delivery.acker, "done").await;
    }
    if let Some(id) = &incoming.unique_id {
        shared.dedup.finish(id);
    }
}

/// How long a cast whose handler asked to retry later waits before it goes
/// back to the queue.
const REQUEUE_DELAY: Duration = Duration::from_secs(5);

/// Where a message stands when its handler returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckState {
    /// Acknowledge when done.
    Pending,
    /// Acknowledged on the durable signal already.
    Acked,
    /// The handler asked for a retry: requeue (casts).
    Requeue,
}

fn outcome_failure(o: &Outcome) -> Option<String> {
    match o {
        Outcome::Failure(f) => Some(f.to_string()),
        Outcome::Result(_) => None,
    }
}

/// Run the handler in its own task (a panic becomes a failure reply), with
/// call-monitor heartbeats and early acknowledgement on the durable signal.
/// Returns the outcome and where the message stands.
async fn run_handler<H: Handlers>(
    shared: &Arc<Shared<H>>,
    incoming: &Incoming,
    request: ConductorRequest,
    redelivered: bool,
    acker: &Acker,
) -> (Outcome, AckState) {
    let method = request.method();
    let (durable, mut durable_rx) = DurableSignal::new();
    let req = HandlerRequest {
        context: incoming.context.clone(),
        request,
        is_call: incoming.is_call(),
        unique_id: incoming.unique_id.clone(),
        redelivered,
        durable,
    };
    let handlers = shared.handlers.clone();
    // Every line of this request's work carries its request id (as oslo.log
    // puts it in each line of a request's context).
    let span = tracing::info_span!(
        "request",
        request_id = incoming.context.request_id().unwrap_or("-"),
        method
    );
    let mut task = tokio::spawn(
        async move {
            crate::failpoint::delay("handle", method).await;
            handlers.handle(req).await
        }
        .instrument(span),
    );
    let heartbeat_every = incoming
        .call_monitor_timeout
        .map(|t| t.trunc() / 2.0)
        .filter(|every| *every >= 1.0)
        .map(Duration::from_secs_f64);
    if incoming.call_monitor_timeout.is_some() && heartbeat_every.is_none() {
        tracing::warn!(timeout = ?incoming.call_monitor_timeout, "client provided an invalid call-monitor timeout");
    }
    let mut ticker = heartbeat_every
        .map(|every| tokio::time::interval_at(tokio::time::Instant::now() + every, every));
    let mut state = AckState::Pending;
    let mut durable_open = true;
    let outcome = loop {
        tokio::select! {
            res = &mut task => break match res {
                Ok(o) => o,
                Err(e) => {
                    tracing::error!(method, error = %e, "handler crashed");
                    Outcome::Failure(RemoteFailure::magnum_with_message(
                        "MagnumException",
                        &format!("Internal error while handling {method}"),
                        Default::default(),
                    ))
                }
            },
            signal = &mut durable_rx, if durable_open => {
                // Closed without a signal: the handler is finishing; ack when done.
                durable_open = false;
                state = on_durable(signal.ok(), acker).await;
            }
            _ = async { match ticker.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                if let (Some(msg_id), Some(reply_q)) = (&incoming.msg_id, &incoming.reply_q) {
                    shared.replier.send(reply_q, msg_id, wire_reply::encode_heartbeat(msg_id), "heartbeat").await;
                }
            }
        }
    };
    if durable_open {
        // The handler signalled and returned at once: the select saw the end first.
        if let Ok(d) = durable_rx.try_recv() {
            state = on_durable(Some(d), acker).await;
        }
    }
    (outcome, state)
}

async fn on_durable(signal: Option<Durability>, acker: &Acker) -> AckState {
    match signal {
        Some(Durability::Recorded) => {
            ack(acker, "durable").await;
            AckState::Acked
        }
        Some(Durability::RetryLater) => AckState::Requeue,
        None => AckState::Pending,
    }
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
}

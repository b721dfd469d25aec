//! One delivered message's life, once decoded: dispatch to the handler
//! (or forward it to another driver's conductor), reply to calls,
//! acknowledge at the first durable effect or at the end, requeue what
//! must wait (a database outage, a cluster busy on another conductor).
//! The session that received it is in [`super`].

use futures_util::FutureExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use crate::amqp::Channel;
use crate::amqp::client::{Delivery, Error as AmqpError};
use rpc_schema::{
    ConductorRequest, Incoming, Outcome, RemoteFailure, methods, reply as wire_reply,
};

use super::Shared;
use crate::dedup::Seen;
use crate::handlers::{Durability, DurableSignal, HandlerRequest, Handlers, Route};
use crate::metrics::method_label;

/// Settles one delivery on the channel it came from: the acknowledgement
/// or rejection is handed to the connection's writer (no answer comes).
pub(super) struct Settle {
    channel: Channel,
    tag: u64,
}

impl Settle {
    pub(super) fn new(channel: Channel, delivery: &Delivery) -> Settle {
        Settle {
            channel,
            tag: delivery.delivery_tag,
        }
    }

    fn ack(&self, what: &str) {
        if let Err(e) = self.channel.basic_ack(self.tag) {
            // The channel is gone: the broker will redeliver; dedup handles it.
            tracing::warn!(error = %e, what, "failed to acknowledge a message");
        }
    }

    fn reject(&self, requeue: bool) -> Result<(), AmqpError> {
        self.channel.basic_reject(self.tag, requeue)
    }
}

pub(super) async fn process<H: Handlers>(
    shared: &Arc<Shared<H>>,
    delivery: Delivery,
    settle: Settle,
    decoded: Result<Incoming, rpc_schema::EnvelopeError>,
    started: Instant,
) {
    let m = &shared.metrics;
    if delivery.redelivered {
        m.rpc_redeliveries.inc();
    }
    let mut incoming = match decoded {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(error = %e, routing_key = %delivery.routing_key, bytes = delivery.data.len(), "dropping an undecodable message");
            m.rpc_rejected
                .with_label_values(&[e.metric_label(), "unknown"])
                .inc();
            if let Err(e) = settle.reject(false) {
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
                settle.ack("duplicate");
                return;
            }
            Seen::InFlight(done) => {
                tracing::info!(unique_id = %id, method = label, "message redelivered while still being handled; acknowledging when done");
                m.rpc_messages
                    .with_label_values(&[label, kind, "duplicate"])
                    .inc();
                done.notified().await;
                settle.ack("duplicate");
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
                // Boxed: a rare path's state kept out of every message's task.
                Box::pin(forward(
                    shared, &delivery, &settle, &incoming, kind, &topic, &driver,
                ))
                .await;
                m.rpc_inflight.dec();
                m.rpc_duration
                    .with_label_values(&[label])
                    .observe(started.elapsed().as_secs_f64());
                return;
            }
            Route::Here => {
                // The handler owns the context (no copy of ~30 entries per
                // message); nothing after it reads the context.
                let context = std::mem::take(&mut incoming.context);
                run_handler(
                    shared,
                    &incoming,
                    context,
                    request,
                    delivery.redelivered,
                    &settle,
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
        requeue_later(shared, &settle, unique_id.as_deref()).await;
    } else {
        if let Outcome::Failure(f) = &outcome
            && kind == "cast"
        {
            tracing::warn!(method = label, failure = %f, "cast failed");
        }
        answer(
            shared,
            &settle,
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
    settle: &Settle,
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
            settle.ack("forwarded");
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
                requeue_later(shared, settle, unique_id.as_deref()).await;
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
                answer(shared, settle, incoming, &failure, true).await;
                m.rpc_messages
                    .with_label_values(&[label, kind, "failure"])
                    .inc();
            }
        }
    }
}

/// Hand a cast back to the broker after [`REQUEUE_DELAY`] (so an outage
/// is not a hot loop), for a redelivery here or on another conductor.
async fn requeue_later<H: Handlers>(shared: &Shared<H>, settle: &Settle, unique_id: Option<&str>) {
    tokio::time::sleep(REQUEUE_DELAY).await;
    if let Some(id) = unique_id {
        shared.dedup.forget(id);
    }
    if let Err(e) = settle.reject(true) {
        // The channel is gone: the broker redelivers it anyway.
        tracing::warn!(error = %e, "failed to requeue a message");
    }
}

/// The end of a handled message: the reply (calls), the acknowledgement
/// (unless already given) and the duplicate filter's record. The reply is
/// handed to the writer first and the acknowledgement right after it,
/// before the reply's publisher confirm (both usually leave in one write):
/// a conductor killed before that write leaves neither (the call is
/// delivered again), after it both are with the broker; a reply the broker
/// returns (the caller's queue is missing) is retried here as before.
async fn answer<H: Handlers>(
    shared: &Shared<H>,
    settle: &Settle,
    incoming: &Incoming,
    outcome: &Outcome,
    acknowledge: bool,
) {
    let reply = async {
        if let (Some(msg_id), Some(reply_q)) = (&incoming.msg_id, &incoming.reply_q) {
            let body = wire_reply::encode_reply(msg_id, outcome);
            shared.replier.send(reply_q, msg_id, body, "final").await;
        }
    };
    // Polled once (the reply handed to the writer), then the acknowledgement.
    let ack = async {
        if acknowledge {
            settle.ack("done");
        }
    };
    futures_util::future::join(reply, ack).await;
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
    context: rpc_schema::RequestContext,
    request: ConductorRequest,
    redelivered: bool,
    settle: &Settle,
) -> (Outcome, AckState) {
    let method = request.method();
    let (durable, mut durable_rx) = DurableSignal::new();
    // Every line of this request's work carries its request id (as oslo.log
    // puts it in each line of a request's context).
    // Displayed, not debugged: a `str`'s Debug escapes it character by
    // character, and the log layer renders a span's fields when it is made
    // (the span is ~6,000 of a `ping_conductor` call's 88,000 instructions,
    // most of it the layer's own escaping of control characters).
    let span = tracing::info_span!(
        "request",
        request_id = %context.request_id().unwrap_or("-"),
        method = %method
    );
    let req = HandlerRequest {
        context,
        request,
        is_call: incoming.is_call(),
        unique_id: incoming.unique_id.clone(),
        redelivered,
        durable,
    };
    let handlers = shared.handlers.clone();
    // Polled in this task, not spawned: a spawn is one more hand-off
    // between the runtime's threads per message. Boxed: the handler's state
    // is not part of the message task's (which a spawn copies whole; see
    // docs/benchmarks.md, "Instructions per message"). A panic in the
    // handler is caught here as a spawned task's would be.
    let mut task = Box::pin(
        std::panic::AssertUnwindSafe(
            async move {
                crate::failpoint::delay("handle", method).await;
                handlers.handle(req).await
            }
            .instrument(span),
        )
        .catch_unwind(),
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
                Err(panic) => {
                    let e = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
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
                state = on_durable(signal.ok(), settle).await;
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
            state = on_durable(Some(d), settle).await;
        }
    }
    (outcome, state)
}

async fn on_durable(signal: Option<Durability>, settle: &Settle) -> AckState {
    match signal {
        Some(Durability::Recorded) => {
            settle.ack("durable");
            AckState::Acked
        }
        Some(Durability::RetryLater) => AckState::Requeue,
        None => AckState::Pending,
    }
}

//! Sending replies to calls: to the default exchange, routing key
//! `_reply_q`, mandatory; retried every 0.25 s while the broker returns it
//! (the caller's reply queue is missing, e.g. during a broker failover) or
//! while we are reconnecting, up to `kombu_missing_consumer_retry_timeout`;
//! then the queue is remembered as gone for 60 s (200 entries), as oslo does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{AMQPValue, FieldTable, LongString};

use crate::amqp::Channel;
use crate::amqp::client::{BasicPublishOptions, Confirmation};
use rpc_schema::Compression;
use tokio::sync::watch;

use crate::metrics::Metrics;

const GONE_TTL: Duration = Duration::from_secs(60);
const GONE_CAPACITY: usize = 200;
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// Publishes replies on the current publisher channel.
#[derive(Clone)]
pub struct Replier {
    channel: watch::Receiver<Option<Channel>>,
    gone: Arc<Mutex<HashMap<String, Instant>>>,
    mandatory: bool,
    retry_timeout: Duration,
    compression: Option<Compression>,
    metrics: Metrics,
}

/// The basic properties kombu sets on every oslo message.
pub fn properties(compression: Option<Compression>) -> BasicProperties {
    let mut headers = FieldTable::default();
    if let Some(c) = compression {
        headers.insert(
            "compression".into(),
            AMQPValue::LongString(LongString::from(c.mime())),
        );
    }
    BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_delivery_mode(2)
        .with_priority(0)
        .with_headers(headers)
}

impl Replier {
    pub fn new(
        channel: watch::Receiver<Option<Channel>>,
        mandatory: bool,
        retry_timeout: Duration,
        compression: Option<Compression>,
        metrics: Metrics,
    ) -> Replier {
        Replier {
            channel,
            gone: Arc::default(),
            mandatory,
            retry_timeout,
            compression,
            metrics,
        }
    }

    fn is_gone(&self, reply_q: &str) -> bool {
        let Ok(mut gone) = self.gone.lock() else {
            return false;
        };
        gone.retain(|_, at| at.elapsed() < GONE_TTL);
        gone.contains_key(reply_q)
    }

    fn mark_gone(&self, reply_q: &str) {
        if let Ok(mut gone) = self.gone.lock() {
            if gone.len() >= GONE_CAPACITY
                && let Some(oldest) = gone
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(k, _)| k.clone())
            {
                gone.remove(&oldest);
            }
            gone.insert(reply_q.to_string(), Instant::now());
        }
    }

    /// Send `body` to `reply_q`. `kind` labels the metric (`final`/`heartbeat`).
    pub async fn send(&self, reply_q: &str, msg_id: &str, body: Vec<u8>, kind: &'static str) {
        if self.is_gone(reply_q) {
            tracing::warn!(reply_queue = %reply_q, msg_id, "reply queue doesn't exist, drop reply");
            self.metrics
                .rpc_replies
                .with_label_values(&["queue_gone", kind])
                .inc();
            return;
        }
        let body = match self.compression {
            Some(c) => c.compress(&body),
            None => body,
        };
        let deadline = Instant::now() + self.retry_timeout;
        let mut channel_rx = self.channel.clone();
        loop {
            let ch = channel_rx.borrow_and_update().clone();
            let result = match ch {
                Some(ch) => self.publish_once(&ch, reply_q, &body).await,
                None => Err("not connected".to_string()),
            };
            match result {
                Ok(()) => {
                    self.metrics
                        .rpc_replies
                        .with_label_values(&["sent", kind])
                        .inc();
                    return;
                }
                Err(why) => {
                    if Instant::now() >= deadline {
                        tracing::error!(
                            msg_id, reply_queue = %reply_q, reason = %why,
                            "the reply failed to send after {}s; abandoning", self.retry_timeout.as_secs()
                        );
                        self.mark_gone(reply_q);
                        self.metrics
                            .rpc_replies
                            .with_label_values(&["queue_gone", kind])
                            .inc();
                        return;
                    }
                    tracing::debug!(msg_id, reply_queue = %reply_q, reason = %why, "reply not delivered yet, retrying");
                    // Wake early when a new channel appears after a reconnect.
                    let _ = tokio::time::timeout(RETRY_EVERY, channel_rx.changed()).await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    async fn publish_once(&self, ch: &Channel, reply_q: &str, body: &[u8]) -> Result<(), String> {
        let confirm = ch
            .basic_publish(
                "",
                reply_q,
                BasicPublishOptions {
                    mandatory: self.mandatory,
                },
                body,
                properties(self.compression),
            )
            .map_err(|e| e.to_string())?;
        match confirm.await.map_err(|e| e.to_string())? {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
            Confirmation::Ack(Some(_)) => Err("returned by the broker: no such reply queue".into()),
            Confirmation::Nack(_) => Err("nacked by the broker".into()),
        }
    }
}

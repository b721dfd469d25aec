//! Forwarding requests about other drivers' clusters to a Python
//! magnum-conductor (`[conductor] legacy_topic`).
//!
//! The message is republished byte for byte (envelope, `_unique_id`,
//! `_msg_id`, `_reply_q`, content headers) on the same exchange with the
//! legacy topic as routing key. The Python conductor replies to a call
//! straight to magnum-api's reply queue, so the caller gets that
//! conductor's own reply (result, failure, timeout) unchanged; nothing of
//! it passes through here.
//!
//! Delivery: the original is acknowledged only once the broker has
//! confirmed the copy (publisher confirms, `mandatory`: a copy no queue
//! would take is returned, not dropped), so a forward is never lost; a
//! failed one goes back to the queue (casts) or is answered (calls, whose
//! caller is waiting). A broker failure between the confirm and the
//! acknowledgement redelivers the original, and its copy is forwarded
//! again with the same `_unique_id`, which oslo.messaging's listener
//! drops as a duplicate (`amqp._MsgIdCache`, its last 16 ids).

use crate::amqp::Channel;
use crate::amqp::client::{BasicPublishOptions, Confirmation};
use tokio::sync::watch;

/// Republishes deliveries on the RPC exchange.
#[derive(Clone)]
pub struct Forwarder {
    channel: watch::Receiver<Option<Channel>>,
    exchange: String,
}

impl Forwarder {
    pub fn new(channel: watch::Receiver<Option<Channel>>, exchange: &str) -> Forwarder {
        Forwarder {
            channel,
            exchange: exchange.to_string(),
        }
    }

    /// Publish `body` (with the original `properties`) to `topic` and wait
    /// for the broker's confirmation.
    pub async fn forward(
        &self,
        body: &[u8],
        properties: amq_protocol::protocol::BasicProperties,
        topic: &str,
    ) -> Result<(), String> {
        let ch = self.channel.borrow().clone();
        let Some(ch) = ch else {
            return Err("not connected to the broker".into());
        };
        let confirm = ch
            .basic_publish(
                &self.exchange,
                topic,
                BasicPublishOptions { mandatory: true },
                body,
                properties,
            )
            .map_err(|e| e.to_string())?;
        match confirm.await.map_err(|e| e.to_string())? {
            Confirmation::Ack(None) | Confirmation::NotRequested => Ok(()),
            Confirmation::Ack(Some(_)) => Err(format!(
                "no queue takes topic {topic} on exchange {}: is a Python magnum-conductor running \
                 with [conductor] topic = {topic}?",
                self.exchange
            )),
            Confirmation::Nack(_) => Err("the broker refused the message (nack)".into()),
        }
    }
}

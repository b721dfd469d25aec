//! An AMQP 0-9-1 client whose reading and writing are tasks on the
//! application's own tokio runtime.
//!
//! Why not lapin (which this replaced, and whose protocol crate,
//! amq-protocol, encodes the methods here): lapin 4 runs its I/O loop on a
//! thread of its own (`io_loop.rs`, `IoLoop::start`), while the socket's
//! readiness comes from tokio's reactor. Every network event of a call (the
//! delivery in, the reply and acknowledgement out, the publisher confirm
//! in) then crossed worker -> lapin's thread -> worker, a futex wake and a
//! sleep on each side. Here the reader task parses frames and hands
//! deliveries to the consumer's channel, and whoever publishes or
//! acknowledges hands bytes to the writer task: tokio runs a task woken by
//! the running one next on the same worker (docs/benchmarks.md, "CPU per
//! message").
//!
//! What the conductor needs and nothing more: channels, exchange and queue
//! declarations, consumers with manual acknowledgement, publishing with
//! publisher confirms and `mandatory` returns, heartbeats, TLS, the
//! PLAIN/AMQPLAIN/EXTERNAL/RABBIT-CR-DEMO logins. A connection that fails
//! (socket, heartbeats, a protocol error, the broker closing it) fails every
//! waiting call, consumer and confirm with the reason, once; reconnecting is
//! the caller's (the RPC server's loop), as it was with lapin.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use amq_protocol::auth::Credentials;
use amq_protocol::protocol::{
    AMQPClass, BasicProperties, basic, channel, confirm, connection, exchange, queue,
};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use amq_protocol::uri::SASLMechanism;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::frame::{self, Assembly, Content, Frame, Start};

/// Why an AMQP operation failed. Cloned to every waiter of a connection
/// or channel that ends. No secret is ever part of it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("I/O: {0}")]
    Io(Arc<std::io::Error>),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("timed out {0}")]
    Timeout(&'static str),
    #[error("the broker closed the channel: {code} {text}")]
    ChannelClosed { code: u16, text: String },
    #[error("the broker closed the connection: {code} {text}")]
    ConnectionClosed { code: u16, text: String },
    #[error("the connection is closed ({0})")]
    Closed(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("no frame from the broker for {0} s (missed heartbeats)")]
    MissedHeartbeats(u64),
}

impl Error {
    /// The broker's reply code, when the broker closed the channel or the
    /// connection (e.g. 405 RESOURCE_LOCKED, 406 PRECONDITION_FAILED).
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            Error::ChannelClosed { code, .. } | Error::ConnectionClosed { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(Arc::new(e))
    }
}

/// Where and how to connect. Its `Debug` leaves the password out.
#[derive(Clone)]
pub struct ConnectOptions {
    pub host: String,
    pub port: u16,
    pub vhost: String,
    pub username: String,
    pub password: String,
    pub mechanism: SASLMechanism,
    /// Seconds; 0 turns heartbeats off (the broker's lower value wins).
    pub heartbeat: u16,
    /// Bytes; the broker's lower value wins.
    pub frame_max: u32,
    /// For the TCP connection, the TLS handshake and the AMQP one together.
    pub timeout: Duration,
    /// `Some` for AMQPS.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Shown by the broker (`rabbitmqctl list_connections client_properties`).
    pub name: String,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("vhost", &self.vhost)
            .field("username", &self.username)
            .field("mechanism", &self.mechanism)
            .field("heartbeat", &self.heartbeat)
            .field("frame_max", &self.frame_max)
            .field("tls", &self.tls.is_some())
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The kinds of exchange the conductor declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    Direct,
    Fanout,
    Topic,
}

impl ExchangeKind {
    fn name(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ExchangeDeclareOptions {
    pub passive: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct QueueDeclareOptions {
    pub passive: bool,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct QueueDeleteOptions {
    pub if_unused: bool,
    pub if_empty: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct BasicConsumeOptions {
    pub no_local: bool,
    pub no_ack: bool,
    pub exclusive: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct BasicPublishOptions {
    pub mandatory: bool,
}

/// A message delivered to a consumer. Its `Debug` gives the body's size,
/// not the body (a request's context holds a Keystone token).
pub struct Delivery {
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: ShortString,
    pub routing_key: ShortString,
    pub properties: BasicProperties,
    pub data: Vec<u8>,
}

/// A `mandatory` message no queue took, as the broker returned it (its
/// `Debug`, like a delivery's, without the body).
pub struct Returned {
    pub reply_code: u16,
    pub reply_text: ShortString,
    pub exchange: ShortString,
    pub routing_key: ShortString,
    pub properties: BasicProperties,
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("delivery_tag", &self.delivery_tag)
            .field("redelivered", &self.redelivered)
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("bytes", &self.data.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Returned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Returned")
            .field("reply_code", &self.reply_code)
            .field("reply_text", &self.reply_text)
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("bytes", &self.data.len())
            .finish_non_exhaustive()
    }
}

/// The broker's word on a published message.
#[derive(Debug)]
pub enum Confirmation {
    /// Taken (with the returned message if it was `mandatory` and unroutable).
    Ack(Option<Box<Returned>>),
    /// Refused by the broker.
    Nack(Option<Box<Returned>>),
    /// The channel is not in confirm mode: nothing to wait for.
    NotRequested,
}

/// Resolves with the broker's confirmation of one published message.
pub struct PublisherConfirm(Option<oneshot::Receiver<Result<Confirmation, Error>>>);

impl Future for PublisherConfirm {
    type Output = Result<Confirmation, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            None => Poll::Ready(Ok(Confirmation::NotRequested)),
            Some(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or_else(|_| Err(Error::Closed("the channel ended".into())))),
        }
    }
}

/// A consumer's deliveries, in order; an error, then the end, when its
/// channel or connection ends; the end alone when the broker cancels it.
pub struct Consumer {
    rx: mpsc::UnboundedReceiver<Result<Delivery, Error>>,
}

impl futures_util::Stream for Consumer {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

type Reply = oneshot::Sender<Result<AMQPClass, Error>>;

struct Unconfirmed {
    tx: oneshot::Sender<Result<Confirmation, Error>>,
    exchange: ShortString,
    routing_key: ShortString,
    returned: Option<Box<Returned>>,
}

/// One channel's state, kept by the connection and changed by the reader
/// task (what the broker says) and by callers (what they ask).
#[derive(Default)]
struct Chan {
    /// Callers waiting for the answer to a synchronous method, in the
    /// order they sent them (the broker answers in order, spec 2.3.5).
    waiting: VecDeque<Reply>,
    consumers: HashMap<String, mpsc::UnboundedSender<Result<Delivery, Error>>>,
    assembly: Assembly,
    /// `Some` in confirm mode: the next publish's sequence number and the
    /// messages not confirmed yet.
    confirms: Option<(u64, BTreeMap<u64, Unconfirmed>)>,
}

impl Chan {
    fn fail(self, err: &Error) {
        for w in self.waiting {
            let _ = w.send(Err(err.clone()));
        }
        for (_, c) in self.consumers {
            let _ = c.send(Err(err.clone()));
        }
        if let Some((_, pending)) = self.confirms {
            for (_, u) in pending {
                let _ = u.tx.send(Err(err.clone()));
            }
        }
    }

    /// `basic.ack`/`basic.nack` from the broker for `tag` (and every
    /// earlier one when `multiple`).
    fn confirm(&mut self, tag: u64, multiple: bool, ack: bool) {
        let Some((_, pending)) = &mut self.confirms else {
            return;
        };
        let tags: Vec<u64> = if multiple {
            pending.range(..=tag).map(|(t, _)| *t).collect()
        } else {
            vec![tag]
        };
        for t in tags {
            if let Some(u) = pending.remove(&t) {
                let _ = u.tx.send(Ok(if ack {
                    Confirmation::Ack(u.returned)
                } else {
                    Confirmation::Nack(u.returned)
                }));
            }
        }
    }

    /// A returned message: it is the earliest unconfirmed one published to
    /// the same exchange and routing key (the broker returns a message
    /// before it confirms it, and returns in publishing order).
    fn returned(&mut self, r: Returned) {
        let Some((_, pending)) = &mut self.confirms else {
            tracing::debug!(routing_key = %r.routing_key, "a message returned on a channel without confirms");
            return;
        };
        let slot = pending.values_mut().find(|u| {
            u.returned.is_none() && u.exchange == r.exchange && u.routing_key == r.routing_key
        });
        match slot {
            Some(u) => u.returned = Some(Box::new(r)),
            None => {
                tracing::debug!(routing_key = %r.routing_key, "a returned message matches no unconfirmed one")
            }
        }
    }
}

struct State {
    channels: HashMap<u16, Chan>,
    last_channel: u16,
    /// Why the connection ended, once it has.
    ended: Option<Error>,
}

struct Inner {
    out: mpsc::UnboundedSender<Vec<u8>>,
    state: Mutex<State>,
    connected: AtomicBool,
    frame_max: usize,
    channel_max: u16,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, bytes: Vec<u8>) -> Result<(), Error> {
        self.out
            .send(bytes)
            .map_err(|_| Error::Closed("the writer has stopped".into()))
    }

    fn method_bytes(channel: u16, m: &AMQPClass) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        frame::method(&mut out, channel, m);
        out
    }

    /// Send a synchronous method and wait for the broker's answer.
    async fn call(&self, channel: u16, m: AMQPClass) -> Result<AMQPClass, Error> {
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            if let Some(e) = &st.ended {
                return Err(e.clone());
            }
            let Some(chan) = st.channels.get_mut(&channel) else {
                return Err(Error::Closed(format!("channel {channel} is closed")));
            };
            // Queued and sent under the lock, so answers pair with waiters in order.
            chan.waiting.push_back(tx);
            self.send(Self::method_bytes(channel, &m))?;
        }
        rx.await
            .unwrap_or_else(|_| Err(Error::Closed("the connection ended".into())))
    }

    /// Send an asynchronous method (no answer) on an open channel.
    fn cast(&self, channel: u16, m: &AMQPClass) -> Result<(), Error> {
        let st = self.lock();
        if let Some(e) = &st.ended {
            return Err(e.clone());
        }
        if !st.channels.contains_key(&channel) {
            return Err(Error::Closed(format!("channel {channel} is closed")));
        }
        self.send(Self::method_bytes(channel, m))
    }

    /// End the connection with `err`: every waiter, consumer and confirm
    /// hears it once; the reader and writer stop.
    fn fail(&self, err: Error) {
        let channels = {
            let mut st = self.lock();
            if st.ended.is_some() {
                return;
            }
            st.ended = Some(err.clone());
            std::mem::take(&mut st.channels)
        };
        self.connected.store(false, Ordering::SeqCst);
        for (_, c) in channels {
            c.fail(&err);
        }
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            t.abort();
        }
    }

    /// What the reader does with one frame. An error ends the connection.
    fn dispatch(&self, f: Frame<'_>) -> Result<(), Error> {
        let mut st = self.lock();
        match f {
            Frame::Heartbeat => Ok(()),
            Frame::Method(0, AMQPClass::Connection(m)) => match m {
                connection::AMQPMethod::Close(c) => {
                    let _ = self.send(Self::method_bytes(
                        0,
                        &AMQPClass::Connection(connection::AMQPMethod::CloseOk(
                            connection::CloseOk {},
                        )),
                    ));
                    Err(Error::ConnectionClosed {
                        code: c.reply_code,
                        text: c.reply_text.to_string(),
                    })
                }
                connection::AMQPMethod::CloseOk(_) => {
                    if let Some(w) = st.channels.get_mut(&0).and_then(|c| c.waiting.pop_front()) {
                        let _ = w.send(Ok(AMQPClass::Connection(connection::AMQPMethod::CloseOk(
                            connection::CloseOk {},
                        ))));
                    }
                    Err(Error::Closed("closed by this process".into()))
                }
                connection::AMQPMethod::Blocked(b) => {
                    tracing::warn!(reason = %b.reason, "the broker blocks publishing on this connection (resource alarm)");
                    Ok(())
                }
                connection::AMQPMethod::Unblocked(_) => {
                    tracing::info!("the broker unblocked publishing on this connection");
                    Ok(())
                }
                other => Err(Error::Protocol(format!(
                    "unexpected connection method {other:?}"
                ))),
            },
            Frame::Method(0, other) => Err(Error::Protocol(format!(
                "a non-connection method on channel 0: {other:?}"
            ))),
            Frame::Method(id, m) => {
                let Some(chan) = st.channels.get_mut(&id) else {
                    // A channel this side closed: frames in flight are dropped.
                    return Ok(());
                };
                if chan.assembly.in_progress() {
                    return Err(Error::Protocol(format!(
                        "channel {id}: a method frame in the middle of a message"
                    )));
                }
                match m {
                    AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) => chan
                        .assembly
                        .begin(Start::Deliver(d))
                        .map_err(|e| Error::Protocol(e.to_string())),
                    AMQPClass::Basic(basic::AMQPMethod::Return(r)) => chan
                        .assembly
                        .begin(Start::Return(r))
                        .map_err(|e| Error::Protocol(e.to_string())),
                    AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => {
                        chan.confirm(a.delivery_tag, a.multiple, true);
                        Ok(())
                    }
                    AMQPClass::Basic(basic::AMQPMethod::Nack(n)) => {
                        chan.confirm(n.delivery_tag, n.multiple, false);
                        Ok(())
                    }
                    AMQPClass::Basic(basic::AMQPMethod::Cancel(c)) => {
                        // The broker cancels a consumer (its queue was deleted):
                        // the consumer's stream ends.
                        tracing::warn!(channel = id, consumer_tag = %c.consumer_tag, "the broker cancelled a consumer");
                        chan.consumers.remove(c.consumer_tag.as_str());
                        if !c.nowait {
                            let _ = self.send(Self::method_bytes(
                                id,
                                &AMQPClass::Basic(basic::AMQPMethod::CancelOk(basic::CancelOk {
                                    consumer_tag: c.consumer_tag,
                                })),
                            ));
                        }
                        Ok(())
                    }
                    AMQPClass::Channel(channel::AMQPMethod::Close(c)) => {
                        let _ = self.send(Self::method_bytes(
                            id,
                            &AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
                        ));
                        let err = Error::ChannelClosed {
                            code: c.reply_code,
                            text: c.reply_text.to_string(),
                        };
                        tracing::debug!(channel = id, error = %err, "the broker closed a channel");
                        if let Some(chan) = st.channels.remove(&id) {
                            chan.fail(&err);
                        }
                        Ok(())
                    }
                    AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)) => {
                        if let Some(mut chan) = st.channels.remove(&id) {
                            // The close was the last thing asked; anything
                            // asked before it will not be answered now.
                            if let Some(w) = chan.waiting.pop_back() {
                                let _ = w.send(Ok(AMQPClass::Channel(
                                    channel::AMQPMethod::CloseOk(channel::CloseOk {}),
                                )));
                            }
                            chan.fail(&Error::Closed(format!("channel {id} closed")));
                        }
                        Ok(())
                    }
                    AMQPClass::Channel(channel::AMQPMethod::Flow(f)) => {
                        let _ = self.send(Self::method_bytes(
                            id,
                            &AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk {
                                active: f.active,
                            })),
                        ));
                        Ok(())
                    }
                    answer => match chan.waiting.pop_front() {
                        Some(w) => {
                            let _ = w.send(Ok(answer));
                            Ok(())
                        }
                        None => Err(Error::Protocol(format!(
                            "channel {id}: an answer nobody asked for: {answer:?}"
                        ))),
                    },
                }
            }
            Frame::Header(id, h) => {
                let Some(chan) = st.channels.get_mut(&id) else {
                    return Ok(());
                };
                match chan.assembly.header(h) {
                    Ok(Some(c)) => Self::complete(chan, c),
                    Ok(None) => Ok(()),
                    Err(e) => Err(Error::Protocol(format!("channel {id}: {e}"))),
                }
            }
            Frame::Body(id, b) => {
                let Some(chan) = st.channels.get_mut(&id) else {
                    return Ok(());
                };
                match chan.assembly.body(b) {
                    Ok(Some(c)) => Self::complete(chan, c),
                    Ok(None) => Ok(()),
                    Err(e) => Err(Error::Protocol(format!("channel {id}: {e}"))),
                }
            }
        }
    }

    fn complete(chan: &mut Chan, c: Content) -> Result<(), Error> {
        match c.start {
            Start::Deliver(d) => {
                let delivery = Delivery {
                    delivery_tag: d.delivery_tag,
                    redelivered: d.redelivered,
                    exchange: d.exchange,
                    routing_key: d.routing_key,
                    properties: c.properties,
                    data: c.body,
                };
                match chan.consumers.get(d.consumer_tag.as_str()) {
                    Some(tx) => {
                        // A consumer dropped meanwhile leaves the message
                        // unacknowledged: the broker hands it out again
                        // when the channel closes.
                        let _ = tx.send(Ok(delivery));
                    }
                    None => {
                        tracing::debug!(consumer_tag = %d.consumer_tag, "a delivery for a consumer that is gone")
                    }
                }
            }
            Start::Return(r) => chan.returned(Returned {
                reply_code: r.reply_code,
                reply_text: r.reply_text,
                exchange: r.exchange,
                routing_key: r.routing_key,
                properties: c.properties,
                data: c.body,
            }),
        }
        Ok(())
    }
}

/// How long [`Connection::close`] waits for the broker's answer.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// An open AMQP connection. Dropping it ends it (its tasks stop, the
/// socket closes); [`Connection::close`] ends it politely.
pub struct Connection {
    inner: Arc<Inner>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.inner
            .fail(Error::Closed("the connection was dropped".into()));
    }
}

/// A channel on a [`Connection`]; clones are the same channel.
#[derive(Clone)]
pub struct Channel {
    id: u16,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Channel({})", self.id)
    }
}

/// The client properties this side announces (kombu's set of capabilities).
fn client_properties(name: &str) -> FieldTable {
    let mut caps = FieldTable::default();
    for c in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
    ] {
        caps.insert(c.into(), AMQPValue::Boolean(true));
    }
    let mut t = FieldTable::default();
    t.insert(
        "product".into(),
        AMQPValue::LongString(LongString::from("magnum-conductor")),
    );
    t.insert(
        "version".into(),
        AMQPValue::LongString(LongString::from(env!("CARGO_PKG_VERSION"))),
    );
    t.insert(
        "platform".into(),
        AMQPValue::LongString(LongString::from("rust")),
    );
    t.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    t.insert(
        "connection_name".into(),
        AMQPValue::LongString(LongString::from(name)),
    );
    t
}

/// The lower of two limits where 0 means none.
fn lower(ours: u64, theirs: u64) -> u64 {
    match (ours, theirs) {
        (0, t) => t,
        (o, 0) => o,
        (o, t) => o.min(t),
    }
}

/// What the client and the broker agree on in `connection.tune`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuned {
    pub channel_max: u16,
    pub frame_max: u32,
    pub heartbeat: u16,
}

/// Pure: the tune-ok for the broker's tune and our wishes. Heartbeats are
/// off only when we ask for 0 (kombu's `heartbeat=0`).
pub fn negotiate(t: &connection::Tune, frame_max: u32, heartbeat: u16) -> Tuned {
    Tuned {
        channel_max: lower(2047, u64::from(t.channel_max)) as u16,
        frame_max: lower(u64::from(frame_max), u64::from(t.frame_max)) as u32,
        heartbeat: if heartbeat == 0 {
            0
        } else {
            lower(u64::from(heartbeat), u64::from(t.heartbeat)) as u16
        },
    }
}

enum Stream {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The largest frame read before `connection.tune` (the spec's minimum
/// frame size is 4,096; the broker's `connection.start` is well under it):
/// a size beyond it is refused, not buffered until the connect timeout.
const HANDSHAKE_FRAME_MAX: usize = 131_072;

/// Read until one whole method frame is in `buf` (heartbeats skipped):
/// the handshake's reads.
async fn read_method(s: &mut Stream, buf: &mut BytesMut) -> Result<AMQPClass, Error> {
    loop {
        let parsed = match frame::parse(buf, HANDSHAKE_FRAME_MAX)
            .map_err(|e| Error::Protocol(e.to_string()))?
        {
            Some((Frame::Method(0, m), n)) => Some((Some(m), n)),
            Some((Frame::Heartbeat, n)) => Some((None, n)),
            Some((other, _)) => {
                return Err(Error::Protocol(format!(
                    "unexpected frame while connecting: {}",
                    other.kind()
                )));
            }
            None => None,
        };
        match parsed {
            Some((m, n)) => {
                buf.advance(n);
                if let Some(m) = m {
                    return Ok(m);
                }
            }
            None => {
                if s.read_buf(buf).await? == 0 {
                    return Err(Error::Closed(
                        "the broker closed the socket while connecting (a refused login \
                         without authentication_failure_close, or a listener that is not AMQP)"
                            .into(),
                    ));
                }
            }
        }
    }
}

async fn write_method(s: &mut Stream, m: AMQPClass) -> Result<(), Error> {
    s.write_all(&Inner::method_bytes(0, &m)).await?;
    s.flush().await?;
    Ok(())
}

fn refused(m: AMQPClass, step: &str) -> Error {
    match m {
        AMQPClass::Connection(connection::AMQPMethod::Close(c)) => Error::ConnectionClosed {
            code: c.reply_code,
            text: c.reply_text.to_string(),
        },
        other => Error::Protocol(format!("{step}: unexpected {other:?}")),
    }
}

/// The AMQP handshake (spec 2.2.4) on a fresh stream.
async fn handshake(s: &mut Stream, buf: &mut BytesMut, o: &ConnectOptions) -> Result<Tuned, Error> {
    s.write_all(frame::PROTOCOL_HEADER).await?;
    s.flush().await?;
    let start = match read_method(s, buf).await? {
        AMQPClass::Connection(connection::AMQPMethod::Start(st)) => st,
        other => return Err(refused(other, "connection.start")),
    };
    let mechanism = o.mechanism.to_string();
    let offered = String::from_utf8_lossy(start.mechanisms.as_bytes()).into_owned();
    if !offered.split_whitespace().any(|m| m == mechanism) {
        return Err(Error::Protocol(format!(
            "the broker offers the login mechanisms {offered:?}, not {mechanism}"
        )));
    }
    let creds = Credentials::new(
        LongString::from(o.username.as_str()),
        LongString::from(o.password.as_str()),
    );
    write_method(
        s,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: client_properties(&o.name),
            mechanism: ShortString::from(mechanism.as_str()),
            response: creds.sasl_auth_string(o.mechanism),
            locale: "en_US".into(),
        })),
    )
    .await?;
    let tune = loop {
        match read_method(s, buf).await? {
            AMQPClass::Connection(connection::AMQPMethod::Tune(t)) => break t,
            AMQPClass::Connection(connection::AMQPMethod::Secure(_))
                if o.mechanism == SASLMechanism::RabbitCrDemo =>
            {
                write_method(
                    s,
                    AMQPClass::Connection(connection::AMQPMethod::SecureOk(connection::SecureOk {
                        response: creds.rabbit_cr_demo_answer(),
                    })),
                )
                .await?
            }
            other => return Err(refused(other, "connection.tune")),
        }
    };
    let tuned = negotiate(&tune, o.frame_max, o.heartbeat);
    write_method(
        s,
        AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: tuned.channel_max,
            frame_max: tuned.frame_max,
            heartbeat: tuned.heartbeat,
        })),
    )
    .await?;
    write_method(
        s,
        AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: o.vhost.as_str().into(),
        })),
    )
    .await?;
    match read_method(s, buf).await? {
        AMQPClass::Connection(connection::AMQPMethod::OpenOk(_)) => Ok(tuned),
        other => Err(refused(other, "connection.open")),
    }
}

async fn open_stream(o: &ConnectOptions) -> Result<Stream, Error> {
    let tcp = TcpStream::connect((o.host.as_str(), o.port)).await?;
    let _ = tcp.set_nodelay(true);
    match &o.tls {
        None => Ok(Stream::Tcp(tcp)),
        Some(cfg) => {
            let name = rustls::pki_types::ServerName::try_from(o.host.clone())
                .map_err(|e| Error::Tls(format!("server name {}: {e}", o.host)))?;
            let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| Error::Tls(e.to_string()))?;
            Ok(Stream::Tls(Box::new(tls)))
        }
    }
}

impl Connection {
    /// Connect, log in and open the virtual host, within `o.timeout`.
    pub async fn connect(o: &ConnectOptions) -> Result<Connection, Error> {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let (stream, tuned) = tokio::time::timeout(o.timeout, async {
            let mut s = open_stream(o).await?;
            let tuned = handshake(&mut s, &mut buf, o).await?;
            Ok::<_, Error>((s, tuned))
        })
        .await
        .map_err(|_| Error::Timeout("connecting to the broker"))??;
        let (rd, wr) = tokio::io::split(stream);
        let (out, out_rx) = mpsc::unbounded_channel();
        let mut channels = HashMap::new();
        channels.insert(0, Chan::default());
        let inner = Arc::new(Inner {
            out,
            state: Mutex::new(State {
                channels,
                last_channel: 0,
                ended: None,
            }),
            connected: AtomicBool::new(true),
            frame_max: tuned.frame_max as usize,
            channel_max: tuned.channel_max.max(1),
            tasks: Mutex::default(),
        });
        let writer = tokio::spawn(write_loop(inner.clone(), wr, out_rx));
        let reader = tokio::spawn(read_loop(inner.clone(), rd, buf, tuned.heartbeat));
        inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([writer.abort_handle(), reader.abort_handle()]);
        Ok(Connection { inner })
    }

    /// Whether the connection is up (not failed, not closed).
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::SeqCst)
    }

    /// Open a channel.
    pub async fn create_channel(&self) -> Result<Channel, Error> {
        let id = {
            let mut st = self.inner.lock();
            if let Some(e) = &st.ended {
                return Err(e.clone());
            }
            let max = self.inner.channel_max;
            let mut id = st.last_channel;
            let mut found = None;
            for _ in 0..max {
                id = if id >= max { 1 } else { id + 1 };
                if !st.channels.contains_key(&id) {
                    found = Some(id);
                    break;
                }
            }
            let Some(id) = found else {
                return Err(Error::Protocol(format!("all {max} channels are in use")));
            };
            st.last_channel = id;
            st.channels.insert(id, Chan::default());
            id
        };
        let ch = Channel {
            id,
            inner: self.inner.clone(),
        };
        match ch
            .call(AMQPClass::Channel(channel::AMQPMethod::Open(
                channel::Open {},
            )))
            .await?
        {
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)) => Ok(ch),
            other => Err(Error::Protocol(format!(
                "channel.open: unexpected {other:?}"
            ))),
        }
    }

    /// Close the connection: `connection.close`, then the broker's
    /// `close-ok` (or its end, or [`CLOSE_WAIT`]), then the tasks stop.
    pub async fn close(&self, code: u16, text: &str) -> Result<(), Error> {
        let close = self.inner.call(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
                reply_code: code,
                reply_text: text.into(),
                class_id: 0,
                method_id: 0,
            })),
        );
        let res = tokio::time::timeout(CLOSE_WAIT, close)
            .await
            .unwrap_or(Err(Error::Timeout("waiting for the broker's close-ok")));
        self.inner
            .fail(Error::Closed("closed by this process".into()));
        res.map(|_| ())
    }
}

impl Channel {
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Whether the channel is open (the broker has not closed it, nor the connection).
    pub fn is_connected(&self) -> bool {
        let st = self.inner.lock();
        st.ended.is_none() && st.channels.contains_key(&self.id)
    }

    async fn call(&self, m: AMQPClass) -> Result<AMQPClass, Error> {
        self.inner.call(self.id, m).await
    }

    /// [`Channel::call`] for a method whose answer says nothing more than `ok`.
    async fn ask(&self, m: AMQPClass) -> Result<(), Error> {
        self.call(m).await.map(|_| ())
    }

    pub async fn close(&self, code: u16, text: &str) -> Result<(), Error> {
        self.ask(AMQPClass::Channel(channel::AMQPMethod::Close(
            channel::Close {
                reply_code: code,
                reply_text: text.into(),
                class_id: 0,
                method_id: 0,
            },
        )))
        .await
    }

    pub async fn basic_qos(&self, prefetch_count: u16) -> Result<(), Error> {
        self.ask(AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count,
            global: false,
        })))
        .await
    }

    /// Publisher confirms on this channel from now on.
    pub async fn confirm_select(&self) -> Result<(), Error> {
        self.ask(AMQPClass::Confirm(confirm::AMQPMethod::Select(
            confirm::Select { nowait: false },
        )))
        .await?;
        let mut st = self.inner.lock();
        if let Some(chan) = st.channels.get_mut(&self.id) {
            chan.confirms.get_or_insert_with(|| (1, BTreeMap::new()));
        }
        Ok(())
    }

    pub async fn exchange_declare(
        &self,
        exchange: &str,
        kind: ExchangeKind,
        o: ExchangeDeclareOptions,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.ask(AMQPClass::Exchange(exchange::AMQPMethod::Declare(
            exchange::Declare {
                exchange: exchange.into(),
                kind: kind.name().into(),
                passive: o.passive,
                durable: o.durable,
                auto_delete: o.auto_delete,
                internal: o.internal,
                nowait: false,
                arguments,
            },
        )))
        .await
    }

    pub async fn queue_declare(
        &self,
        queue: &str,
        o: QueueDeclareOptions,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.ask(AMQPClass::Queue(queue::AMQPMethod::Declare(
            queue::Declare {
                queue: queue.into(),
                passive: o.passive,
                durable: o.durable,
                exclusive: o.exclusive,
                auto_delete: o.auto_delete,
                nowait: false,
                arguments,
            },
        )))
        .await
    }

    pub async fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), Error> {
        self.ask(AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            nowait: false,
            arguments,
        })))
        .await
    }

    pub async fn queue_delete(&self, queue: &str, o: QueueDeleteOptions) -> Result<(), Error> {
        self.ask(AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
            queue: queue.into(),
            if_unused: o.if_unused,
            if_empty: o.if_empty,
            nowait: false,
        })))
        .await
    }

    /// Start a consumer; its deliveries come through the returned stream.
    pub async fn basic_consume(
        &self,
        queue: &str,
        consumer_tag: &str,
        o: BasicConsumeOptions,
        arguments: FieldTable,
    ) -> Result<Consumer, Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        {
            // Registered before the broker can deliver (right after consume-ok).
            let mut st = self.inner.lock();
            let Some(chan) = st.channels.get_mut(&self.id) else {
                return Err(Error::Closed(format!("channel {} is closed", self.id)));
            };
            chan.consumers.insert(consumer_tag.to_string(), tx);
        }
        let res = self
            .call(AMQPClass::Basic(basic::AMQPMethod::Consume(
                basic::Consume {
                    queue: queue.into(),
                    consumer_tag: consumer_tag.into(),
                    no_local: o.no_local,
                    no_ack: o.no_ack,
                    exclusive: o.exclusive,
                    nowait: false,
                    arguments,
                },
            )))
            .await;
        match res {
            Ok(_) => Ok(Consumer { rx }),
            Err(e) => {
                if let Some(chan) = self.inner.lock().channels.get_mut(&self.id) {
                    chan.consumers.remove(consumer_tag);
                }
                Err(e)
            }
        }
    }

    pub async fn basic_cancel(&self, consumer_tag: &str) -> Result<(), Error> {
        self.ask(AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
            consumer_tag: consumer_tag.into(),
            nowait: false,
        })))
        .await?;
        if let Some(chan) = self.inner.lock().channels.get_mut(&self.id) {
            chan.consumers.remove(consumer_tag);
        }
        Ok(())
    }

    /// Acknowledge one delivery (handed to the writer; no answer comes).
    pub fn basic_ack(&self, delivery_tag: u64) -> Result<(), Error> {
        self.inner.cast(
            self.id,
            &AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag,
                multiple: false,
            })),
        )
    }

    /// Reject one delivery, back to the queue or not.
    pub fn basic_reject(&self, delivery_tag: u64, requeue: bool) -> Result<(), Error> {
        self.inner.cast(
            self.id,
            &AMQPClass::Basic(basic::AMQPMethod::Reject(basic::Reject {
                delivery_tag,
                requeue,
            })),
        )
    }

    /// Publish a message; in confirm mode the returned future resolves
    /// with the broker's confirmation.
    pub fn basic_publish(
        &self,
        exchange: &str,
        routing_key: &str,
        o: BasicPublishOptions,
        payload: &[u8],
        properties: BasicProperties,
    ) -> Result<PublisherConfirm, Error> {
        let mut bytes = Vec::new();
        frame::publish(
            &mut bytes,
            self.id,
            basic::Publish {
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                mandatory: o.mandatory,
                immediate: false,
            },
            &properties,
            payload,
            self.inner.frame_max,
        );
        let mut st = self.inner.lock();
        if let Some(e) = &st.ended {
            return Err(e.clone());
        }
        let Some(chan) = st.channels.get_mut(&self.id) else {
            return Err(Error::Closed(format!("channel {} is closed", self.id)));
        };
        let confirm = match &mut chan.confirms {
            None => PublisherConfirm(None),
            Some((next, pending)) => {
                let (tx, rx) = oneshot::channel();
                pending.insert(
                    *next,
                    Unconfirmed {
                        tx,
                        exchange: exchange.into(),
                        routing_key: routing_key.into(),
                        returned: None,
                    },
                );
                *next += 1;
                PublisherConfirm(Some(rx))
            }
        };
        self.inner.send(bytes)?;
        Ok(confirm)
    }
}

/// Write what callers hand over, in order, several at a time.
async fn write_loop(
    inner: Arc<Inner>,
    mut wr: tokio::io::WriteHalf<Stream>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut batch = Vec::with_capacity(64);
    let mut joined = Vec::new();
    loop {
        if rx.recv_many(&mut batch, 64).await == 0 {
            return;
        }
        let res = if batch.len() == 1 {
            wr.write_all(&batch[0]).await
        } else {
            joined.clear();
            for b in &batch {
                joined.extend_from_slice(b);
            }
            wr.write_all(&joined).await
        };
        batch.clear();
        let res = match res {
            Ok(()) => wr.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            tracing::debug!(error = %e, "writing to the broker failed");
            inner.fail(e.into());
            return;
        }
    }
}

/// Read frames and dispatch them; send heartbeats and watch the broker's.
async fn read_loop(
    inner: Arc<Inner>,
    mut rd: tokio::io::ReadHalf<Stream>,
    mut buf: BytesMut,
    heartbeat: u16,
) {
    let every = Duration::from_secs(u64::from(heartbeat.max(1))) / 2;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_read = tokio::time::Instant::now();
    let err = loop {
        // Whole frames first (the handshake may have read past its end).
        let mut used = 0;
        let mut failed = None;
        loop {
            match frame::parse(&buf[used..], inner.frame_max) {
                Ok(Some((f, n))) => {
                    used += n;
                    if let Err(e) = inner.dispatch(f) {
                        failed = Some(e);
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    failed = Some(Error::Protocol(e.to_string()));
                    break;
                }
            }
        }
        buf.advance(used);
        if let Some(e) = failed {
            break e;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) => break Error::Closed("the broker closed the socket".into()),
                Ok(_) => last_read = tokio::time::Instant::now(),
                Err(e) => break e.into(),
            },
            _ = ticker.tick(), if heartbeat > 0 => {
                let silent = last_read.elapsed();
                if silent > Duration::from_secs(u64::from(heartbeat) * 2) {
                    break Error::MissedHeartbeats(silent.as_secs());
                }
                let mut hb = Vec::with_capacity(8);
                frame::heartbeat(&mut hb);
                if inner.send(hb).is_err() {
                    break Error::Closed("the writer has stopped".into());
                }
            }
        }
    };
    match &err {
        Error::Closed(_) => tracing::debug!(error = %err, "AMQP connection ended"),
        _ => tracing::warn!(error = %err, "AMQP connection lost"),
    }
    inner.fail(err);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_takes_the_lower_limits() {
        let t = |channel_max, frame_max, heartbeat| connection::Tune {
            channel_max,
            frame_max,
            heartbeat,
        };
        assert_eq!(
            negotiate(&t(2047, 131_072, 60), 131_072, 60),
            Tuned {
                channel_max: 2047,
                frame_max: 131_072,
                heartbeat: 60
            }
        );
        let n = negotiate(&t(0, 0, 0), 131_072, 60);
        assert_eq!(
            (n.channel_max, n.frame_max, n.heartbeat),
            (2047, 131_072, 60)
        );
        let n = negotiate(&t(16, 4096, 10), 131_072, 60);
        assert_eq!((n.channel_max, n.frame_max, n.heartbeat), (16, 4096, 10));
        assert_eq!(negotiate(&t(16, 4096, 10), 131_072, 0).heartbeat, 0);
    }

    #[test]
    fn a_message_s_debug_leaves_its_body_out() {
        let d = Delivery {
            delivery_tag: 7,
            redelivered: false,
            exchange: "magnum".into(),
            routing_key: "magnum-conductor".into(),
            properties: BasicProperties::default(),
            data: br#"{"_context_auth_token": "gAAAAAsecret"}"#.to_vec(),
        };
        let shown = format!("{d:?}");
        assert!(
            !shown.contains("gAAAAAsecret") && shown.contains("bytes: 39"),
            "{shown}"
        );
        let mut r = returned("q");
        r.data = b"gAAAAAsecret".to_vec();
        assert!(!format!("{r:?}").contains("gAAAAAsecret"));
    }

    #[test]
    fn options_debug_leaves_the_password_out() {
        let o = ConnectOptions {
            host: "h".into(),
            port: 5672,
            vhost: "/".into(),
            username: "u".into(),
            password: "s3cr3t-pw".into(),
            mechanism: SASLMechanism::Plain,
            heartbeat: 60,
            frame_max: 131_072,
            timeout: Duration::from_secs(1),
            tls: None,
            name: "n".into(),
        };
        let d = format!("{o:?}");
        assert!(!d.contains("s3cr3t-pw") && d.contains("\"u\""), "{d}");
    }

    fn chan_with_confirms() -> (Chan, Vec<oneshot::Receiver<Result<Confirmation, Error>>>) {
        let mut c = Chan {
            confirms: Some((1, BTreeMap::new())),
            ..Default::default()
        };
        let mut rxs = Vec::new();
        for (seq, key) in [(1, "a"), (2, "b"), (3, "b")] {
            let (tx, rx) = oneshot::channel();
            if let Some((_, p)) = &mut c.confirms {
                p.insert(
                    seq,
                    Unconfirmed {
                        tx,
                        exchange: "".into(),
                        routing_key: key.into(),
                        returned: None,
                    },
                );
            }
            rxs.push(rx);
        }
        (c, rxs)
    }

    fn returned(key: &str) -> Returned {
        Returned {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "".into(),
            routing_key: key.into(),
            properties: BasicProperties::default(),
            data: Vec::new(),
        }
    }

    #[test]
    fn a_return_goes_with_the_earliest_unconfirmed_message_to_its_queue() {
        let (mut c, mut rxs) = chan_with_confirms();
        c.returned(returned("b"));
        // One ack for all three (multiple): only the second was returned.
        c.confirm(3, true, true);
        let got: Vec<String> = rxs
            .iter_mut()
            .map(|rx| match rx.try_recv() {
                Ok(Ok(Confirmation::Ack(None))) => "ack".into(),
                Ok(Ok(Confirmation::Ack(Some(r)))) => format!("returned {}", r.routing_key),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(got, ["ack", "returned b", "ack"]);
    }

    #[test]
    fn nacks_and_single_acks_settle_only_their_message() {
        let (mut c, mut rxs) = chan_with_confirms();
        c.confirm(2, false, false);
        assert!(rxs[0].try_recv().is_err(), "1 still waits");
        assert!(matches!(
            rxs[1].try_recv(),
            Ok(Ok(Confirmation::Nack(None)))
        ));
        // A failed channel fails what still waits, with the reason.
        c.fail(&Error::ChannelClosed {
            code: 406,
            text: "PRECONDITION_FAILED".into(),
        });
        assert!(matches!(
            rxs[0].try_recv(),
            Ok(Err(Error::ChannelClosed { code: 406, .. }))
        ));
        assert!(matches!(rxs[2].try_recv(), Ok(Err(_))));
    }
}

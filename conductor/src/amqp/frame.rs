//! AMQP 0-9-1 frames and messages, without I/O: a frame read from the
//! front of a buffer, frames written into one, and a message's content
//! (method, header, body frames) put back together per channel.
//!
//! The methods' and properties' own encodings are amq-protocol's (the
//! crate lapin is built on); the framing around them is the spec's
//! section 4.2.3: type (1 byte), channel (2), payload size (4), payload,
//! `0xCE`.

use amq_protocol::frame::parsing::parse_content_header;
use amq_protocol::frame::{AMQPContentHeader, WriteContext};
use amq_protocol::protocol::{AMQPClass, BasicProperties, basic, gen_class, parse_class};

pub const METHOD: u8 = 1;
pub const HEADER: u8 = 2;
pub const BODY: u8 = 3;
pub const HEARTBEAT: u8 = 8;
pub const END: u8 = 0xCE;
/// Type, channel and size before the payload, the end marker after it.
pub const OVERHEAD: usize = 8;
/// The protocol header a client opens with (spec 4.2.2).
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
/// The class id of `basic`, the only class with content.
const BASIC: u16 = 60;

/// One frame read from a buffer; a body borrows the buffer. Its `Debug`
/// gives a body's size, not its bytes (requests carry tokens).
pub enum Frame<'a> {
    Method(u16, AMQPClass),
    Header(u16, AMQPContentHeader),
    Body(u16, &'a [u8]),
    Heartbeat,
}

impl Frame<'_> {
    /// What kind of frame, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Method(..) => "method",
            Frame::Header(..) => "content header",
            Frame::Body(..) => "content body",
            Frame::Heartbeat => "heartbeat",
        }
    }
}

impl std::fmt::Debug for Frame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Frame::Method(ch, m) => write!(f, "Method({ch}, {m:?})"),
            Frame::Header(ch, h) => write!(f, "Header({ch}, {} bytes)", h.body_size),
            Frame::Body(ch, b) => write!(f, "Body({ch}, {} bytes)", b.len()),
            Frame::Heartbeat => write!(f, "Heartbeat"),
        }
    }
}

/// Why the bytes from the broker are not AMQP 0-9-1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the broker refused protocol AMQP 0-9-1 (it offered {0:?})")]
    ProtocolRefused(Vec<u8>),
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("a frame of {size} bytes is over the negotiated frame_max {max}")]
    TooLarge { size: usize, max: usize },
    #[error("a frame does not end with 0xCE")]
    NoEnd,
    #[error("cannot parse a {what} frame on channel {channel}")]
    Unparsable { what: &'static str, channel: u16 },
    #[error("a heartbeat frame on channel {0}")]
    HeartbeatOnChannel(u16),
}

/// Read the frame at the front of `buf`: `None` while it is incomplete,
/// else the frame and how many bytes it took. `frame_max` (0: no limit)
/// bounds a frame's size, overhead included, as the broker's does.
pub fn parse(buf: &[u8], frame_max: usize) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() >= 4 && &buf[..4] == b"AMQP" {
        // The broker answers a protocol header it does not speak with its own.
        return Err(FrameError::ProtocolRefused(
            buf[..buf.len().min(8)].to_vec(),
        ));
    }
    if buf.len() < 7 {
        return Ok(None);
    }
    let kind = buf[0];
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    if frame_max > 0 && size.saturating_add(OVERHEAD) > frame_max {
        return Err(FrameError::TooLarge {
            size: size.saturating_add(OVERHEAD),
            max: frame_max,
        });
    }
    let total = size + OVERHEAD;
    if buf.len() < total {
        return Ok(None);
    }
    if buf[total - 1] != END {
        return Err(FrameError::NoEnd);
    }
    let payload = &buf[7..7 + size];
    let frame = match kind {
        METHOD => match parse_hot(payload) {
            Some(m) => Frame::Method(channel, m),
            None => match parse_class(payload) {
                Ok(([], m)) => Frame::Method(channel, m),
                _ => {
                    return Err(FrameError::Unparsable {
                        what: "method",
                        channel,
                    });
                }
            },
        },
        HEADER => match parse_content_header(payload) {
            Ok(([], h)) => Frame::Header(channel, h),
            _ => {
                return Err(FrameError::Unparsable {
                    what: "content header",
                    channel,
                });
            }
        },
        BODY => Frame::Body(channel, payload),
        HEARTBEAT if channel == 0 => Frame::Heartbeat,
        HEARTBEAT => return Err(FrameError::HeartbeatOnChannel(channel)),
        other => return Err(FrameError::UnknownType(other)),
    };
    Ok(Some((frame, total)))
}

/// Start a frame of `kind` on `channel` in `out`; returns where its size goes.
fn open(out: &mut Vec<u8>, kind: u8, channel: u16) -> usize {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Finish the frame [`open`] started: its size and end marker.
fn close(out: &mut Vec<u8>, at: usize) {
    let size = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&size.to_be_bytes());
    out.push(END);
}

/// Run one of amq-protocol's serializers, appending to `out`. They only
/// fail on a writer that runs out of room, which a `Vec` does not.
fn generate<F>(out: &mut Vec<u8>, f: F)
where
    F: Fn(WriteContext<Vec<u8>>) -> Result<WriteContext<Vec<u8>>, amq_protocol::frame::GenError>,
{
    let buf = std::mem::take(out);
    let len = buf.len();
    let ctx = WriteContext {
        write: buf,
        position: len as u64,
    };
    match f(ctx) {
        Ok(ctx) => *out = ctx.write,
        Err(e) => {
            // Unreachable with a Vec; leave `out` empty rather than half a frame.
            tracing::error!(error = %e, "cannot serialize an AMQP frame");
        }
    }
}

/// Append a method frame.
pub fn method(out: &mut Vec<u8>, channel: u16, class: &AMQPClass) {
    let at = open(out, METHOD, channel);
    if !write_hot(out, class) {
        generate(out, |ctx| gen_class(class)(ctx));
    }
    close(out, at);
}

/// The methods of every message, read and written here rather than through
/// amq-protocol's generic parser and serializers (~1,700 instructions a
/// method frame read, ~1,000 written; docs/benchmarks.md): `basic.deliver`
/// and `basic.ack` in, `basic.publish` and `basic.ack` out. Each gives what
/// amq-protocol gives (tested against it); anything else goes its way.
const DELIVER: u16 = 60;
const PUBLISH: u16 = 40;
const ACK: u16 = 80;

/// A method's fields, read in order.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_be_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }

    /// One octet of bits, the first of which is wanted.
    fn bit(&mut self) -> Option<bool> {
        self.take::<1>().map(|[b]| b & 1 != 0)
    }

    fn short_string(&mut self) -> Option<amq_protocol::types::ShortString> {
        let [len] = self.take()?;
        let (s, rest) = self.0.split_at_checked(usize::from(len))?;
        self.0 = rest;
        Some(std::str::from_utf8(s).ok()?.to_string().into())
    }
}

/// `basic.deliver` or `basic.ack` read whole; `None` for anything else.
fn parse_hot(payload: &[u8]) -> Option<AMQPClass> {
    let mut f = Fields(payload);
    if f.u16()? != BASIC {
        return None;
    }
    let method = match f.u16()? {
        DELIVER => basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag: f.short_string()?,
            delivery_tag: f.u64()?,
            redelivered: f.bit()?,
            exchange: f.short_string()?,
            routing_key: f.short_string()?,
        }),
        ACK => basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: f.u64()?,
            multiple: f.bit()?,
        }),
        _ => return None,
    };
    f.0.is_empty().then_some(AMQPClass::Basic(method))
}

/// Write `basic.publish` or `basic.ack`'s payload; false for anything else
/// (a `ShortString` is never over 255 bytes: amq-protocol refuses to make
/// one; were it, the generic serializer would have it, nothing written here).
fn write_hot(out: &mut Vec<u8>, class: &AMQPClass) -> bool {
    let short = |out: &mut Vec<u8>, s: &str| match u8::try_from(s.len()) {
        Ok(len) => {
            out.push(len);
            out.extend_from_slice(s.as_bytes());
            true
        }
        Err(_) => false,
    };
    let start = out.len();
    let done = match class {
        AMQPClass::Basic(basic::AMQPMethod::Publish(p)) => {
            out.extend_from_slice(&BASIC.to_be_bytes());
            out.extend_from_slice(&PUBLISH.to_be_bytes());
            out.extend_from_slice(&0u16.to_be_bytes());
            let ok = short(out, p.exchange.as_str()) && short(out, p.routing_key.as_str());
            out.push(u8::from(p.mandatory) | (u8::from(p.immediate) << 1));
            ok
        }
        AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => {
            out.extend_from_slice(&BASIC.to_be_bytes());
            out.extend_from_slice(&ACK.to_be_bytes());
            out.extend_from_slice(&a.delivery_tag.to_be_bytes());
            out.push(u8::from(a.multiple));
            true
        }
        _ => false,
    };
    if !done {
        out.truncate(start);
    }
    done
}

/// Append a heartbeat frame.
pub fn heartbeat(out: &mut Vec<u8>) {
    out.extend_from_slice(&[HEARTBEAT, 0, 0, 0, 0, 0, 0, END]);
}

/// Append a whole message: `basic.publish`, its content header and its
/// body in frames of at most `frame_max` bytes (0: one frame).
pub fn publish(
    out: &mut Vec<u8>,
    channel: u16,
    publish: basic::Publish,
    properties: &BasicProperties,
    body: &[u8],
    frame_max: usize,
) {
    out.reserve(body.len() + 256);
    method(
        out,
        channel,
        &AMQPClass::Basic(basic::AMQPMethod::Publish(publish)),
    );
    let at = open(out, HEADER, channel);
    out.extend_from_slice(&BASIC.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    generate(out, |ctx| basic::gen_properties(properties)(ctx));
    close(out, at);
    let chunk = if frame_max > OVERHEAD {
        frame_max - OVERHEAD
    } else {
        body.len().max(1)
    };
    for part in body.chunks(chunk) {
        let at = open(out, BODY, channel);
        out.extend_from_slice(part);
        close(out, at);
    }
}

/// What a message's content arrives after.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    Deliver(basic::Deliver),
    Return(basic::Return),
}

/// A message put back together (its `Debug` without the body).
#[derive(Clone, PartialEq)]
pub struct Content {
    pub start: Start,
    pub properties: BasicProperties,
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Content")
            .field("start", &self.start)
            .field("bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// Why a channel's content frames do not make a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    #[error("a content header with no basic.deliver or basic.return before it")]
    UnexpectedHeader,
    #[error("a content body with no content header before it")]
    UnexpectedBody,
    #[error("a method frame in the middle of a message's content")]
    Interrupted,
    #[error("a content body longer than its header said ({got} > {expected})")]
    TooLong { got: u64, expected: u64 },
}

/// One channel's message in the making (spec 4.2.6: a method, a header,
/// then body frames until the header's size, nothing else between).
#[derive(Default)]
pub struct Assembly {
    start: Option<Start>,
    header: Option<(BasicProperties, u64)>,
    body: Vec<u8>,
}

impl Assembly {
    /// Whether a message is half received (a method frame now is an error).
    pub fn in_progress(&self) -> bool {
        self.start.is_some()
    }

    /// A `basic.deliver` or `basic.return` arrived.
    pub fn begin(&mut self, start: Start) -> Result<(), ContentError> {
        if self.in_progress() {
            return Err(ContentError::Interrupted);
        }
        self.start = Some(start);
        Ok(())
    }

    /// The content header arrived: the message is complete if its body is empty.
    pub fn header(&mut self, header: AMQPContentHeader) -> Result<Option<Content>, ContentError> {
        if self.start.is_none() || self.header.is_some() {
            return Err(ContentError::UnexpectedHeader);
        }
        // A bounded reservation: the header's size is the broker's word.
        self.body = Vec::with_capacity(header.body_size.min(1 << 20) as usize);
        self.header = Some((header.properties, header.body_size));
        Ok(self.complete())
    }

    /// A body frame arrived: the message is complete at the header's size.
    pub fn body(&mut self, part: &[u8]) -> Result<Option<Content>, ContentError> {
        let Some((_, expected)) = &self.header else {
            return Err(ContentError::UnexpectedBody);
        };
        let got = (self.body.len() + part.len()) as u64;
        if got > *expected {
            return Err(ContentError::TooLong {
                got,
                expected: *expected,
            });
        }
        self.body.extend_from_slice(part);
        Ok(self.complete())
    }

    fn complete(&mut self) -> Option<Content> {
        let done = matches!(&self.header, Some((_, size)) if self.body.len() as u64 == *size);
        if !done {
            return None;
        }
        let start = self.start.take()?;
        let (properties, _) = self.header.take()?;
        Some(Content {
            start,
            properties,
            body: std::mem::take(&mut self.body),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::channel;
    use amq_protocol::types::{AMQPValue, FieldTable, LongString};

    /// A method's payload as amq-protocol writes it.
    fn generic(class: &AMQPClass) -> Vec<u8> {
        let mut out = Vec::new();
        generate(&mut out, |ctx| gen_class(class)(ctx));
        out
    }

    #[test]
    fn the_hot_methods_read_and_write_as_amq_protocol_does() {
        let names = ["", "1", "amq.ctag-x\u{e9}", &"r".repeat(255)];
        let mut classes = Vec::new();
        for (i, name) in names.iter().enumerate() {
            for flag in [false, true] {
                let tag = [0, 1, u64::MAX][i % 3];
                classes.push(AMQPClass::Basic(basic::AMQPMethod::Deliver(
                    basic::Deliver {
                        consumer_tag: (*name).into(),
                        delivery_tag: tag,
                        redelivered: flag,
                        exchange: "magnum".into(),
                        routing_key: (*name).into(),
                    },
                )));
                classes.push(AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                    delivery_tag: tag,
                    multiple: flag,
                })));
                classes.push(AMQPClass::Basic(basic::AMQPMethod::Publish(
                    basic::Publish {
                        exchange: (*name).into(),
                        routing_key: "reply_x".into(),
                        mandatory: flag,
                        immediate: !flag,
                    },
                )));
            }
        }
        for class in &classes {
            let want = generic(class);
            let mut mine = Vec::new();
            if let AMQPClass::Basic(basic::AMQPMethod::Deliver(_)) = class {
                // Only read here (the broker writes it).
                assert!(!write_hot(&mut mine, class) && mine.is_empty());
            } else {
                assert!(write_hot(&mut mine, class), "{class:?}");
                assert_eq!(mine, want, "{class:?}");
            }
            let parsed = parse_class(&want[..]).map(|(rest, m)| (rest.len(), m));
            let hot = parse_hot(&want);
            match class {
                AMQPClass::Basic(basic::AMQPMethod::Publish(_)) => assert!(hot.is_none()),
                _ => assert_eq!(
                    hot.as_ref(),
                    parsed.as_ref().ok().map(|(_, m)| m),
                    "{class:?}"
                ),
            }
            // Cut short, or followed by a byte: neither reads it (the frame
            // is then amq-protocol's to refuse).
            for cut in 0..want.len() {
                assert!(parse_hot(&want[..cut]).is_none());
            }
            assert!(parse_hot(&[&want[..], &[0]].concat()).is_none());
        }
        // Bits beyond the first are ignored, as amq-protocol's flags do.
        let mut ack = generic(&classes[1]);
        *ack.last_mut().unwrap() |= 0xfe;
        assert_eq!(parse_hot(&ack), parse_class(&ack[..]).ok().map(|(_, m)| m));
        // Not UTF-8: not read here; amq-protocol refuses it too.
        let mut bad = generic(&classes[6]);
        bad[5] = 0xff;
        assert!(parse_hot(&bad).is_none());
    }

    fn deliver(tag: u64) -> basic::Deliver {
        basic::Deliver {
            consumer_tag: "1".into(),
            delivery_tag: tag,
            redelivered: false,
            exchange: "magnum".into(),
            routing_key: "magnum-conductor".into(),
        }
    }

    #[test]
    fn a_published_message_reads_back_frame_by_frame() {
        let mut headers = FieldTable::default();
        headers.insert(
            "compression".into(),
            AMQPValue::LongString(LongString::from("x")),
        );
        let props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_headers(headers);
        let body: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        let p = basic::Publish {
            exchange: "".into(),
            routing_key: "reply_1".into(),
            mandatory: true,
            immediate: false,
        };
        // frame_max 108: bodies of 100 bytes, so three body frames.
        publish(&mut out, 7, p.clone(), &props, &body, 108);
        let mut at = 0;
        let mut frames = Vec::new();
        while at < out.len() {
            let (f, n) = parse(&out[at..], 108).unwrap().expect("whole frames");
            frames.push(match f {
                Frame::Method(ch, m) => format!("method {ch} {m:?}"),
                Frame::Header(ch, h) => {
                    assert_eq!(h.properties, props);
                    format!("header {ch} {}", h.body_size)
                }
                Frame::Body(ch, b) => format!("body {ch} {}", b.len()),
                Frame::Heartbeat => "heartbeat".into(),
            });
            at += n;
        }
        assert_eq!(frames.len(), 5, "{frames:?}");
        assert!(frames[0].starts_with("method 7 Basic(Publish"));
        assert!(frames[0].contains("reply_1") && frames[0].contains("mandatory: true"));
        assert_eq!(
            &frames[1..],
            ["header 7 300", "body 7 100", "body 7 100", "body 7 100"]
        );
        // No frame_max: one body frame.
        let mut one = Vec::new();
        publish(&mut one, 7, p, &props, &body, 0);
        assert!(one.len() < out.len());
    }

    #[test]
    fn partial_and_bad_frames() {
        let mut out = Vec::new();
        method(
            &mut out,
            1,
            &AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})),
        );
        for cut in 0..out.len() {
            assert!(parse(&out[..cut], 0).unwrap().is_none(), "cut at {cut}");
        }
        let (f, n) = parse(&out, 0).unwrap().unwrap();
        assert_eq!(n, out.len());
        assert!(matches!(f, Frame::Method(1, AMQPClass::Channel(_))));
        let mut bad = out.clone();
        *bad.last_mut().unwrap() = 0;
        assert_eq!(parse(&bad, 0).unwrap_err(), FrameError::NoEnd);
        assert!(matches!(
            parse(&out, 8).unwrap_err(),
            FrameError::TooLarge { max: 8, .. }
        ));
        assert_eq!(
            parse(&[9, 0, 0, 0, 0, 0, 0, END], 0).unwrap_err(),
            FrameError::UnknownType(9)
        );
        assert!(matches!(
            parse(&[METHOD, 0, 1, 0, 0, 0, 1, 0xff, END], 0).unwrap_err(),
            FrameError::Unparsable {
                what: "method",
                channel: 1
            }
        ));
        assert!(matches!(
            parse(b"AMQP\x00\x00\x09\x00", 0).unwrap_err(),
            FrameError::ProtocolRefused(_)
        ));
        let mut hb = Vec::new();
        heartbeat(&mut hb);
        assert!(matches!(
            parse(&hb, 0).unwrap(),
            Some((Frame::Heartbeat, 8))
        ));
        assert_eq!(
            parse(&[HEARTBEAT, 0, 3, 0, 0, 0, 0, END], 0).unwrap_err(),
            FrameError::HeartbeatOnChannel(3)
        );
    }

    fn header(size: u64) -> AMQPContentHeader {
        AMQPContentHeader {
            class_id: 60,
            body_size: size,
            properties: BasicProperties::default(),
        }
    }

    #[test]
    fn content_is_put_back_together_in_order() {
        let mut a = Assembly::default();
        a.begin(Start::Deliver(deliver(1))).unwrap();
        assert!(a.in_progress());
        assert_eq!(
            a.begin(Start::Deliver(deliver(2))),
            Err(ContentError::Interrupted)
        );
        assert!(a.header(header(5)).unwrap().is_none());
        assert!(a.body(b"ab").unwrap().is_none());
        let done = a.body(b"cde").unwrap().expect("complete");
        assert_eq!(done.body, b"abcde");
        assert_eq!(done.start, Start::Deliver(deliver(1)));
        assert!(!a.in_progress());
        // An empty body completes at the header.
        a.begin(Start::Deliver(deliver(3))).unwrap();
        assert_eq!(a.header(header(0)).unwrap().unwrap().body, b"");
        // Out of order, too long, too large.
        assert_eq!(a.body(b"x"), Err(ContentError::UnexpectedBody));
        assert_eq!(a.header(header(1)), Err(ContentError::UnexpectedHeader));
        a.begin(Start::Deliver(deliver(4))).unwrap();
        a.header(header(2)).unwrap();
        assert_eq!(
            a.body(b"xyz"),
            Err(ContentError::TooLong {
                got: 3,
                expected: 2
            })
        );
    }
}

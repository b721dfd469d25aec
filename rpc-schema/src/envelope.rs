//! The outer layer of an oslo.messaging AMQP body: optional kombu compression,
//! the `{"oslo.version": "2.0", "oslo.message": "<json string>"}` envelope,
//! and the legacy un-enveloped form.

use std::io::Read;

use serde_json::{Map, Value};

use crate::pyjson;

/// The envelope version oslo.messaging writes and accepts (same major, minor <= 0).
pub const ENVELOPE_VERSION: &str = "2.0";
const VERSION_KEY: &str = "oslo.version";
const MESSAGE_KEY: &str = "oslo.message";

/// Why a body could not be turned into a message dict.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EnvelopeError {
    #[error("body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("unsupported compression {0:?}")]
    UnsupportedCompression(String),
    #[error("cannot decompress body ({kind}): {reason}")]
    Decompress { kind: &'static str, reason: String },
    #[error("body is not valid UTF-8 JSON: {0}")]
    NotJson(String),
    #[error("body is JSON but not an object")]
    NotAnObject,
    #[error("unsupported RPC envelope version {0}")]
    UnsupportedEnvelopeVersion(String),
    #[error("oslo.message is not a JSON string holding an object: {0}")]
    BadInnerMessage(String),
}

impl EnvelopeError {
    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EnvelopeError::TooLarge { .. } => "too_large",
            EnvelopeError::UnsupportedCompression(_) => "unsupported_compression",
            EnvelopeError::Decompress { .. } => "decompress",
            EnvelopeError::NotJson(_) => "not_json",
            EnvelopeError::NotAnObject => "not_object",
            EnvelopeError::UnsupportedEnvelopeVersion(_) => "envelope_version",
            EnvelopeError::BadInnerMessage(_) => "bad_inner_message",
        }
    }
}

/// kombu compression methods, named by the mime type kombu puts in the
/// `compression` header (kombu/compression.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// kombu "gzip"/"zlib": really zlib (RFC 1950), `application/x-gzip`.
    Zlib,
    /// `application/x-bz2`.
    Bz2,
    /// kombu "lzma"/"xz": Python's `lzma.compress`, an .xz container, `application/x-lzma`.
    Xz,
}

impl Compression {
    /// Parse the `[oslo_messaging_rabbit] kombu_compression` option value.
    pub fn from_option(name: &str) -> Option<Compression> {
        match name {
            "gzip" | "zlib" | "application/x-gzip" => Some(Compression::Zlib),
            "bz2" | "bzip2" | "application/x-bz2" => Some(Compression::Bz2),
            "lzma" | "xz" | "application/x-lzma" => Some(Compression::Xz),
            _ => None,
        }
    }

    /// Parse the AMQP `compression` header.
    pub fn from_header(mime: &str) -> Option<Compression> {
        match mime {
            "application/x-gzip" => Some(Compression::Zlib),
            "application/x-bz2" => Some(Compression::Bz2),
            "application/x-lzma" => Some(Compression::Xz),
            _ => None,
        }
    }

    /// The mime type kombu writes in the `compression` header.
    pub fn mime(self) -> &'static str {
        match self {
            Compression::Zlib => "application/x-gzip",
            Compression::Bz2 => "application/x-bz2",
            Compression::Xz => "application/x-lzma",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Compression::Zlib => "zlib",
            Compression::Bz2 => "bz2",
            Compression::Xz => "xz",
        }
    }

    /// Decompress at most `limit` bytes; more is an error (a zip bomb must
    /// not take the process down).
    pub fn decompress(self, body: &[u8], limit: usize) -> Result<Vec<u8>, EnvelopeError> {
        let err = |reason: String| EnvelopeError::Decompress {
            kind: self.name(),
            reason,
        };
        let mut out = Vec::new();
        match self {
            Compression::Zlib => {
                flate2::read::ZlibDecoder::new(body)
                    .take(limit as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| err(e.to_string()))?;
            }
            Compression::Bz2 => {
                bzip2::read::BzDecoder::new(body)
                    .take(limit as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| err(e.to_string()))?;
            }
            Compression::Xz => {
                let mut reader = std::io::BufReader::new(body);
                let mut limited = LimitedWriter {
                    inner: &mut out,
                    left: limit + 1,
                };
                lzma_rs::xz_decompress(&mut reader, &mut limited)
                    .map_err(|e| err(format!("{e:?}")))?;
            }
        }
        if out.len() > limit {
            return Err(EnvelopeError::TooLarge { limit });
        }
        Ok(out)
    }

    /// Compress a body the way kombu does for this method.
    pub fn compress(self, body: &[u8]) -> Vec<u8> {
        use std::io::Write;
        match self {
            Compression::Zlib => {
                let mut enc =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                // Writing into a Vec cannot fail.
                let _ = enc.write_all(body);
                enc.finish().unwrap_or_default()
            }
            Compression::Bz2 => {
                let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
                let _ = enc.write_all(body);
                enc.finish().unwrap_or_default()
            }
            Compression::Xz => {
                let mut out = Vec::new();
                let _ = lzma_rs::xz_compress(&mut std::io::BufReader::new(body), &mut out);
                out
            }
        }
    }
}

/// A writer that refuses to grow past `left` bytes.
struct LimitedWriter<'a> {
    inner: &'a mut Vec<u8>,
    left: usize,
}

impl std::io::Write for LimitedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.left {
            return Err(std::io::Error::other("decompressed body too large"));
        }
        self.left -= buf.len();
        self.inner.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Is a requested version compatible with the implemented one, by
/// oslo.messaging's rule (`_utils.version_is_compatible`)? `None` when the
/// requested version is not of the form `major.minor[.rev]` with integers,
/// where Python would raise `ValueError`.
pub fn version_is_compatible(implemented: &str, requested: &str) -> Option<bool> {
    fn parts(v: &str) -> Option<(i64, i64, i64)> {
        let mut it = v.split('.');
        let major = it.next()?.trim().parse().ok()?;
        let minor = it.next()?.trim().parse().ok()?;
        let rev = match it.next() {
            Some(r) => r.trim().parse().ok()?,
            None => 0,
        };
        Some((major, minor, rev))
    }
    let (imaj, imin, irev) = parts(implemented)?;
    let (maj, min, rev) = parts(requested)?;
    Some(maj == imaj && (min < imin || (min == imin && rev <= irev)))
}

/// An AMQP body's outer layer: a legacy message (the dict is the message)
/// or the text of the enveloped one.
pub enum Outer {
    Legacy(Map<String, Value>),
    Enveloped(String),
}

/// Open a body's outer layer (after decompression): the size limit, the
/// envelope's version, the inner text.
pub fn outer(body: &[u8], limit: usize) -> Result<Outer, EnvelopeError> {
    if body.len() > limit {
        return Err(EnvelopeError::TooLarge { limit });
    }
    if let Some(inner) = oslo_outer(body) {
        return Ok(Outer::Enveloped(inner));
    }
    parsed_outer(body)
}

/// [`outer`] by the general JSON parser.
fn parsed_outer(body: &[u8]) -> Result<Outer, EnvelopeError> {
    let outer: Value =
        serde_json::from_slice(body).map_err(|e| EnvelopeError::NotJson(e.to_string()))?;
    let Value::Object(mut outer) = outer else {
        return Err(EnvelopeError::NotAnObject);
    };
    if !(outer.contains_key(VERSION_KEY) && outer.contains_key(MESSAGE_KEY)) {
        // Legacy 1.0 message: the dict is the message.
        return Ok(Outer::Legacy(outer));
    }
    let version = match outer.get(VERSION_KEY) {
        Some(Value::String(s)) => s.as_str(),
        other => {
            let shown = other.map(Value::to_string).unwrap_or_default();
            return Err(EnvelopeError::UnsupportedEnvelopeVersion(shown));
        }
    };
    if version_is_compatible(ENVELOPE_VERSION, version) != Some(true) {
        return Err(EnvelopeError::UnsupportedEnvelopeVersion(
            version.to_string(),
        ));
    }
    match outer.swap_remove(MESSAGE_KEY) {
        Some(Value::String(s)) => Ok(Outer::Enveloped(s)),
        Some(other) => Err(EnvelopeError::BadInnerMessage(format!(
            "found {}",
            type_name(&other)
        ))),
        None => Ok(Outer::Enveloped(String::new())),
    }
}

/// The outer layer exactly as oslo.messaging writes it
/// (`{"oslo.version": "2.0", "oslo.message": "..."}`, kombu's `json.dumps`):
/// the inner text, unescaped in one pass. `None` for anything else, which
/// the general parser then reads (and gives the error for): this is only a
/// shortcut to the same string, never another answer
/// (`outer_shortcut_agrees_with_the_parser` in the tests).
fn oslo_outer(body: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = br#"{"oslo.version": "2.0", "oslo.message": ""#;
    let rest = body.strip_prefix(PREFIX)?;
    let (inner, tail) = unescape_json_string(rest)?;
    // JSON's whitespace only (not `trim_ascii`'s, which has form feed).
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let mut rest = tail.iter().skip_while(|b| ws(b));
    (rest.next() == Some(&b'}') && rest.all(ws)).then_some(inner)
}

/// Read a JSON string's contents up to its closing quote (the opening one
/// already consumed): the unescaped text and what follows the quote.
/// `None` where JSON would refuse the string or this does not handle it
/// (a lone surrogate, a raw control character, invalid UTF-8).
fn unescape_json_string(s: &[u8]) -> Option<(String, &[u8])> {
    let mut out: Vec<u8> = Vec::with_capacity(s.len());
    let mut i = 0;
    loop {
        // The run up to the next quote or backslash.
        let end = i + memchr::memchr2(b'"', b'\\', &s[i..])?;
        out.extend_from_slice(&s[i..end]);
        i = end;
        match s[i] {
            b'"' => break,
            b'\\' => {
                let c = *s.get(i + 1)?;
                i += 2;
                match c {
                    b'"' | b'\\' | b'/' => out.push(c),
                    b'b' => out.push(0x08),
                    b'f' => out.push(0x0c),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'u' => {
                        let hi = hex4(s.get(i..i + 4)?)?;
                        i += 4;
                        let code = match hi {
                            0xD800..=0xDBFF => {
                                if s.get(i..i + 2)? != b"\\u" {
                                    return None;
                                }
                                let lo = hex4(s.get(i + 2..i + 6)?)?;
                                if !(0xDC00..=0xDFFF).contains(&lo) {
                                    return None;
                                }
                                i += 6;
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            }
                            0xDC00..=0xDFFF => return None,
                            c => c,
                        };
                        let ch = char::from_u32(code)?;
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
    // No raw control character in the string (JSON has none there): checked
    // once over the whole string rather than run by run (oslo's inner
    // message has a backslash every ~25 bytes).
    if has_control(&s[..i]) {
        return None;
    }
    let tail = &s[i + 1..];
    String::from_utf8(out).ok().map(|t| (t, tail))
}

/// Whether any byte is below 0x20, 32 bytes at a time (a fixed-size block's
/// fold compiles to vector compares).
fn has_control(s: &[u8]) -> bool {
    let mut blocks = s.chunks_exact(32);
    let found = blocks
        .by_ref()
        .any(|b| b.iter().fold(false, |c, &x| c | (x < 0x20)));
    found || blocks.remainder().iter().any(|&x| x < 0x20)
}

fn hex4(h: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &b in h {
        v = (v << 4) | (b as char).to_digit(16)?;
    }
    Some(v)
}

/// Decode an AMQP body (after decompression) into the inner message dict.
pub fn decode(body: &[u8], limit: usize) -> Result<Map<String, Value>, EnvelopeError> {
    let inner = match outer(body, limit)? {
        Outer::Legacy(m) => return Ok(m),
        Outer::Enveloped(inner) => inner,
    };
    match serde_json::from_str::<Value>(&inner) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(EnvelopeError::BadInnerMessage(format!(
            "found {}",
            type_name(&other)
        ))),
        Err(e) => Err(EnvelopeError::BadInnerMessage(e.to_string())),
    }
}

/// Encode a message dict into an enveloped body, byte for byte as oslo.messaging
/// and kombu would.
pub fn encode(inner: &Map<String, Value>) -> Vec<u8> {
    encode_message(inner)
}

/// The same for any message that serializes as a dict (a struct's fields in
/// their order): no map of either layer is built.
pub fn encode_message<T: serde::Serialize + ?Sized>(inner: &T) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Envelope<'a> {
        #[serde(rename = "oslo.version")]
        version: &'static str,
        #[serde(rename = "oslo.message")]
        message: &'a str,
    }
    pyjson::to_vec(&Envelope {
        version: ENVELOPE_VERSION,
        message: &pyjson::to_string(inner),
    })
}

/// A short description of a JSON value's type, for error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_byte_is_found_wherever_it_is() {
        for len in [0, 1, 31, 32, 33, 64, 100] {
            let clean = vec![b'a'; len];
            assert!(!has_control(&clean));
            for at in 0..len {
                for byte in [0x00, 0x0a, 0x1f] {
                    let mut s = clean.clone();
                    s[at] = byte;
                    assert!(has_control(&s), "{len} {at} {byte}");
                }
                let mut s = clean.clone();
                s[at] = 0x20;
                assert!(!has_control(&s));
            }
        }
    }
    use serde_json::json;

    const LIMIT: usize = 1 << 20;

    /// The shortcut gives the parser's string or nothing.
    fn shortcut_agrees(body: &[u8]) {
        if let Some(fast) = oslo_outer(body) {
            match parsed_outer(body) {
                Ok(Outer::Enveloped(slow)) => assert_eq!(fast, slow, "{body:?}"),
                Ok(Outer::Legacy(_)) => panic!("the parser saw a legacy message: {body:?}"),
                Err(e) => panic!("the shortcut read what the parser refuses ({e}): {body:?}"),
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]
        #[test]
        fn outer_shortcut_agrees_with_the_parser(
            // Any text, and text made of what needs escaping.
            text in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "[\\x00-\\x1f\"\\\\/a\u{e9}\u{7f}\u{2028}\u{1F600}]{0,24}",
            ],
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            // Escape sequences, good and bad, surrogates among them.
            escapes in "(\\\\[\"\\\\/bfnrtux]|\\\\u[0-9a-fA-F]{4}|\\\\u[dD][89abAB][0-9a-f]{2}|\\\\u[dD][c-fC-F][0-9a-f]{2}|[a\"}\\x01])*",
            cut in 0usize..64,
        ) {
            const PREFIX: &str = r#"{"oslo.version": "2.0", "oslo.message": "#;
            // The inner text as Python writes it (ASCII, \u escapes with
            // surrogate pairs) and as serde_json does (raw UTF-8).
            for quoted in [crate::pyjson::to_string(&text), serde_json::to_string(&text).unwrap()] {
                let body = format!("{PREFIX}{quoted}}}");
                // A well-formed body takes the shortcut.
                proptest::prop_assert_eq!(oslo_outer(body.as_bytes()), Some(text.clone()));
                shortcut_agrees(body.as_bytes());
                // Cut short, or followed by anything.
                let b = body.as_bytes();
                shortcut_agrees(&b[..b.len().saturating_sub(cut)]);
                let mut tail = b.to_vec();
                tail.extend_from_slice(&junk);
                shortcut_agrees(&tail);
            }
            // Anything at all after the prefix.
            let mut raw = format!("{PREFIX}\"").into_bytes();
            raw.extend_from_slice(&junk);
            shortcut_agrees(&raw);
            shortcut_agrees(format!("{PREFIX}\"{escapes}\"}}").as_bytes());
            shortcut_agrees(format!("{PREFIX}\"{escapes}").as_bytes());
        }
    }

    #[test]
    fn outer_shortcut_refuses_what_json_refuses() {
        let p = r#"{"oslo.version": "2.0", "oslo.message": ""#;
        for bad in [
            r#"\ud800"}"#,       // a lone high surrogate
            r#"\udc00"}"#,       // a lone low surrogate
            r#"\ud800\u0041"}"#, // a high surrogate with no low one
            r#"\x"}"#,           // no such escape
            "a\tb\"}",           // a raw control character
            r#"abc"} x"#,        // something after the object
            r#"abc", "k": 1}"#,  // another key
            "abc\"}\x0c",        // form feed is no JSON whitespace
        ] {
            assert_eq!(oslo_outer(format!("{p}{bad}").as_bytes()), None, "{bad}");
        }
        assert_eq!(
            oslo_outer(format!(r#"{p}\ud83d\ude00 \u00e9\n\/"}} "#).as_bytes()).as_deref(),
            Some("\u{1F600} \u{e9}\n/")
        );
    }

    #[test]
    fn decodes_enveloped_and_legacy() {
        let body = br#"{"oslo.version": "2.0", "oslo.message": "{\"method\": \"ping_conductor\", \"args\": {}}"}"#;
        let m = decode(body, LIMIT).unwrap();
        assert_eq!(m["method"], "ping_conductor");
        let legacy = br#"{"method": "x", "args": {}}"#;
        assert_eq!(decode(legacy, LIMIT).unwrap()["method"], "x");
    }

    #[test]
    fn rejects_bad_envelopes() {
        assert!(matches!(
            decode(b"nope", LIMIT),
            Err(EnvelopeError::NotJson(_))
        ));
        assert!(matches!(
            decode(b"[1]", LIMIT),
            Err(EnvelopeError::NotAnObject)
        ));
        assert!(matches!(
            decode(b"\xff\xfe", LIMIT),
            Err(EnvelopeError::NotJson(_))
        ));
        let v3 = br#"{"oslo.version": "3.0", "oslo.message": "{}"}"#;
        assert_eq!(
            decode(v3, LIMIT),
            Err(EnvelopeError::UnsupportedEnvelopeVersion("3.0".into()))
        );
        let v21 = br#"{"oslo.version": "2.1", "oslo.message": "{}"}"#;
        assert!(matches!(
            decode(v21, LIMIT),
            Err(EnvelopeError::UnsupportedEnvelopeVersion(_))
        ));
        let nested = br#"{"oslo.version": "2.0", "oslo.message": {"method": "x"}}"#;
        assert!(matches!(
            decode(nested, LIMIT),
            Err(EnvelopeError::BadInnerMessage(_))
        ));
        assert!(matches!(
            decode(&[b' '; 100], 10),
            Err(EnvelopeError::TooLarge { .. })
        ));
    }

    #[test]
    fn encode_is_python_shaped() {
        let mut inner = Map::new();
        inner.insert("result".into(), json!(true));
        inner.insert("failure".into(), Value::Null);
        let body = encode(&inner);
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"oslo.version": "2.0", "oslo.message": "{\"result\": true, \"failure\": null}"}"#
        );
        assert_eq!(decode(&body, LIMIT).unwrap(), inner);
    }

    #[test]
    fn compression_round_trips_and_is_bounded() {
        let data = br#"{"method": "ping_conductor"}"#.repeat(100);
        for c in [Compression::Zlib, Compression::Bz2, Compression::Xz] {
            let packed = c.compress(&data);
            assert_eq!(c.decompress(&packed, LIMIT).unwrap(), data, "{c:?}");
            assert!(
                c.decompress(&packed, 100).is_err(),
                "{c:?} must respect the limit"
            );
            assert!(c.decompress(b"garbage", LIMIT).is_err());
        }
        assert_eq!(Compression::from_option("gzip"), Some(Compression::Zlib));
        assert_eq!(Compression::from_header("application/zstd"), None);
    }

    #[test]
    fn version_rule_matches_oslo() {
        assert_eq!(version_is_compatible("1.0", "1.0"), Some(true));
        assert_eq!(version_is_compatible("1.0", "1.1"), Some(false));
        assert_eq!(version_is_compatible("1.3", "1.1"), Some(true));
        assert_eq!(version_is_compatible("1.0", "2.0"), Some(false));
        assert_eq!(version_is_compatible("1.0", "1.0.1"), Some(false));
        assert_eq!(version_is_compatible("1.0", "x"), None);
    }
}

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
    use serde_json::json;

    const LIMIT: usize = 1 << 20;

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

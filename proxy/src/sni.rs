//! The server name a TLS client asks for, read from its ClientHello
//! (RFC 8446 section 4.1.2, RFC 6066 section 3), without terminating TLS:
//! the proxy routes the connection by it and passes every byte through.
//! Pure: bytes in, a decision out.

/// The largest ClientHello the proxy reads before deciding (a TLS record
/// carries at most 16 KiB; hybrid post-quantum key shares make a hello
/// about 1.5 KiB).
pub const MAX_HELLO: usize = 16 * 1024 + 5;

/// What the first bytes of a connection say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not enough bytes yet: read more (up to [`MAX_HELLO`]).
    Incomplete,
    /// A ClientHello naming this host (lowercase ASCII).
    ServerName(String),
    /// A ClientHello without a server name: nothing to route by.
    NoServerName,
    /// Not a TLS ClientHello, or a malformed one: why.
    Invalid(&'static str),
}

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const HOST_NAME: u8 = 0;

/// Decide from the bytes a client sent so far.
pub fn client_hello(buf: &[u8]) -> Hello {
    // The handshake message may span several records: gather fragments.
    let mut handshake = Vec::new();
    let mut rest = buf;
    loop {
        if rest.len() < 5 {
            return incomplete(buf);
        }
        if rest[0] != HANDSHAKE {
            return Hello::Invalid("not a TLS handshake record");
        }
        if rest[1] != 3 {
            return Hello::Invalid("not a TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > 16 * 1024 + 256 {
            return Hello::Invalid("TLS record length out of range");
        }
        if rest.len() < 5 + len {
            return incomplete(buf);
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if handshake.len() >= 4 {
            if handshake[0] != CLIENT_HELLO {
                return Hello::Invalid("the first handshake message is not a ClientHello");
            }
            let want = 4 + u24(&handshake[1..4]);
            if want > MAX_HELLO {
                return Hello::Invalid("ClientHello too large");
            }
            if handshake.len() >= want {
                return parse(&handshake[4..want]);
            }
        }
    }
}

fn incomplete(buf: &[u8]) -> Hello {
    if buf.len() >= MAX_HELLO {
        Hello::Invalid("no complete ClientHello in the first 16 KiB")
    } else {
        Hello::Incomplete
    }
}

fn u24(b: &[u8]) -> usize {
    (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2])
}

/// A cursor over a ClientHello body; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

fn parse(body: &[u8]) -> Hello {
    let mut r = Reader(body);
    let head = (|| {
        r.take(2)?; // legacy_version
        r.take(32)?; // random
        r.vec8()?; // legacy_session_id
        r.vec16()?; // cipher_suites
        r.vec8()?; // legacy_compression_methods
        Some(())
    })();
    if head.is_none() {
        return Hello::Invalid("truncated ClientHello");
    }
    if r.0.is_empty() {
        return Hello::NoServerName; // no extensions at all
    }
    let Some(extensions) = r.vec16() else {
        return Hello::Invalid("truncated ClientHello extensions");
    };
    let mut e = Reader(extensions);
    while !e.0.is_empty() {
        let (Some(kind), Some(data)) = (e.u16(), e.vec16()) else {
            return Hello::Invalid("truncated ClientHello extension");
        };
        if kind == EXT_SERVER_NAME {
            return server_name(data);
        }
    }
    Hello::NoServerName
}

fn server_name(data: &[u8]) -> Hello {
    let mut r = Reader(data);
    let Some(list) = r.vec16() else {
        return Hello::Invalid("truncated server_name extension");
    };
    let mut l = Reader(list);
    while !l.0.is_empty() {
        let (Some(kind), Some(name)) = (l.u8(), l.vec16()) else {
            return Hello::Invalid("truncated server_name entry");
        };
        if kind == HOST_NAME {
            return match host(name) {
                Some(h) => Hello::ServerName(h),
                None => Hello::Invalid("server name is not a DNS host name"),
            };
        }
    }
    Hello::NoServerName
}

/// A DNS host name (RFC 1123 labels, no trailing dot), lowercased.
fn host(name: &[u8]) -> Option<String> {
    if name.is_empty() || name.len() > 253 {
        return None;
    }
    let s = std::str::from_utf8(name).ok()?;
    let ok = s.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    ok.then(|| s.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls sends it for `name` (the real bytes a
    /// client puts on the wire).
    fn real_hello(name: &str) -> Vec<u8> {
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn a_real_client_hello_names_its_server_at_any_split() {
        let hello = real_hello("Cluster-A.Magnum-System");
        assert_eq!(
            client_hello(&hello),
            Hello::ServerName("cluster-a.magnum-system".into())
        );
        for cut in 0..hello.len() {
            assert_eq!(
                client_hello(&hello[..cut]),
                Hello::Incomplete,
                "cut at {cut}"
            );
        }
        // Bytes after the hello (none come before the server answers, but
        // a pipelining client may) change nothing.
        let mut more = hello.clone();
        more.extend_from_slice(b"\x17\x03\x03\x00\x01x");
        assert_eq!(
            client_hello(&more),
            Hello::ServerName("cluster-a.magnum-system".into())
        );
    }

    #[test]
    fn a_hello_split_over_two_records_is_reassembled() {
        let hello = real_hello("k8s.example");
        let body = &hello[5..];
        let (a, b) = body.split_at(40);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[22, 3, 1]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(client_hello(&two), Hello::ServerName("k8s.example".into()));
        assert_eq!(client_hello(&two[..50]), Hello::Incomplete);
    }

    #[test]
    fn an_ip_address_client_sends_no_name() {
        // rustls sends no SNI for an IP address (RFC 6066: literal IPs
        // are not permitted in server_name).
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from("10.0.0.10").unwrap();
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        assert_eq!(client_hello(&out), Hello::NoServerName);
    }

    #[test]
    fn other_traffic_is_refused_with_a_reason() {
        assert_eq!(
            client_hello(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            Hello::Invalid("not a TLS handshake record")
        );
        assert_eq!(
            client_hello(&[22, 3, 1, 0, 0]),
            Hello::Invalid("TLS record length out of range")
        );
        // A record that is a handshake but not a ClientHello.
        assert_eq!(
            client_hello(&[22, 3, 3, 0, 4, 2, 0, 0, 0]),
            Hello::Invalid("the first handshake message is not a ClientHello")
        );
        // A hello whose extensions lie about their length.
        let mut hello = real_hello("a.b");
        let n = hello.len();
        hello.truncate(n - 3);
        let body_len = (n - 3 - 9) as u32;
        hello[3..5].copy_from_slice(&((n - 3 - 5) as u16).to_be_bytes());
        hello[6..9].copy_from_slice(&body_len.to_be_bytes()[1..]);
        assert!(
            matches!(client_hello(&hello), Hello::Invalid(_)),
            "{:?}",
            client_hello(&hello)
        );
    }

    #[test]
    fn names_must_be_dns_host_names() {
        assert_eq!(host(b"a-1.b"), Some("a-1.b".into()));
        for bad in [&b""[..], b"-a.b", b"a..b", b"a b", b"a.b.", b"\xff"] {
            assert_eq!(host(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        // Every prefix and every single-byte corruption of a real hello.
        let hello = real_hello("x.y");
        for i in 0..hello.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut h = hello.clone();
                h[i] = v;
                let _ = client_hello(&h);
            }
        }
        let long = vec![22u8; MAX_HELLO + 10];
        assert!(matches!(client_hello(&long), Hello::Invalid(_)));
    }
}

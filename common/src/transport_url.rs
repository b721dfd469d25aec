//! oslo.messaging transport URLs (`TransportURL.parse`):
//! `rabbit://user:pass@host1:5672,user:pass@host2:5672/vhost?ssl=1`.
//!
//! Several comma-separated hosts (each with its own credentials), a
//! percent-encoded vhost, and query parameters that override the
//! same-named `[oslo_messaging_rabbit]` options (oslo's `ConfigOptsProxy`).

use std::collections::BTreeMap;

use percent_encoding::percent_decode_str;

use crate::secret::Secret;

/// One broker host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportHost {
    pub hostname: String,
    pub port: Option<u16>,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

/// A parsed transport URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportUrl {
    pub transport: String,
    /// `None` when the URL has no path (kombu then uses `/`).
    pub virtual_host: Option<String>,
    pub hosts: Vec<TransportHost>,
    /// Query parameters; repeated keys joined with `,` as oslo does.
    pub query: BTreeMap<String, String>,
}

/// Why a transport URL was refused. Never contains the password.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TransportUrlError {
    #[error("invalid transport_url: no scheme specified")]
    NoScheme,
    #[error("invalid transport_url: unsupported transport {0:?} (only rabbit:// is supported)")]
    UnsupportedTransport(String),
    #[error("invalid transport_url: bad port in host {host:?}")]
    BadPort { host: String },
    #[error("invalid transport_url: {0}")]
    Other(String),
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// Python's `parse.unquote_plus`-free `parse_qs`: `a=1&b=2&a=3`.
fn parse_query(q: &str) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pair in q.split(['&', ';']) {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        if v.is_empty() {
            continue; // parse_qs drops blank values
        }
        let k = decode(&k.replace('+', " "));
        let v = decode(&v.replace('+', " "));
        out.entry(k).or_default().push(v);
    }
    out.into_iter().map(|(k, v)| (k, v.join(","))).collect()
}

impl TransportUrl {
    pub fn parse(url: &str) -> Result<TransportUrl, TransportUrlError> {
        let url = url.trim();
        let (scheme, rest) = url.split_once("://").ok_or(TransportUrlError::NoScheme)?;
        if scheme.is_empty() {
            return Err(TransportUrlError::NoScheme);
        }
        let transport = scheme.to_ascii_lowercase();
        if transport != "rabbit" && transport != "kombu" {
            return Err(TransportUrlError::UnsupportedTransport(transport));
        }
        // urlparse: netloc up to the first '/', '?' or '#'; fragment dropped.
        let rest = rest.split_once('#').map_or(rest, |(a, _)| a);
        let (before_query, query) = rest.split_once('?').map_or((rest, ""), |(a, q)| (a, q));
        let (netloc, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], Some(&before_query[i..])),
            None => (before_query, None),
        };
        let virtual_host = path.map(|p| decode(&p[1..]));
        let mut hosts = Vec::new();
        for host in netloc.split(',') {
            if host.is_empty() {
                continue;
            }
            let (creds, hostport) = match host.rsplit_once('@') {
                Some((c, h)) => (Some(c), h),
                None => (None, host),
            };
            let (username, password) = match creds {
                Some(c) => match c.split_once(':') {
                    Some((u, p)) => (Some(decode(u)), Some(Secret::new(decode(p)))),
                    None => (Some(decode(c)), None),
                },
                None => (None, None),
            };
            let (hostname, port) = split_host_port(hostport)?;
            hosts.push(TransportHost {
                hostname,
                port,
                username,
                password,
            });
        }
        Ok(TransportUrl {
            transport,
            virtual_host,
            hosts,
            query: parse_query(query),
        })
    }
}

/// oslo_utils `netutils.parse_host_port`: `host`, `host:port`, `[v6]:port`.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), TransportUrlError> {
    let bad = || TransportUrlError::BadPort {
        host: s.to_string(),
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| TransportUrlError::Other(format!("bad host {s:?}")))?;
        let port = match after.strip_prefix(':') {
            Some(p) if !p.is_empty() => Some(p.parse().map_err(|_| bad())?),
            _ => None,
        };
        return Ok((h.to_string(), port));
    }
    if s.matches(':').count() > 1 {
        return Ok((s.to_string(), None)); // bare IPv6 address
    }
    match s.split_once(':') {
        Some((h, p)) if !p.is_empty() => Ok((h.to_string(), Some(p.parse().map_err(|_| bad())?))),
        Some((h, _)) => Ok((h.to_string(), None)),
        None => Ok((s.to_string(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_hosts_vhost_and_special_characters() {
        let u = TransportUrl::parse(
            "rabbit://magnum:p%40ss%2Fw%3Ard@10.0.0.1:5672,magnum:p%40ss%2Fw%3Ard@10.0.0.2:5671//magnum?ssl=1&ssl_ca_file=/etc/ca.pem",
        )
        .unwrap();
        assert_eq!(u.hosts.len(), 2);
        assert_eq!(u.hosts[0].hostname, "10.0.0.1");
        assert_eq!(u.hosts[1].port, Some(5671));
        assert_eq!(u.hosts[0].password.as_ref().unwrap().expose(), "p@ss/w:rd");
        assert_eq!(u.virtual_host.as_deref(), Some("/magnum"));
        assert_eq!(u.query["ssl"], "1");
        assert_eq!(u.query["ssl_ca_file"], "/etc/ca.pem");
        assert!(!format!("{u:?}").contains("p@ss"));
    }

    #[test]
    fn edge_cases() {
        let u = TransportUrl::parse("rabbit://").unwrap();
        assert!(u.hosts.is_empty() && u.virtual_host.is_none());
        let u = TransportUrl::parse("rabbit://guest:guest@[::1]:5672/").unwrap();
        assert_eq!(u.hosts[0].hostname, "::1");
        assert_eq!(u.virtual_host.as_deref(), Some(""));
        let u = TransportUrl::parse("rabbit://a:b:c@h/v?x=1&x=2").unwrap();
        assert_eq!(u.hosts[0].password.as_ref().unwrap().expose(), "b:c");
        assert_eq!(u.query["x"], "1,2");
        assert_eq!(
            TransportUrl::parse("h:5672"),
            Err(TransportUrlError::NoScheme)
        );
        assert!(matches!(
            TransportUrl::parse("zmq://h"),
            Err(TransportUrlError::UnsupportedTransport(_))
        ));
        assert!(matches!(
            TransportUrl::parse("rabbit://u:p@h:notaport/"),
            Err(TransportUrlError::BadPort { .. })
        ));
        let err = TransportUrl::parse("rabbit://u:secretpw@h:99999/")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secretpw"), "{err}");
    }
}

//! Connecting the way oslo's rabbit driver does
//! (host failover, vhost, TLS, heartbeat, SASL mechanism) and declaring a
//! [`topology`](crate::topology) on a channel.

use std::sync::Arc;
use std::time::Duration;

use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use amq_protocol::uri::SASLMechanism;
use common::config::Config;

use crate::topology::{ArgValue, Args, ConsumerDecl};

pub mod client;
pub mod frame;

pub use client::{
    BasicConsumeOptions, Channel, Connection, Consumer, ExchangeDeclareOptions, ExchangeKind,
    QueueDeclareOptions,
};

/// A connection target, printable without its password.
#[derive(Clone)]
pub struct Target {
    /// Everything but TLS and the connection's name, which [`connect`] adds.
    pub options: client::ConnectOptions,
    pub label: String,
}

/// The broker endpoints of the transport URL, in order (`localhost:5672`
/// with guest/guest when the URL names none, as kombu does).
pub fn targets(cfg: &Config) -> Vec<Target> {
    let r = &cfg.rabbit;
    let default_port = if r.ssl { 5671 } else { 5672 };
    let vhost = match cfg.transport.virtual_host.as_deref() {
        None | Some("") => "/".to_string(),
        Some(v) => v.to_string(),
    };
    let mechanism = match r.rabbit_login_method.as_str() {
        "PLAIN" => SASLMechanism::Plain,
        "EXTERNAL" => SASLMechanism::External,
        "RABBIT-CR-DEMO" => SASLMechanism::RabbitCrDemo,
        _ => SASLMechanism::AMQPlain,
    };
    let mut hosts: Vec<(String, u16, String, String)> = cfg
        .transport
        .hosts
        .iter()
        .map(|h| {
            (
                h.hostname.clone(),
                h.port.unwrap_or(default_port),
                h.username.clone().unwrap_or_else(|| "guest".into()),
                h.password
                    .as_ref()
                    .map(|p| p.expose().to_string())
                    .unwrap_or_else(|| "guest".into()),
            )
        })
        .collect();
    if hosts.is_empty() {
        hosts.push((
            "localhost".into(),
            default_port,
            "guest".into(),
            "guest".into(),
        ));
    }
    hosts
        .into_iter()
        .map(|(host, port, username, password)| {
            let label = format!(
                "{}://{}@{}:{}/{}",
                if r.ssl { "amqps" } else { "amqp" },
                username,
                host,
                port,
                vhost
            );
            Target {
                options: client::ConnectOptions {
                    host,
                    port,
                    vhost: vhost.clone(),
                    username,
                    password,
                    mechanism,
                    heartbeat: r.heartbeat_timeout_threshold,
                    // py-amqp asks for frame_max 131072; bodies span frames either way.
                    frame_max: 131_072,
                    timeout: Duration::from_secs(10),
                    tls: None,
                    name: String::new(),
                },
                label,
            }
        })
        .collect()
}

/// Why a connection attempt failed (no secrets in the text).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot read {what} {path}: {source}")]
    TlsFile {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("TLS settings: {0}")]
    TlsConfig(String),
    #[error("connecting to {target}: {source}")]
    Amqp {
        target: String,
        source: client::Error,
    },
}

/// The TLS client configuration of `[oslo_messaging_rabbit]`: the
/// `ssl_ca_file` bundle (the system's roots without one), and the client
/// certificate and key when both are set.
fn tls_config(cfg: &Config) -> Result<Option<Arc<rustls::ClientConfig>>, ConnectError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let r = &cfg.rabbit;
    if !r.ssl {
        return Ok(None);
    }
    let read = |what: &'static str, path: &str| {
        std::fs::read(path).map_err(|source| ConnectError::TlsFile {
            what,
            path: path.to_string(),
            source,
        })
    };
    let mut roots = rustls::RootCertStore::empty();
    if r.ssl_ca_file.is_empty() {
        for c in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(c);
        }
    } else {
        let pem = read("ssl_ca_file", &r.ssl_ca_file)?;
        for c in CertificateDer::pem_slice_iter(&pem) {
            let c = c.map_err(|e| {
                ConnectError::TlsConfig(format!("ssl_ca_file {}: {e}", r.ssl_ca_file))
            })?;
            roots.add(c).map_err(|e| {
                ConnectError::TlsConfig(format!("ssl_ca_file {}: {e}", r.ssl_ca_file))
            })?;
        }
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = if !r.ssl_cert_file.is_empty() && !r.ssl_key_file.is_empty() {
        let pem = read("ssl_cert_file", &r.ssl_cert_file)?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                ConnectError::TlsConfig(format!("ssl_cert_file {}: {e}", r.ssl_cert_file))
            })?;
        let key = read("ssl_key_file", &r.ssl_key_file)?;
        // The key's own text never goes into the error.
        let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| {
            ConnectError::TlsConfig(format!(
                "ssl_key_file {}: no private key in it",
                r.ssl_key_file
            ))
        })?;
        builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| ConnectError::TlsConfig(format!("client certificate: {e}")))?
    } else {
        builder.with_no_client_auth()
    };
    Ok(Some(Arc::new(config)))
}

/// Open a connection to `target`.
pub async fn connect(cfg: &Config, target: &Target) -> Result<Connection, ConnectError> {
    let mut options = target.options.clone();
    options.tls = tls_config(cfg)?;
    options.name = format!(
        "magnum-conductor:{}:{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    Connection::connect(&options)
        .await
        .map_err(|source| ConnectError::Amqp {
            target: target.label.clone(),
            source,
        })
}

/// An argument table as py-amqp encodes it (32-bit ints when they fit).
pub fn field_table(args: &Args) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in args {
        let value = match v {
            ArgValue::Str(s) => AMQPValue::LongString(LongString::from(s.as_str())),
            ArgValue::Bool(b) => AMQPValue::Boolean(*b),
            ArgValue::Int(i) => match i32::try_from(*i) {
                Ok(small) => AMQPValue::LongInt(small),
                Err(_) => AMQPValue::LongLongInt(*i),
            },
        };
        t.insert(ShortString::from(*k), value);
    }
    t
}

fn is_durable_mismatch(e: &client::Error) -> bool {
    e.to_string().contains("inequivalent arg 'durable'")
}

/// Declare one consumer's exchange, queue and binding (kombu's
/// `Queue.declare` order). On `inequivalent arg 'durable'` the Python
/// driver retries non-durable on a new channel; so do we, returning the
/// channel that is still open.
pub async fn declare(
    conn: &Connection,
    channel: Channel,
    d: &ConsumerDecl,
) -> Result<Channel, client::Error> {
    match declare_once(
        &channel,
        d,
        d.exchange_durable,
        d.queue_durable,
        d.exchange_auto_delete,
    )
    .await
    {
        Ok(()) => Ok(channel),
        Err(e) if is_durable_mismatch(&e) => {
            tracing::warn!(queue = %d.queue, error = %e, "queue could not be declared probably because of conflicting configurations; retrying non-durable");
            let channel = conn.create_channel().await?;
            declare_once(&channel, d, false, false, d.queue_auto_delete).await?;
            Ok(channel)
        }
        Err(e) => Err(e),
    }
}

async fn declare_once(
    ch: &Channel,
    d: &ConsumerDecl,
    exchange_durable: bool,
    queue_durable: bool,
    exchange_auto_delete: bool,
) -> Result<(), client::Error> {
    let kind = match d.exchange_type {
        "fanout" => ExchangeKind::Fanout,
        "direct" => ExchangeKind::Direct,
        _ => ExchangeKind::Topic,
    };
    ch.exchange_declare(
        d.exchange.as_str(),
        kind,
        ExchangeDeclareOptions {
            durable: exchange_durable,
            auto_delete: exchange_auto_delete,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    ch.queue_declare(
        d.queue.as_str(),
        QueueDeclareOptions {
            durable: queue_durable,
            auto_delete: d.queue_auto_delete,
            ..Default::default()
        },
        field_table(&d.queue_args),
    )
    .await?;
    ch.queue_bind(
        d.queue.as_str(),
        d.exchange.as_str(),
        d.binding_key.as_str(),
        FieldTable::default(),
    )
    .await
}

/// Start consuming a declared queue with manual acks.
pub async fn consume(ch: &Channel, d: &ConsumerDecl, tag: &str) -> Result<Consumer, client::Error> {
    ch.basic_consume(
        d.queue.as_str(),
        tag,
        BasicConsumeOptions {
            no_ack: false,
            ..Default::default()
        },
        field_table(&d.consumer_args),
    )
    .await
}

/// oslo's queue manager name: `<hostname>:<processname>:<n>`, where `n`
/// counts the queues this process (group) asked for, persisted in
/// `/dev/shm/<hostname>_<processname>_qmanager` so a restart of the same
/// service reuses names.
pub fn queue_manager_name(hostname: &str, processname: &str) -> String {
    let path = format!("/dev/shm/{hostname}_{processname}_qmanager");
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces).
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let pg: i64 = fields
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| i64::from(std::process::id()));
    let start: i64 = fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0);
    let previous = std::fs::read_to_string(&path).ok().and_then(|s| {
        let mut it = s.trim().split(':');
        Some((
            it.next()?.parse::<i64>().ok()?,
            it.next()?.parse::<u64>().ok()?,
            it.next()?.parse::<i64>().ok()?,
        ))
    });
    let counter = match previous {
        Some((p, c, s)) if p == pg && s == start => c + 1,
        _ => 1,
    };
    if let Err(e) = std::fs::write(&path, format!("{pg}:{counter}:{start}")) {
        tracing::debug!(error = %e, path = %path, "cannot persist the queue manager counter");
    }
    format!("{hostname}:{processname}:{counter}")
}

/// How long to wait before reconnect attempt `n` (oslo's rabbit_retry_*).
pub fn retry_delay(cfg: &Config, attempt: u32) -> Duration {
    let r = &cfg.rabbit;
    let secs = r
        .rabbit_retry_interval
        .saturating_add(r.rabbit_retry_backoff.saturating_mul(u64::from(attempt)));
    Duration::from_secs(secs.min(r.rabbit_interval_max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::config::Layered;
    use std::path::Path;

    fn cfg(text: &str) -> Config {
        let mut l = Layered::default();
        l.push_text(Path::new("t"), text).unwrap();
        Config::from_layered(&l).unwrap()
    }

    #[test]
    fn targets_follow_the_transport_url() {
        let c =
            cfg("[DEFAULT]\ntransport_url = rabbit://u:p%40w@h1:5673,u:p%40w@h2//magnum?ssl=1\n");
        let t = targets(&c);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].options.port, 5673);
        assert_eq!(t[1].options.port, 5671, "ssl default port");
        assert_eq!(t[0].options.vhost, "/magnum");
        assert_eq!(t[0].options.password, "p@w");
        assert!(!t[0].label.contains("p@w"));
        assert!(!format!("{:?}", t[0].options).contains("p@w"));
        let d = targets(&cfg(""));
        assert_eq!(
            (d[0].options.host.as_str(), d[0].options.vhost.as_str()),
            ("localhost", "/")
        );
        assert_eq!(d[0].options.mechanism, SASLMechanism::AMQPlain);
        assert_eq!(d[0].options.heartbeat, 60);
    }

    #[test]
    fn ints_encode_like_py_amqp() {
        let t = field_table(&vec![
            ("a", ArgValue::Int(1_800_000)),
            ("b", ArgValue::Int(1 << 40)),
        ]);
        assert_eq!(t.inner().get("a"), Some(&AMQPValue::LongInt(1_800_000)));
        assert_eq!(t.inner().get("b"), Some(&AMQPValue::LongLongInt(1 << 40)));
    }

    #[test]
    fn retry_delay_is_capped() {
        let c = cfg("");
        assert_eq!(retry_delay(&c, 0), Duration::from_secs(1));
        assert_eq!(retry_delay(&c, 3), Duration::from_secs(7));
        assert_eq!(retry_delay(&c, 100), Duration::from_secs(30));
    }

    #[test]
    fn queue_manager_counts_up() {
        let host = format!("test{}", std::process::id());
        let a = queue_manager_name(&host, "mc");
        let b = queue_manager_name(&host, "mc");
        assert_eq!(a, format!("{host}:mc:1"));
        assert_eq!(b, format!("{host}:mc:2"));
        let _ = std::fs::remove_file(format!("/dev/shm/{host}_mc_qmanager"));
    }
}

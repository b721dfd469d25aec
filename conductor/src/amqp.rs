//! Thin adapter over lapin: connecting the way oslo's rabbit driver does
//! (host failover, vhost, TLS, heartbeat, SASL mechanism) and declaring a
//! [`topology`](crate::topology) on a channel.

use std::time::Duration;

use common::config::Config;
use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::{
    AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo, SASLMechanism,
};
use lapin::{Channel, Connection, ConnectionProperties, Consumer, ExchangeKind};

use crate::topology::{ArgValue, Args, ConsumerDecl};

/// A connection target, printable without its password.
#[derive(Clone)]
pub struct Target {
    pub uri: AMQPUri,
    pub label: String,
}

/// The broker endpoints of the transport URL, in order (`localhost:5672`
/// with guest/guest when the URL names none, as kombu does).
pub fn targets(cfg: &Config) -> Vec<Target> {
    let r = &cfg.rabbit;
    let scheme = if r.ssl {
        AMQPScheme::AMQPS
    } else {
        AMQPScheme::AMQP
    };
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
    let query = AMQPQueryString {
        heartbeat: Some(r.heartbeat_timeout_threshold),
        connection_timeout: Some(10_000),
        auth_mechanism: Some(mechanism),
        // py-amqp asks for frame_max 131072; bodies span frames either way.
        frame_max: Some(131_072),
        ..Default::default()
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
                uri: AMQPUri {
                    scheme: scheme.clone(),
                    authority: AMQPAuthority {
                        userinfo: AMQPUserInfo { username, password },
                        host,
                        port,
                    },
                    vhost: vhost.clone(),
                    query: query.clone(),
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
    #[error("connecting to {target}: {source}")]
    Amqp {
        target: String,
        source: lapin::Error,
    },
}

fn tls_config(cfg: &Config) -> Result<OwnedTLSConfig, ConnectError> {
    let r = &cfg.rabbit;
    if !r.ssl {
        return Ok(OwnedTLSConfig::default());
    }
    let read = |what: &'static str, path: &str| {
        std::fs::read(path).map_err(|source| ConnectError::TlsFile {
            what,
            path: path.to_string(),
            source,
        })
    };
    let cert_chain = if r.ssl_ca_file.is_empty() {
        None
    } else {
        Some(String::from_utf8_lossy(&read("ssl_ca_file", &r.ssl_ca_file)?).into_owned())
    };
    let identity = if !r.ssl_cert_file.is_empty() && !r.ssl_key_file.is_empty() {
        Some(OwnedIdentity::PKCS8 {
            pem: read("ssl_cert_file", &r.ssl_cert_file)?,
            key: read("ssl_key_file", &r.ssl_key_file)?,
        })
    } else {
        None
    };
    Ok(OwnedTLSConfig {
        identity,
        cert_chain,
    })
}

/// Open a connection to `target`.
pub async fn connect(cfg: &Config, target: &Target) -> Result<Connection, ConnectError> {
    let tls = tls_config(cfg)?;
    let name = format!(
        "magnum-conductor:{}:{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    // We drive retries and failover ourselves; one TCP attempt per call.
    let props = ConnectionProperties::default()
        .with_connection_name(name.into())
        .with_backoff(backon::ExponentialBuilder::default().with_max_times(0));
    let runtime = lapin::runtime::default_runtime().map_err(|source| ConnectError::Amqp {
        target: target.label.clone(),
        source,
    })?;
    Connection::connect_uri_with_config(target.uri.clone(), props, tls, runtime)
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

fn is_durable_mismatch(e: &lapin::Error) -> bool {
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
) -> Result<Channel, lapin::Error> {
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
) -> Result<(), lapin::Error> {
    let kind = match d.exchange_type {
        "fanout" => ExchangeKind::Fanout,
        "direct" => ExchangeKind::Direct,
        _ => ExchangeKind::Topic,
    };
    ch.exchange_declare(
        d.exchange.as_str().into(),
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
        d.queue.as_str().into(),
        QueueDeclareOptions {
            durable: queue_durable,
            auto_delete: d.queue_auto_delete,
            ..Default::default()
        },
        field_table(&d.queue_args),
    )
    .await?;
    ch.queue_bind(
        d.queue.as_str().into(),
        d.exchange.as_str().into(),
        d.binding_key.as_str().into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
}

/// Start consuming a declared queue with manual acks.
pub async fn consume(ch: &Channel, d: &ConsumerDecl, tag: &str) -> Result<Consumer, lapin::Error> {
    ch.basic_consume(
        d.queue.as_str().into(),
        tag.into(),
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
        assert_eq!(t[0].uri.authority.port, 5673);
        assert_eq!(t[1].uri.authority.port, 5671, "ssl default port");
        assert_eq!(t[0].uri.vhost, "/magnum");
        assert_eq!(t[0].uri.authority.userinfo.password, "p@w");
        assert!(!t[0].label.contains("p@w"));
        let d = targets(&cfg(""));
        assert_eq!(
            (d[0].uri.authority.host.as_str(), d[0].uri.vhost.as_str()),
            ("localhost", "/")
        );
        assert_eq!(d[0].uri.query.auth_mechanism, Some(SASLMechanism::AMQPlain));
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

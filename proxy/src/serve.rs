//! The listener and the byte pump (I/O): read the client's hello (no
//! more), route it by its server name, dial the backend inside its
//! namespace, replay the bytes read, then copy both ways until either
//! side closes. Every refusal is logged with its reason and counted.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;
use crate::route::Routes;
use crate::sni::{self, Hello};

/// How long a client may take to send its hello, and a dial may take.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the proxy serves.
#[derive(Debug, Clone)]
pub struct Proxy {
    pub routes: Arc<RwLock<Routes>>,
    /// Where namespaces are named (`/run/netns`).
    pub netns_dir: PathBuf,
    pub metrics: Arc<Metrics>,
}

/// Why a connection was not passed through.
#[derive(Debug)]
pub enum Refusal {
    Hello(&'static str),
    NoServerName,
    Timeout,
    UnknownName(String),
    Dial(String, io::Error),
    Io(io::Error),
}

impl Refusal {
    /// The metric's `reason` label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Hello(_) => "not_tls",
            Refusal::NoServerName => "no_server_name",
            Refusal::Timeout => "hello_timeout",
            Refusal::UnknownName(_) => "unknown_name",
            Refusal::Dial(..) => "dial",
            Refusal::Io(_) => "io",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Hello(why) => write!(f, "not a TLS ClientHello: {why}"),
            Refusal::NoServerName => write!(f, "the ClientHello names no server"),
            Refusal::Timeout => write!(f, "no ClientHello within {HELLO_TIMEOUT:?}"),
            Refusal::UnknownName(n) => write!(f, "no cluster is served as {n}"),
            Refusal::Dial(n, e) => write!(f, "{n}: the backend did not answer: {e}"),
            Refusal::Io(e) => write!(f, "{e}"),
        }
    }
}

impl Proxy {
    /// Accept until the listener fails.
    pub async fn serve(self, listener: TcpListener) -> io::Result<()> {
        loop {
            let (mut conn, peer) = listener.accept().await?;
            let this = self.clone();
            tokio::spawn(async move {
                this.metrics.connections.inc();
                if let Err(why) = this.pass(&mut conn).await {
                    // Counted before the client sees the close (conn is
                    // dropped after this block), so whoever watches the
                    // counters after a refusal sees it.
                    match why {
                        Refusal::Dial(..) => this.metrics.dial_failures.inc(),
                        _ => this
                            .metrics
                            .refused
                            .with_label_values(&[why.reason()])
                            .inc(),
                    };
                    tracing::info!(%peer, "connection refused: {why}");
                }
                drop(conn);
            });
        }
    }

    /// One connection: hello, route, dial, pump.
    pub async fn pass(&self, client: &mut TcpStream) -> Result<(), Refusal> {
        let mut buf = Vec::with_capacity(2048);
        let name = tokio::time::timeout(HELLO_TIMEOUT, async {
            loop {
                match sni::client_hello(&buf) {
                    Hello::Incomplete => {}
                    Hello::ServerName(n) => return Ok(n),
                    Hello::NoServerName => return Err(Refusal::NoServerName),
                    Hello::Invalid(why) => return Err(Refusal::Hello(why)),
                }
                let mut chunk = [0u8; 4096];
                let n = client.read(&mut chunk).await.map_err(Refusal::Io)?;
                if n == 0 {
                    return Err(Refusal::Hello("the client closed before its hello ended"));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .map_err(|_| Refusal::Timeout)??;
        let backend = self
            .routes
            .read()
            .map_err(|_| Refusal::Io(io::Error::other("routing table poisoned")))?
            .get(&name)
            .cloned()
            .ok_or_else(|| Refusal::UnknownName(name.clone()))?;
        let ns = self.netns_dir.join(&backend.netns);
        let addr = backend.addr;
        let dialed =
            tokio::task::spawn_blocking(move || crate::netns::connect(&ns, addr, DIAL_TIMEOUT))
                .await
                .map_err(|e| Refusal::Io(io::Error::other(e)))?
                .map_err(|e| Refusal::Dial(name.clone(), e))?;
        dialed.set_nonblocking(true).map_err(Refusal::Io)?;
        let mut upstream = TcpStream::from_std(dialed).map_err(Refusal::Io)?;
        upstream.write_all(&buf).await.map_err(Refusal::Io)?;
        self.metrics.bytes_up.inc_by(buf.len() as u64);
        tracing::debug!(%name, backend = %backend.addr, netns = %backend.netns, "passing through");
        let (up, down) = tokio::io::copy_bidirectional(client, &mut upstream)
            .await
            .unwrap_or((0, 0));
        self.metrics.bytes_up.inc_by(up);
        self.metrics.bytes_down.inc_by(down);
        Ok(())
    }
}

//! What startup refuses before it connects anywhere, in one place: the
//! conductor stops (exit 2) on the first, `magnum-conductor check` prints
//! every one as FAIL with its fix (exit 1). What needs a connection (the
//! database, the management cluster, its Leases, Keystone) has its own
//! check line doing what startup does.

use common::config::Config;

/// One reason startup would stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The check line's name.
    pub name: &'static str,
    pub detail: String,
    pub fix: &'static str,
}

/// Every refusal startup makes before connecting (empty: it goes on).
/// `check`: true for `magnum-conductor check`, which also tries the log
/// destination and the metrics port (startup finds those by using them)
/// and accepts a port a running conductor answers on.
pub fn refusals(cfg: &Config, check: bool) -> Vec<Refusal> {
    let mut out = Vec::new();
    if check && let Err(e) = crate::logging::check(&cfg.default) {
        out.push(Refusal {
            name: "logging",
            detail: e,
            fix: "make [DEFAULT] log_dir/log_file writable by the conductor's user, or unset \
                  them (use_journal needs systemd-journald's socket)",
        });
    }
    if let Err(e) = cfg.cert_manager.check() {
        out.push(Refusal {
            name: "certificates",
            detail: e.to_string(),
            fix: "set [certificates] cert_manager_type = x509keypair (Magnum's x509keypair \
                  table; Barbican is not supported)",
        });
    }
    if check
        && let Some(addr) = cfg.metrics.listen
        && let Err(e) = std::net::TcpListener::bind(addr)
        && !a_conductor_answers(addr)
    {
        out.push(Refusal {
            name: "metrics",
            detail: format!("cannot listen on [metrics] listen = {addr}: {e}"),
            fix: "choose a free address for [metrics] listen (another conductor on this host \
                  holds it?), or unset it",
        });
    }
    // Startup builds the cluster credentials once the management cluster
    // answers; a configured one must answer (or startup stops anyway).
    if cfg.capi.kubeconfig.is_some()
        && let Err(e) =
            crate::lifecycle::credentials::Credentials::from_opts(&cfg.capi, &cfg.keystone_auth)
    {
        out.push(Refusal {
            name: "credentials",
            detail: e.to_string(),
            fix: "fix [keystone_auth] (auth_url, user or application credential), or give \
                  [capi] static_auth_url and static_application_credential_id/_secret",
        });
    }
    out
}

/// Whether a magnum-conductor already serves `addr` (`check` run beside the
/// running service, before its restart: the port is then its own, not a
/// refusal). Anything else holding the port is one.
fn a_conductor_answers(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let t = std::time::Duration::from_secs(2);
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, t) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(t));
    if s.write_all(b"GET /healthz HTTP/1.0\r\nHost: check\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = Vec::new();
    let _ = s.take(4096).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.starts_with("HTTP/1.") && text.contains(" 200 ")
}

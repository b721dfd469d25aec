//! Two clusters whose tenant networks overlap (the API at 10.0.0.10:6443
//! in both), each in a network namespace named as Neutron's DHCP agent
//! names it (`qdhcp-<network id>`, or OVN's `ovnmeta-<network id>`), made by this test (root, `ip netns`).
//! Each cluster's API is a TLS server listening only inside its own
//! namespace, with a certificate for its own name from its own CA. Through
//! the proxy on loopback, a client that asks for a cluster by server name
//! completes the TLS handshake with that cluster (the proxy does not
//! terminate TLS: the client verifies the cluster's own CA) and reads
//! which one answered; an unknown name and a non-TLS client are refused;
//! a namespace that goes away makes a dial failure, not a hang.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, RwLock};

use capi_proxy::metrics::Metrics;
use capi_proxy::netns;
use capi_proxy::route::{Backend, Routes};
use capi_proxy::serve::Proxy;

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the ip command");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace of this test's own, removed when dropped.
struct Ns(String);

impl Ns {
    /// `qdhcp-<network>` (the DHCP agent's), or with `ovn` OVN's metadata
    /// agent's `ovnmeta-<network>`.
    fn new(ovn: bool) -> Ns {
        let prefix = if ovn { "ovnmeta-" } else { "qdhcp-" };
        let name = format!("{prefix}{}", uuid::Uuid::new_v4());
        ip(&["netns", "add", &name]);
        let ns = Ns(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
        ip(&["-n", &ns.0, "addr", "add", "10.0.0.10/32", "dev", "lo"]);
        ns
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A CA, and a server config for `name` it signed.
fn cluster_tls(
    name: &str,
) -> (
    rustls::pki_types::CertificateDer<'static>,
    Arc<rustls::ServerConfig>,
) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], der)
        .unwrap();
    (ca.der().clone(), Arc::new(config))
}

/// A cluster API inside `ns`: completes each handshake and says `who`.
fn backend(ns: &Ns, config: Arc<rustls::ServerConfig>, who: &'static str) {
    let listener = netns::listen(
        &Path::new(netns::NETNS_DIR).join(&ns.0),
        "10.0.0.10:6443".parse().unwrap(),
    )
    .expect("listen inside the namespace");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(server) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(server, conn);
                let _ = tls.write_all(who.as_bytes());
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
}

/// Dial the proxy asking for `name`, trusting `ca`: what the server said.
fn ask(
    proxy: SocketAddr,
    name: &str,
    ca: &rustls::pki_types::CertificateDer<'static>,
) -> std::io::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let tcp = TcpStream::connect(proxy)?;
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut out = String::new();
    tls.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn overlapping_networks_are_reached_by_server_name() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test makes network namespaces: run it as root (CI does)");
    }
    // Cluster B's network is OVN's: its namespace is the metadata agent's.
    let (a, b) = (Ns::new(false), Ns::new(true));
    let (ca_a, tls_a) = cluster_tls("cluster-a.magnum-system");
    let (ca_b, tls_b) = cluster_tls("cluster-b.magnum-system");
    backend(&a, tls_a, "cluster A");
    backend(&b, tls_b, "cluster B");

    let mut routes = Routes::new();
    for (name, ns) in [
        ("cluster-a.magnum-system", &a),
        ("cluster-b.magnum-system", &b),
    ] {
        routes.insert(
            name,
            Backend {
                netns: ns.0.clone(),
                addr: "10.0.0.10:6443".parse().unwrap(),
            },
        );
    }
    // A route whose namespace does not exist (a host without it).
    routes.insert(
        "cluster-c.magnum-system",
        Backend {
            netns: "qdhcp-missing".into(),
            addr: "10.0.0.10:6443".parse().unwrap(),
        },
    );
    let stats = Arc::new(Metrics::default());
    let proxy = Proxy {
        routes: Arc::new(RwLock::new(routes)),
        netns_dir: netns::NETNS_DIR.into(),
        metrics: stats.clone(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(proxy.serve(listener));

    // Each name reaches its own cluster, whose CA the client verifies.
    assert_eq!(
        ask(addr, "cluster-a.magnum-system", &ca_a).unwrap(),
        "cluster A"
    );
    assert_eq!(
        ask(addr, "cluster-b.magnum-system", &ca_b).unwrap(),
        "cluster B"
    );
    // The other cluster's CA does not verify it: TLS is the cluster's own.
    assert!(ask(addr, "cluster-a.magnum-system", &ca_b).is_err());

    // Refused: an unknown name, a namespace that is not on this host, a
    // client that does not speak TLS.
    assert!(ask(addr, "cluster-z.magnum-system", &ca_a).is_err());
    assert!(ask(addr, "cluster-c.magnum-system", &ca_a).is_err());
    let mut plain = TcpStream::connect(addr).unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: cluster-a\r\n\r\n")
        .unwrap();
    plain
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        plain.read_to_end(&mut rest).unwrap(),
        0,
        "closed without an answer"
    );

    // The counters saw it: 6 connections, one dial failure, 2 refusals
    // (the unknown name, the plain client; the handshake that failed
    // verification is not a refusal: it passed through).
    // Each refusal is counted before its connection closes, so every
    // count is in by the time the clients above saw their answer.
    assert_eq!(stats.connections.get(), 6);
    assert_eq!(stats.dial_failures.get(), 1);
    let refused = |r: &str| stats.refused.with_label_values(&[r]).get();
    assert_eq!(refused("unknown_name"), 1);
    assert_eq!(refused("not_tls"), 1);
    // The hello's bytes are counted before they are passed on (the bytes
    // that follow only when a connection ends).
    assert!(stats.bytes_up.get() > 0);

    // A namespace that goes away: the next dial fails fast.
    let gone = a.0.clone();
    drop(a);
    assert!(!Path::new(netns::NETNS_DIR).join(&gone).exists());
    assert!(ask(addr, "cluster-a.magnum-system", &ca_a).is_err());
    assert_eq!(
        netns::of_network(Path::new(netns::NETNS_DIR), &gone["qdhcp-".len()..]),
        None
    );
    assert_eq!(
        netns::of_network(Path::new(netns::NETNS_DIR), &b.0["ovnmeta-".len()..]),
        Some(b.0.clone())
    );
}

//! A cluster's tenant network on this host, for clusters without an API
//! floating IP (`--workload-netns`, I/O; needs root). What OpenStack has
//! on a network host, made with `ip`:
//!
//! - `qdhcp-<network id>`: the namespace Neutron's DHCP agent makes for a
//!   network it serves (`neutron/agent/linux/dhcp.py`, `NS_PREFIX =
//!   'qdhcp-'`), with a port on the network (here an address in the API's
//!   /24, `.2`, or `.3` when the API is `.2`);
//! - the API itself (the load balancer's VIP, or a control-plane
//!   machine) on the far end of that port: a namespace of its own,
//!   `capi-sim-vm-<hash>`, holding the VIP, so the workload apiserver
//!   listens only there and the host reaches it only through the network's
//!   namespace, as a network host reaches a tenant's VM.
//!
//! "Cutting the link" (tests) is `ip -n qdhcp-<net> link set <dev> down`.
//! Dropping a [`TenantNet`] deletes both namespaces (and the veth pair
//! with them).

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where `ip netns` names namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Where a cluster's API is in its tenant network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The Neutron network (names the `qdhcp-` namespace).
    pub network_id: String,
    /// The API's address in it.
    pub vip: Ipv4Addr,
}

/// The API's address in a subnet (pure): its `.10` (as the acceptance's
/// overlapping networks have it: 10.0.0.0/24 -> 10.0.0.10).
pub fn vip_of_cidr(cidr: &str) -> Option<Ipv4Addr> {
    let (net, len) = cidr.split_once('/')?;
    let net: Ipv4Addr = net.parse().ok()?;
    let len: u32 = len.parse().ok()?;
    if !(8..=29).contains(&len) {
        return None;
    }
    let base = u32::from(net) & (u32::MAX << (32 - len));
    Some(Ipv4Addr::from(base + 10))
}

/// The network host's own address on the network (pure): `.2` of the
/// API's /24, `.3` when the API is `.2`.
pub fn host_side(vip: Ipv4Addr) -> Ipv4Addr {
    let [a, b, c, d] = vip.octets();
    Ipv4Addr::new(a, b, c, if d == 2 { 3 } else { 2 })
}

/// Short, stable, interface-name-safe hash of a cluster (pure).
pub fn short(key: &(String, String)) -> String {
    let h = format!("{}/{}", key.0, key.1)
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{:08x}", h as u32)
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The two namespaces of one cluster.
#[derive(Debug)]
pub struct TenantNet {
    pub dhcp: String,
    pub vm: String,
    /// The network host's end of the link (in `dhcp`).
    pub dhcp_dev: String,
}

impl TenantNet {
    /// Make them (blocking). Leftovers of a killed run are replaced.
    pub fn create(key: &(String, String), p: &Placement) -> Result<TenantNet, String> {
        let h = short(key);
        let net = TenantNet {
            dhcp: format!("qdhcp-{}", p.network_id),
            vm: format!("capi-sim-vm-{h}"),
            dhcp_dev: format!("tapd{h}"),
        };
        let vm_dev = format!("tapv{h}");
        net.remove();
        ip(&["netns", "add", &net.dhcp])?;
        ip(&["netns", "add", &net.vm])?;
        ip(&[
            "link",
            "add",
            &net.dhcp_dev,
            "type",
            "veth",
            "peer",
            "name",
            &vm_dev,
        ])?;
        ip(&["link", "set", &net.dhcp_dev, "netns", &net.dhcp])?;
        ip(&["link", "set", &vm_dev, "netns", &net.vm])?;
        let host = format!("{}/24", host_side(p.vip));
        let vip = format!("{}/24", p.vip);
        for (ns, dev, addr) in [(&net.dhcp, &net.dhcp_dev, &host), (&net.vm, &vm_dev, &vip)] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    pub fn vm_path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.vm)
    }

    fn remove(&self) {
        for ns in [&self.dhcp, &self.vm] {
            if Path::new(NETNS_DIR).join(ns).exists() {
                let _ = ip(&["netns", "del", ns]);
            }
        }
    }
}

impl Drop for TenantNet {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Run `f` on a thread inside the namespace at `ns` (a socket made there
/// stays there).
pub fn within<T: Send + 'static>(
    ns: &Path,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let file = File::open(ns)?;
    std::thread::spawn(move || {
        // SAFETY: setns on an open namespace descriptor, this thread only.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

/// Accept on `listener` and pass each connection to what `dial` connects.
async fn pump<F>(listener: tokio::net::TcpListener, dial: F)
where
    F: Fn() -> io::Result<std::net::TcpStream> + Clone + Send + Sync + 'static,
{
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let dial = dial.clone();
        tokio::spawn(async move {
            let Ok(Ok(up)) = tokio::task::spawn_blocking(dial).await else {
                return;
            };
            if up.set_nonblocking(true).is_err() {
                return;
            }
            let Ok(mut up) = tokio::net::TcpStream::from_std(up) else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
        });
    }
}

/// `127.0.0.1:port` inside `ns` forwards to `target` on the host (the
/// workload apiserver's way to the management cluster's etcd).
pub fn forward_into_ns(
    ns: &Path,
    port: u16,
    target: SocketAddr,
) -> io::Result<tokio::task::JoinHandle<()>> {
    let l = within(ns, move || {
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
    })?;
    l.set_nonblocking(true)?;
    let l = tokio::net::TcpListener::from_std(l)?;
    Ok(tokio::spawn(pump(l, move || {
        std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_secs(5))
    })))
}

/// A free `127.0.0.1` port on the host forwards to `target` inside `ns`
/// (the kubelets' way in: they run on the cluster's network).
pub fn forward_out_of_ns(
    ns: &Path,
    target: SocketAddr,
) -> io::Result<(u16, tokio::task::JoinHandle<()>)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    l.set_nonblocking(true)?;
    let l = tokio::net::TcpListener::from_std(l)?;
    let ns = ns.to_path_buf();
    Ok((
        port,
        tokio::spawn(pump(l, move || {
            within(&ns, move || {
                std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_secs(5))
            })
        })),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_is_the_subnets_tenth_address_the_host_its_second() {
        assert_eq!(
            vip_of_cidr("10.0.0.0/24"),
            Some(Ipv4Addr::new(10, 0, 0, 10))
        );
        assert_eq!(
            vip_of_cidr("10.1.2.77/16"),
            Some(Ipv4Addr::new(10, 1, 0, 10))
        );
        assert_eq!(vip_of_cidr("10.0.0.0/30"), None);
        assert_eq!(vip_of_cidr("x"), None);
        assert_eq!(
            host_side(Ipv4Addr::new(10, 0, 0, 10)),
            Ipv4Addr::new(10, 0, 0, 2)
        );
        assert_eq!(
            host_side(Ipv4Addr::new(10, 0, 0, 2)),
            Ipv4Addr::new(10, 0, 0, 3)
        );
        let k = |n: &str| ("magnum-p".to_string(), n.to_string());
        assert_eq!(short(&k("a")).len(), 8);
        assert_ne!(short(&k("a")), short(&k("b")));
        // Interface names fit IFNAMSIZ (15).
        assert!(format!("tapd{}", short(&k("a"))).len() <= 15);
    }
}

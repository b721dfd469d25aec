//! Dialing inside a network namespace (I/O). A socket belongs to the
//! namespace of the thread that created it, for its whole life: a short
//! thread enters the namespace (`setns(2)` with `CLONE_NEWNET`, which
//! changes only the calling thread), creates and connects the socket, and
//! hands it back; the proxy's other threads never leave their own
//! namespace.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

/// Where `ip netns` (and Neutron's agents, through it) name namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Run `f` on a new thread that first enters the namespace at `ns`.
fn within<T: Send + 'static>(
    ns: &Path,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let file =
        File::open(ns).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", ns.display())))?;
    let shown = ns.display().to_string();
    std::thread::Builder::new()
        .name("netns-dial".into())
        .spawn(move || {
            // SAFETY: setns on an open namespace file descriptor, for this
            // thread only (CLONE_NEWNET); the thread ends right after.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("entering {shown}: {e}")));
            }
            f()
        })?
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// Connect to `addr` from inside the namespace at `ns`.
pub fn connect(ns: &Path, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    within(ns, move || TcpStream::connect_timeout(&addr, timeout))
}

/// Listen on `addr` inside the namespace at `ns` (tests: a backend that
/// only that namespace reaches).
pub fn listen(ns: &Path, addr: SocketAddr) -> io::Result<TcpListener> {
    within(ns, move || TcpListener::bind(addr))
}

/// The namespace of a Neutron network on this host: the DHCP agent's
/// `qdhcp-<network>` (ML2/OVS, Linux bridge) or OVN's metadata agent's
/// `ovnmeta-<network>`, whichever exists (names as `neutron/agent/dhcp`
/// and `neutron/agent/ovn/metadata/agent.py` make them).
pub fn of_network(dir: &Path, network_id: &str) -> Option<String> {
    ["qdhcp-", "ovnmeta-"]
        .iter()
        .map(|p| format!("{p}{network_id}"))
        .find(|n| dir.join(n).exists())
}

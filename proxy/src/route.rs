//! The routing table: server name -> where that cluster's API listens
//! (a network namespace on this host and an address inside it). Pure.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Where a cluster's API is reached from this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The network namespace's name (under `/run/netns`).
    pub netns: String,
    /// The API endpoint inside it (the API load balancer's internal
    /// address, or a control-plane machine's).
    pub addr: SocketAddr,
}

/// Server name (lowercase) -> backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes(BTreeMap<String, Backend>);

impl Routes {
    pub fn new() -> Routes {
        Routes::default()
    }

    pub fn insert(&mut self, name: &str, backend: Backend) {
        self.0.insert(name.to_ascii_lowercase(), backend);
    }

    pub fn remove(&mut self, name: &str) -> Option<Backend> {
        self.0.remove(&name.to_ascii_lowercase())
    }

    /// The backend of a (lowercased) server name.
    pub fn get(&self, name: &str) -> Option<&Backend> {
        self.0.get(name)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `NAME=NETNS@ADDR` (the binary's `--route`): one route.
pub fn parse(spec: &str) -> Result<(String, Backend), String> {
    let (name, rest) = spec
        .split_once('=')
        .ok_or_else(|| format!("{spec:?}: expected NAME=NETNS@ADDRESS:PORT"))?;
    let (netns, addr) = rest
        .split_once('@')
        .ok_or_else(|| format!("{spec:?}: expected NAME=NETNS@ADDRESS:PORT"))?;
    if name.is_empty() || netns.is_empty() || netns.contains('/') || netns.starts_with('.') {
        return Err(format!(
            "{spec:?}: empty name or a namespace that is not a plain name"
        ));
    }
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| format!("{spec:?}: {addr:?} is not ADDRESS:PORT ({e})"))?;
    Ok((
        name.to_ascii_lowercase(),
        Backend {
            netns: netns.to_string(),
            addr,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_found_by_lowercase_name() {
        let (name, b) = parse("Cluster-A.magnum-system=qdhcp-1234@10.0.0.10:6443").unwrap();
        assert_eq!(name, "cluster-a.magnum-system");
        assert_eq!(b.netns, "qdhcp-1234");
        assert_eq!(b.addr, "10.0.0.10:6443".parse().unwrap());
        let mut r = Routes::new();
        r.insert(&name, b.clone());
        assert_eq!(r.get("cluster-a.magnum-system"), Some(&b));
        assert_eq!(r.get("cluster-b.magnum-system"), None);
        assert_eq!(r.remove("CLUSTER-A.magnum-system"), Some(b));
        assert!(r.is_empty());
    }

    #[test]
    fn bad_routes_say_why() {
        for bad in [
            "a=ns",
            "a@1.2.3.4:5",
            "=ns@1.2.3.4:5",
            "a=../etc@1.2.3.4:5",
            "a=ns@1.2.3.4",
            "a=ns@host:5",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}

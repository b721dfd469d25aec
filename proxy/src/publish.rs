//! What a proxy host publishes in the management cluster (pure): one
//! EndpointSlice per cluster it reaches, for the conductor's Service, and
//! its Lease; and which slices of other hosts are stale.
//!
//! - A slice points at this host (`--advertise-address`, the proxy's
//!   port), its port named as the Service's (`https`: kube-proxy matches
//!   a selector-less Service's ports to its slices' ports by name); it is
//!   owned by the Service, so it goes with the cluster.
//! - `endpointslice.kubernetes.io/managed-by` is the proxy's: the
//!   EndpointSlice controller only manages slices of Services with a
//!   selector, and only its own (`pkg/controller/endpointslice`,
//!   `managedByController`).
//! - A host renews its Lease every `renew` seconds; a slice whose host's
//!   Lease is missing or expired (renewTime + leaseDurationSeconds, plus
//!   a grace for clock skew) is deleted by any proxy that sees it, so a
//!   host that died without withdrawing its slices stops attracting
//!   connections within that bound.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use common::api_proxy;

use crate::plan::ServiceRef;

/// `kubernetes.io/service-name`.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// `endpointslice.kubernetes.io/managed-by`.
pub const MANAGED_BY_LABEL: &str = common::api_proxy::MANAGED_BY_LABEL;

/// The EndpointSlice host `host` (its Lease in `lease_namespace`)
/// publishes for `svc`: it reaches the cluster at `advertise`.
pub fn slice(svc: &ServiceRef, host: &str, lease_namespace: &str, advertise: SocketAddr) -> Value {
    let family = match advertise.ip() {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    };
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": api_proxy::slice_name(&svc.name, host),
            "namespace": svc.namespace,
            "labels": {
                SERVICE_NAME_LABEL: svc.name,
                MANAGED_BY_LABEL: api_proxy::MANAGED_BY,
                api_proxy::HOST_LABEL: host,
                api_proxy::LEASE_NAMESPACE_LABEL: lease_namespace,
                // The conductor's status watch finds a cluster's objects by it.
                "cluster.x-k8s.io/cluster-name": svc.cluster,
            },
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": svc.name, "uid": svc.uid}],
        },
        "addressType": family,
        "endpoints": [{"addresses": [advertise.ip().to_string()],
                       "conditions": {"ready": true, "serving": true, "terminating": false}}],
        "ports": [{"name": "https", "port": advertise.port(), "protocol": "TCP"}],
    })
}

/// The Lease of `host`, renewed now.
pub fn lease(host: &str, namespace: &str, duration_s: u32, now: DateTime<Utc>) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": api_proxy::lease_name(host), "namespace": namespace,
                     "labels": {api_proxy::HOST_LABEL: host}},
        "spec": {"holderIdentity": host, "leaseDurationSeconds": duration_s,
                 "renewTime": now.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
    })
}

/// A proxy slice: (namespace, name, host, the namespace of its host's Lease).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SliceRef {
    pub namespace: String,
    pub name: String,
    pub host: String,
    pub lease_namespace: String,
}

impl SliceRef {
    pub fn of(slice: &Value) -> Option<SliceRef> {
        let labels = slice.pointer("/metadata/labels")?;
        if labels.get(MANAGED_BY_LABEL)?.as_str()? != api_proxy::MANAGED_BY {
            return None;
        }
        Some(SliceRef {
            namespace: slice.pointer("/metadata/namespace")?.as_str()?.to_string(),
            name: slice.pointer("/metadata/name")?.as_str()?.to_string(),
            host: labels.get(api_proxy::HOST_LABEL)?.as_str()?.to_string(),
            lease_namespace: labels
                .get(api_proxy::LEASE_NAMESPACE_LABEL)
                .and_then(Value::as_str)
                .unwrap_or(api_proxy::DEFAULT_LEASE_NAMESPACE)
                .to_string(),
        })
    }
}

/// Other hosts' slices whose host is not alive at `now` (no Lease in
/// `lease_namespace`, or expired more than `grace` ago), among the slices
/// kept by Leases in that namespace only (`alive` holds its Leases): a
/// slice of another lease namespace's fleet is never this host's to judge.
/// This host's own slices are never stale here: it withdraws them itself.
pub fn stale(
    slices: &[SliceRef],
    alive: &BTreeMap<String, DateTime<Utc>>,
    me: &str,
    lease_namespace: &str,
    now: DateTime<Utc>,
    grace: chrono::Duration,
) -> Vec<SliceRef> {
    slices
        .iter()
        .filter(|s| s.host != me && s.lease_namespace == lease_namespace)
        .filter(|s| alive.get(&s.host).is_none_or(|until| *until + grace < now))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> ServiceRef {
        ServiceRef {
            namespace: "magnum-p".into(),
            name: "k1-apiserver".into(),
            uid: "u1".into(),
            cluster: "k1".into(),
        }
    }

    #[test]
    fn a_slice_names_this_host_and_the_services_port_name() {
        let s = slice(
            &svc(),
            "net-1",
            "magnum-system",
            "192.0.2.5:7443".parse().unwrap(),
        );
        assert_eq!(s["metadata"]["name"], "k1-apiserver-net-1");
        assert_eq!(s["metadata"]["labels"][SERVICE_NAME_LABEL], "k1-apiserver");
        assert_eq!(s["metadata"]["labels"][api_proxy::HOST_LABEL], "net-1");
        assert_eq!(
            s["metadata"]["labels"][api_proxy::LEASE_NAMESPACE_LABEL],
            "magnum-system"
        );
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(s["addressType"], "IPv4");
        assert_eq!(s["endpoints"][0]["addresses"][0], "192.0.2.5");
        assert_eq!(
            s["ports"][0],
            json!({"name": "https", "port": 7443, "protocol": "TCP"})
        );
        assert_eq!(
            SliceRef::of(&s),
            Some(SliceRef {
                namespace: "magnum-p".into(),
                name: "k1-apiserver-net-1".into(),
                host: "net-1".into(),
                lease_namespace: "magnum-system".into(),
            })
        );
        // A slice from before the label: the default lease namespace's.
        let mut old = s.clone();
        old["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(api_proxy::LEASE_NAMESPACE_LABEL);
        assert_eq!(
            SliceRef::of(&old).unwrap().lease_namespace,
            api_proxy::DEFAULT_LEASE_NAMESPACE
        );
        let v6 = slice(
            &svc(),
            "net-1",
            "magnum-system",
            "[2001:db8::5]:6443".parse().unwrap(),
        );
        assert_eq!(v6["addressType"], "IPv6");
        // Another manager's slice is not ours.
        let mut other = s.clone();
        other["metadata"]["labels"][MANAGED_BY_LABEL] = json!("endpointslice-controller.k8s.io");
        assert_eq!(SliceRef::of(&other), None);
    }

    #[test]
    fn slices_of_hosts_whose_lease_expired_are_stale_never_our_own() {
        let now = Utc::now();
        let l = lease(
            "net-2",
            "magnum-system",
            30,
            now - chrono::Duration::seconds(100),
        );
        let (host, until) = api_proxy::lease_alive_until(&l).unwrap();
        assert_eq!(host, "net-2");
        let alive: BTreeMap<String, DateTime<Utc>> = [
            (host, until),
            ("net-3".to_string(), now + chrono::Duration::seconds(20)),
        ]
        .into();
        let s = |h: &str| SliceRef {
            namespace: "magnum-p".into(),
            name: format!("k1-apiserver-{h}"),
            host: h.into(),
            lease_namespace: "magnum-system".into(),
        };
        let grace = chrono::Duration::seconds(5);
        let all = [s("net-1"), s("net-2"), s("net-3"), s("net-4")];
        let got = stale(&all, &alive, "net-1", "magnum-system", now, grace);
        assert_eq!(got, [s("net-2"), s("net-4")]);
        // Within the grace, not yet.
        let got = stale(&all, &alive, "net-1", "magnum-system", until, grace);
        assert_eq!(got, [s("net-4")]);
        // Another fleet's slices (its Leases in another namespace, which
        // this host does not watch): never this host's to delete.
        let mut other = s("net-9");
        other.lease_namespace = "magnum-system-b".into();
        let got = stale(&[other], &alive, "net-1", "magnum-system", now, grace);
        assert!(got.is_empty(), "{got:?}");
    }
}

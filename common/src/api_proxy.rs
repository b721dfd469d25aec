//! The contract between the conductor and `magnum-capi-proxy` (issue 31):
//! how a cluster without an API floating IP is published in the
//! management cluster, and the name CAPI's controllers dial it by. Pure.
//!
//! - The conductor creates, owned by the CAPI Cluster, a selector-less
//!   Service [`service_name`] in the cluster's namespace labelled
//!   [`SERVICE_LABEL`]`=<CAPI cluster name>`, and writes the cluster's
//!   `<cluster>-kubeconfig` Secret with [`server_url`] before CAPI does
//!   (KCP adopts a Secret of type `cluster.x-k8s.io/secret` and keeps its
//!   server on rotation: `controlplane/kubeadm/.../helpers.go`,
//!   `reconcileKubeconfig`; `util/kubeconfig/kubeconfig.go`,
//!   `RegenerateSecret`). The API server's certificate names
//!   [`server_name`] (certSANs from the create on).
//! - Each proxy host that reaches the cluster's API from its network
//!   namespace publishes one EndpointSlice for that Service
//!   ([`slice_name`], labels [`HOST_LABEL`] and the managed-by
//!   [`MANAGED_BY`]) and renews its Lease ([`lease_name`]); a slice whose
//!   host's Lease expired is deleted by any other proxy.
//! - Only clusters with that Service are served: another driver's
//!   clusters, which have none, are never touched.

/// The label on the conductor's Service; its value is the CAPI cluster.
pub const SERVICE_LABEL: &str = "magnum.openstack.org/api-proxy";
/// The label on a proxy host's EndpointSlices: the host.
pub const HOST_LABEL: &str = "magnum.openstack.org/api-proxy-host";
/// The label on a proxy host's EndpointSlices: the namespace of the Lease
/// that keeps them (`--lease-namespace`). A proxy deletes another host's
/// slices only when they name its own lease namespace: two proxy fleets
/// with different lease namespaces cannot see each other's Leases.
pub const LEASE_NAMESPACE_LABEL: &str = "magnum.openstack.org/api-proxy-lease-namespace";
/// The lease namespace of a slice without [`LEASE_NAMESPACE_LABEL`]
/// (written before the label existed): the default `--lease-namespace`.
pub const DEFAULT_LEASE_NAMESPACE: &str = "magnum-system";
/// The EndpointSlice label naming the slice's manager.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// [`MANAGED_BY_LABEL`] of the proxy's slices (the
/// EndpointSlice controller leaves slices of other managers alone).
pub const MANAGED_BY: &str = "magnum-capi-proxy.openstack.org";
/// The Service's port (the slices carry each proxy's own port).
pub const PORT: u16 = 6443;

/// At most 63 characters, no trailing `-`.
fn cut(mut s: String) -> String {
    s.truncate(63);
    s.trim_end_matches('-').to_string()
}

/// The Service of CAPI cluster `cluster` (a DNS-1035 label as the cluster's
/// own name is).
pub fn service_name(cluster: &str) -> String {
    cut(format!("{cluster}-apiserver"))
}

/// The name CAPI's controllers dial (the Service's DNS name without the
/// cluster domain: resolved by the management cluster's DNS from any
/// namespace), the TLS server name the proxy routes by.
pub fn server_name(cluster: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", service_name(cluster))
}

/// The kubeconfig server of such a cluster.
pub fn server_url(cluster: &str, namespace: &str) -> String {
    format!("https://{}:{PORT}", server_name(cluster, namespace))
}

/// The EndpointSlice a proxy host publishes for a Service.
pub fn slice_name(service: &str, host: &str) -> String {
    // Service names and host names are each up to 63 characters: keep the
    // host whole where possible, and a hash when cut, so two hosts never
    // share a slice.
    let full = format!("{service}-{host}");
    if full.len() <= 63 {
        return full;
    }
    let hash = fnv(&full);
    cut(format!("{}-{hash:08x}", &full[..54]))
}

/// A proxy host's Lease.
pub fn lease_name(host: &str) -> String {
    let full = format!("magnum-capi-proxy-{host}");
    if full.len() <= 63 {
        return full;
    }
    cut(format!("{}-{:08x}", &full[..54], fnv(&full)))
}

/// Whether an EndpointSlice (JSON) has an endpoint ready to take
/// connections (a missing `ready` counts as ready, as kube-proxy reads it).
pub fn slice_ready(slice: &serde_json::Value) -> bool {
    slice
        .pointer("/endpoints")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|es| {
            es.iter()
                .any(|e| e.pointer("/conditions/ready") != Some(&serde_json::Value::Bool(false)))
        })
}

/// A proxy host's Lease (JSON): the host and until when it is alive
/// (`renewTime` + `leaseDurationSeconds`).
pub fn lease_alive_until(
    lease: &serde_json::Value,
) -> Option<(String, chrono::DateTime<chrono::Utc>)> {
    let host = lease.pointer("/spec/holderIdentity")?.as_str()?.to_string();
    let renew = lease.pointer("/spec/renewTime")?.as_str()?;
    let renew = chrono::DateTime::parse_from_rfc3339(renew)
        .ok()?
        .with_timezone(&chrono::Utc);
    let secs = lease.pointer("/spec/leaseDurationSeconds")?.as_i64()?;
    Some((host, renew + chrono::Duration::seconds(secs)))
}

fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_kubernetes_limits_and_stay_distinct() {
        assert_eq!(service_name("k1-abc"), "k1-abc-apiserver");
        assert_eq!(
            server_url("k1-abc", "magnum-p1"),
            "https://k1-abc-apiserver.magnum-p1.svc:6443"
        );
        let long = "k".repeat(60);
        assert!(service_name(&long).len() <= 63);
        let (a, b) = (
            slice_name(&service_name(&long), "network-host-1"),
            slice_name(&service_name(&long), "network-host-2"),
        );
        assert!(a.len() <= 63 && b.len() <= 63);
        assert_ne!(a, b);
        assert_eq!(slice_name("s", "h1"), "s-h1");
        assert!(lease_name(&"h".repeat(70)).len() <= 63);
        assert_eq!(lease_name("h1"), "magnum-capi-proxy-h1");
    }
}

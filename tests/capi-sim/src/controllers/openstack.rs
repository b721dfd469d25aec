//! OpenStackCluster, as CAPO 0.12/0.14 reconciles it
//! (`controllers/openstackcluster_controller.go`): nothing until the
//! Cluster controller made the Cluster its owner (`util.GetOwnerCluster`:
//! "Cluster Controller has not yet set OwnerRef"); then the finalizer, the
//! network, router and API load balancer in `status`, the control-plane
//! endpoint, and `status.ready` (`reconcileNormal`). A fatal error sets
//! `failureReason`/`failureMessage` (`handleUpdateOSCError`, isFatal).
//! Simulated: no OpenStack; the resources get made-up ids, the load
//! balancer the address 203.0.113.10, or, with `--workload-apiservers`, the
//! address of the cluster's real apiserver ([`crate::workload`]): until
//! that one is ready the cluster waits, as CAPO waits for its load balancer
//! to be ACTIVE before it sets the endpoint (`reconcileNetworkComponents` ->
//! `reconcileAPILoadBalancer`). Fault: the annotation
//! `capi-sim/fail-reason` on the object or its Namespace fails it with that
//! message (e.g. a quota error).

use serde_json::{Value, json};

use super::Ctx;
use crate::kinds::Kind;
use crate::obj::{FAIL, annotation, deleting, meta, name, namespace, owner_refs, short_hash};

const FINALIZER: &str = "openstackcluster.infrastructure.cluster.x-k8s.io";

pub fn reconcile(c: &mut Ctx<'_>, cur: Value) {
    let mut next = cur.clone();
    if deleting(&cur) {
        c.drop_finalizer(&mut next, FINALIZER);
        c.write(Kind::OpenStackCluster, &cur, next);
        return;
    }
    let owned = owner_refs(&cur).iter().any(|r| {
        r["kind"] == "Cluster"
            && r["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with("cluster.x-k8s.io/"))
    });
    if !owned {
        return;
    }
    c.ensure_finalizer(&mut next, FINALIZER);
    let n = name(&cur).to_string();
    let ns_reason = c.ns_annotation(namespace(&cur), FAIL);
    if let Some(reason) = annotation(&cur, FAIL).map(str::to_string).or(ns_reason) {
        next["status"] =
            json!({"ready": false, "failureReason": "UpdateError", "failureMessage": reason});
    } else if cur.pointer("/status/ready") != Some(&json!(true)) {
        let (host, port) = match &c.endpoints {
            None => ("203.0.113.10".to_string(), 6443),
            Some(ready) => {
                let cluster = cluster_name(&cur).unwrap_or_else(|| n.clone());
                match ready.get(&(namespace(&cur).to_string(), cluster)) {
                    Some((h, p)) => (h.clone(), *p),
                    // Its apiserver is still starting: looked at again
                    // once it is ready.
                    None => {
                        c.write(Kind::OpenStackCluster, &cur, next);
                        return;
                    }
                }
            }
        };
        // Made-up ids, shaped as Neutron's and Octavia's (UUIDs).
        let uid = meta(&cur, "uid").unwrap_or_default();
        let id = |what: &str| made_up_uuid(&format!("{uid}/{what}"));
        next["status"] = json!({
            "ready": true,
            "network": {"id": id("network"), "name": format!("k8s-clusterapi-cluster-{n}")},
            "router": {"id": id("router"), "name": format!("k8s-clusterapi-cluster-{n}")},
            "apiServerLoadBalancer": {"id": id("loadbalancer"), "name": format!("k8s-clusterapi-cluster-{n}-kubeapi"),
                                      "ip": host, "internalIP": "10.6.0.10"},
        });
        if next.pointer("/spec/controlPlaneEndpoint/host").is_none() {
            next["spec"]["controlPlaneEndpoint"] = json!({"host": host, "port": port});
        }
    }
    c.write(Kind::OpenStackCluster, &cur, next);
}

/// A UUID (version 4 shape) that follows from `seed`.
fn made_up_uuid(seed: &str) -> String {
    let h: String = (0..4)
        .map(|i| short_hash(&json!(format!("{seed}#{i}"))))
        .collect::<String>();
    let h = h.as_bytes();
    let s = |r: std::ops::Range<usize>| String::from_utf8_lossy(&h[r]).to_string();
    format!(
        "{}-{}-4{}-8{}-{}",
        s(0..8),
        s(8..12),
        s(12..15),
        s(15..18),
        s(18..30)
    )
}

/// The Cluster it belongs to (CAPI's label, else its owner).
fn cluster_name(o: &Value) -> Option<String> {
    o.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            owner_refs(o)
                .iter()
                .find(|r| r["kind"] == "Cluster")
                .and_then(|r| r["name"].as_str())
                .map(str::to_string)
        })
}

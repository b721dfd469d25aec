//! OpenStackCluster, as CAPO 0.12/0.14 reconciles it
//! (`controllers/openstackcluster_controller.go`): nothing until the
//! Cluster controller made the Cluster its owner (`util.GetOwnerCluster`:
//! "Cluster Controller has not yet set OwnerRef"); then the finalizer, the
//! network, router and API load balancer in `status`, the control-plane
//! endpoint, and `status.ready` (`reconcileNormal`). A fatal error sets
//! `failureReason`/`failureMessage` (`handleUpdateOSCError`, isFatal).
//! With `--openstack` ([`crate::cloud`]) the network, subnet, router,
//! security groups and API load balancer are made in the real Neutron and
//! Octavia of the tests: `status` names them once made, and on delete the
//! finalizer goes only once they are gone (Neutron's 409 on a network that
//! still has a port keeps it, as it keeps CAPO's). Without it: no
//! OpenStack; the resources get made-up ids, the load balancer the address
//! 203.0.113.10. The endpoint is that address or, with `--workload-apiservers`, the
//! address of the cluster's real apiserver ([`crate::workload`]): until
//! that one is ready the cluster waits, as CAPO waits for its load balancer
//! to be ACTIVE before it sets the endpoint (`reconcileNetworkComponents` ->
//! `reconcileAPILoadBalancer`). Fault: the annotation
//! `capi-sim/fail-reason` on the object or its Namespace fails it with that
//! message (e.g. a quota error).

use serde_json::{Value, json};

use super::Ctx;
use crate::cloud::Infra;
use crate::kinds::Kind;
use crate::obj::{FAIL, annotation, deleting, meta, name, namespace, owner_refs, short_hash};

const FINALIZER: &str = "openstackcluster.infrastructure.cluster.x-k8s.io";

pub fn reconcile(c: &mut Ctx<'_>, cur: Value) {
    let mut next = cur.clone();
    let key = (
        namespace(&cur).to_string(),
        cluster_name(&cur).unwrap_or_else(|| name(&cur).to_string()),
    );
    let cloud = c.infra.as_ref().map(|i| i.get(&key).cloned());
    if deleting(&cur) {
        // With a cloud: only once CAPO's resources are gone.
        if matches!(cloud, None | Some(Some(Infra::Gone))) {
            c.drop_finalizer(&mut next, FINALIZER);
            c.write(Kind::OpenStackCluster, &cur, next);
        }
        return;
    }
    if !owned(&cur) {
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
        // CAPO's names (`names.ClusterResourceName`: the Cluster's
        // namespace and name).
        let r = format!("k8s-clusterapi-cluster-{}-{}", key.0, key.1);
        next["status"] = match cloud {
            None => {
                // Made-up ids, shaped as Neutron's and Octavia's (UUIDs).
                let uid = meta(&cur, "uid").unwrap_or_default();
                let id = |what: &str| made_up_uuid(&format!("{uid}/{what}"));
                // Without a floating IP the load balancer's address is its
                // VIP in the tenant network (the endpoint).
                let internal = if no_floating_ip(&cur) {
                    host.clone()
                } else {
                    "10.6.0.10".to_string()
                };
                json!({
                    "ready": true,
                    "network": {"id": id("network"), "name": r},
                    "router": {"id": id("router"), "name": r},
                    "apiServerLoadBalancer": {"id": id("loadbalancer"), "name": format!("{r}-kubeapi"),
                                              "ip": host, "internalIP": internal},
                })
            }
            Some(Some(Infra::Ready(made))) => {
                let mut st = json!({
                    "ready": true,
                    "network": {"id": made.network.0, "name": made.network.1,
                                "subnets": [{"id": made.subnet, "name": made.network.1, "cidr": made.cidr}]},
                });
                if let Some((id, name)) = &made.router {
                    st["router"] = json!({"id": id, "name": name});
                }
                if let Some((id, name, vip, fip)) = &made.lb {
                    st["apiServerLoadBalancer"] = json!({"id": id, "name": name,
                        "ip": fip.clone().unwrap_or_else(|| vip.clone()), "internalIP": vip});
                }
                st
            }
            // Still being made: looked at again when it is.
            Some(_) => {
                c.write(Kind::OpenStackCluster, &cur, next);
                return;
            }
        };
        if next.pointer("/spec/controlPlaneEndpoint/host").is_none() {
            next["spec"]["controlPlaneEndpoint"] = json!({"host": host, "port": port});
        }
    }
    c.write(Kind::OpenStackCluster, &cur, next);
}

fn no_floating_ip(o: &Value) -> bool {
    o.pointer("/spec/disableAPIServerFloatingIP") == Some(&json!(true))
}

/// Where the cluster's API is, for `--workload-netns`
/// ([`crate::workload::Workloads::place`]): None while not known yet;
/// `Some(None)` on the host (it has a floating IP, or no load balancer);
/// `Some(Some(_))` in its tenant network: the network this reconciler
/// reports in `status.network.id` and the load balancer's VIP (from the
/// cloud when there is one, `cloud`; otherwise the made-up network and the
/// `.10` of the first managed subnet).
pub fn placement(
    o: &Value,
    cloud: Option<Option<&Infra>>,
) -> Option<Option<crate::tenant::Placement>> {
    if !no_floating_ip(o) {
        return Some(None);
    }
    if !owned(o) {
        return None;
    }
    match cloud {
        None => {
            let uid = meta(o, "uid").unwrap_or_default();
            let vip = o
                .pointer("/spec/managedSubnets/0/cidr")
                .and_then(Value::as_str)
                .and_then(crate::tenant::vip_of_cidr)
                .unwrap_or(std::net::Ipv4Addr::new(10, 0, 0, 10));
            Some(Some(crate::tenant::Placement {
                network_id: made_up_uuid(&format!("{uid}/network")),
                vip,
            }))
        }
        Some(Some(Infra::Ready(made))) => Some(match &made.lb {
            Some((_, _, vip, _)) => vip.parse().ok().map(|vip| crate::tenant::Placement {
                network_id: made.network.0.clone(),
                vip,
            }),
            None => None,
        }),
        Some(_) => None,
    }
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

/// Whether CAPI's Cluster controller made the Cluster its owner (CAPO does
/// nothing before: `util.GetOwnerCluster`).
pub fn owned(o: &Value) -> bool {
    owner_refs(o).iter().any(|r| {
        r["kind"] == "Cluster"
            && r["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with("cluster.x-k8s.io/"))
    })
}

/// The Cluster it belongs to (CAPI's label, else its owner).
pub fn cluster_name(o: &Value) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cache::Cache;
    use crate::cloud::Made;
    use crate::controllers::Action;
    use crate::kinds::Line;

    fn osc(deleting: bool) -> Value {
        let mut o = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": "c1", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
                         "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                         "finalizers": [FINALIZER, "magnum.openstack.org/cloud-cleanup"],
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                                              "name": "c1", "uid": "x"}]},
            "spec": {}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
        }
        o
    }

    fn run(o: Value, infra: Option<Infra>) -> Vec<Action> {
        let cache = Cache::default();
        let mut c = Ctx::new(&cache, Line::V1beta1);
        let key = ("ns".to_string(), "c1".to_string());
        c.infra = Some(
            infra
                .into_iter()
                .map(|i| (key.clone(), i))
                .collect::<BTreeMap<_, _>>(),
        );
        reconcile(&mut c, o);
        c.actions
    }

    fn status_of(a: &[Action]) -> Option<Value> {
        a.iter().find_map(|x| match x {
            Action::Patch {
                patch,
                status: true,
                ..
            } => Some(patch["status"].clone()),
            _ => None,
        })
    }

    #[test]
    fn with_a_cloud_status_names_what_neutron_made_and_only_then() {
        // Not made yet: not ready.
        assert_eq!(
            status_of(&run(osc(false), Some(Infra::Building(None)))),
            None
        );
        let made = Made {
            network: ("net-id".into(), "k8s-clusterapi-cluster-ns-c1".into()),
            subnet: "sub-id".into(),
            cidr: "10.6.0.0/24".into(),
            router: Some(("r-id".into(), "k8s-clusterapi-cluster-ns-c1".into())),
            lb: Some((
                "lb-id".into(),
                "k8s-clusterapi-cluster-ns-c1-kubeapi".into(),
                "10.6.0.5".into(),
                Some("172.24.4.9".into()),
            )),
        };
        let st = status_of(&run(osc(false), Some(Infra::Ready(Box::new(made))))).unwrap();
        assert_eq!(st["ready"], true);
        assert_eq!(st["network"]["id"], "net-id");
        assert_eq!(st["network"]["subnets"][0]["id"], "sub-id");
        assert_eq!(st["apiServerLoadBalancer"]["ip"], "172.24.4.9");
        assert_eq!(st["apiServerLoadBalancer"]["internalIP"], "10.6.0.5");
    }

    #[test]
    fn with_a_cloud_the_finalizer_waits_for_neutron() {
        // Neutron refused the network (a port is still on it): kept.
        let waiting = Infra::Deleting(Some("409 NetworkInUse".into()));
        assert!(run(osc(true), Some(waiting)).is_empty());
        // Gone: CAPO's finalizer goes, ours stays for the conductor.
        let a = run(osc(true), Some(Infra::Gone));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::Patch { patch, status: false, .. }
            if patch["metadata"]["finalizers"] == json!(["magnum.openstack.org/cloud-cleanup"]))),
            "{a:?}"
        );
    }
}

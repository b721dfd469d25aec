//! Machine (cluster-api v1.10 `internal/controllers/machine`), with what
//! CAPO's OpenStackMachine controller and kubeadm would contribute:
//!
//! - the infrastructure machine gets the Machine as controller owner, loses
//!   the owner it was created with (MachineSet or control plane), and gets
//!   the cluster-name label (`machine_controller_phases.go`
//!   `ensureExternalOwnershipAndWatch`, `removeOnCreateOwnerRefs`);
//! - phases Pending -> Provisioning (bootstrap data: once the Cluster's
//!   infrastructure is ready, and for workers once the control plane is
//!   initialized, as kubeadm join needs) -> Provisioned (the server: a
//!   providerID and an address, `reconcileInfrastructure`) -> Running (a
//!   node: `nodeRef` and `nodeInfo`, `machine_controller_noderef.go`), one
//!   step per pass; conditions say what it waits for (types and reasons
//!   are CAPI's and CAPO's, messages the simulator's own);
//! - deletion: one pass draining (phase Deleting), then the infrastructure
//!   machine is deleted, then the finalizer goes (`reconcileDelete`).
//!
//! Addresses: one subnet per cluster (CAPO makes a network, subnet and
//! router per OpenStackCluster with `managedSubnets`); a new server gets the
//! first free address derived from its id, never one a Machine of the
//! cluster holds. Fault: `capi-sim/never-ready` on the Machine or its
//! Namespace keeps it Provisioning.

use serde_json::{Value, json};

use super::{Ctx, cp_initialized, infra_provisioned};
use crate::kinds::Kind;
use crate::obj::{
    CLUSTER_LABEL, CP_LABEL, NEVER_READY, annotation, deleting, has_exact_owner_ref,
    keep_transition_times, label, meta, name, namespace, owner_ref, owner_refs, short_hash,
};

const FINALIZER: &str = "machine.cluster.x-k8s.io";

/// A fixed IP for a new server of `cluster`: derived from its id, moved on
/// until no Machine of the cluster holds it (Neutron never gives two ports
/// of one subnet the same address).
fn free_address(c: &Ctx<'_>, ns: &str, cluster: &str, server: &str) -> String {
    let taken: std::collections::HashSet<String> = c
        .cache
        .labelled(Kind::Machine, ns, &[(CLUSTER_LABEL, cluster)])
        .iter()
        .filter_map(|m| {
            m.pointer("/status/addresses")
                .and_then(Value::as_array)
                .cloned()
        })
        .flatten()
        .filter_map(|a| a.get("address").and_then(Value::as_str).map(str::to_string))
        .collect();
    let start = u64::from_str_radix(&server[..4.min(server.len())], 16).unwrap_or(0);
    // 10.6.0.10 is the load balancer's VIP (openstack.rs); ports start at .20.
    (0..50_000u64)
        .map(|i| {
            let h = (start + i) % 50_000;
            format!("10.6.{}.{}", h / 230, 20 + h % 230)
        })
        .find(|a| !taken.contains(a))
        .unwrap_or_else(|| "10.6.255.255".to_string())
}

/// The Machine takes over its infrastructure machine.
fn own_infrastructure(c: &mut Ctx<'_>, m: &Value, osm: &Value) {
    let desired = owner_ref(m, true);
    let cluster = m
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let refs = owner_refs(osm);
    let on_create = |r: &Value| {
        let api = r["apiVersion"].as_str().unwrap_or("");
        (r["kind"] == "MachineSet" && api.starts_with("cluster.x-k8s.io/"))
            || (r["kind"] == "KubeadmControlPlane"
                && api.starts_with("controlplane.cluster.x-k8s.io/"))
    };
    if !refs.iter().any(on_create)
        && has_exact_owner_ref(&refs, &desired)
        && label(osm, CLUSTER_LABEL) == Some(cluster)
    {
        return;
    }
    let mut kept: Vec<Value> = refs
        .into_iter()
        .filter(|r| !on_create(r) && r["uid"] != desired["uid"])
        .collect();
    kept.push(desired);
    let mut next = osm.clone();
    next["metadata"]["ownerReferences"] = json!(kept);
    next["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
    c.write(Kind::OpenStackMachine, osm, next);
}

pub fn reconcile(c: &mut Ctx<'_>, cur: Value) {
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let mut next = cur.clone();
    let osm = c.get(Kind::OpenStackMachine, &ns, &n);
    if deleting(&cur) {
        if cur.pointer("/status/phase").and_then(Value::as_str) != Some("Deleting") {
            next["status"]["phase"] = json!("Deleting"); // drain, one pass
        } else if let Some(o) = &osm {
            c.delete(Kind::OpenStackMachine, o);
        } else {
            c.drop_finalizer(&mut next, FINALIZER);
        }
        c.write(Kind::Machine, &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, FINALIZER);
    if let Some(o) = &osm {
        own_infrastructure(c, &cur, o);
    }
    let phase = cur
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let server = short_hash(&json!(meta(&cur, "uid")));
    let never =
        annotation(&cur, NEVER_READY).is_some() || c.ns_annotation(&ns, NEVER_READY).is_some();
    let mut st = cur.get("status").cloned().unwrap_or(json!({}));
    st["observedGeneration"] = cur["metadata"]["generation"].clone();
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let cl = c.get(Kind::Cluster, &ns, &cluster);
    let infra_ready = cl.as_ref().is_some_and(infra_provisioned);
    let cp_ready = cl.as_ref().is_some_and(cp_initialized);
    let may_bootstrap = infra_ready && (label(&cur, CP_LABEL).is_some() || cp_ready);
    match phase {
        "" => st["phase"] = json!("Pending"),
        "Pending" if may_bootstrap => {
            st["phase"] = json!("Provisioning");
            if c.v2 {
                st["initialization"] = json!({"bootstrapDataSecretCreated": true});
            } else {
                st["bootstrapReady"] = json!(true);
            }
        }
        "Provisioning" if !never && osm.is_some() => {
            st["phase"] = json!("Provisioned");
            next["spec"]["providerID"] = json!(format!("openstack:///{server}"));
            let address = free_address(c, &ns, &cluster, &server);
            st["addresses"] = json!([{"type": "InternalIP", "address": address}]);
            if c.v2 {
                st["initialization"] =
                    json!({"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true});
            } else {
                st["infrastructureReady"] = json!(true);
            }
        }
        // CAPI sets the nodeRef once a Node with the Machine's providerID
        // exists in the workload cluster (machine_controller_noderef.go:
        // "Waiting for a node with matching ProviderID to exist").
        "Provisioned"
            if c.registered_nodes
                .as_ref()
                .is_some_and(|nodes| !nodes.contains(&n)) => {}
        "Provisioned" => {
            st["phase"] = json!("Running");
            st["nodeRef"] = if c.v2 {
                json!({"name": n})
            } else {
                json!({"apiVersion": "v1", "kind": "Node", "name": n, "uid": server})
            };
            let version = cur
                .pointer("/spec/version")
                .cloned()
                .unwrap_or(json!("v1.30.0"));
            st["nodeInfo"] = json!({"kubeletVersion": version, "architecture": "amd64", "operatingSystem": "linux",
                "bootID": server, "containerRuntimeVersion": "containerd://1.7.0", "kernelVersion": "6.1.0",
                "kubeProxyVersion": version, "machineID": server, "osImage": "Ubuntu 22.04", "systemUUID": server});
        }
        _ => {}
    }
    let phase_now = st["phase"].as_str().unwrap_or("").to_string();
    let (summary, infra): (Option<(&str, &str, &str)>, bool) = match phase_now.as_str() {
        "Pending" if !infra_ready => (
            Some((
                "WaitingForClusterInfrastructure",
                "Info",
                "waiting for the cluster's infrastructure",
            )),
            false,
        ),
        "Pending" => (
            Some((
                "WaitingForControlPlaneAvailable",
                "Info",
                "waiting for the control plane to be initialized",
            )),
            false,
        ),
        "Provisioning" => (
            Some((
                "InstanceNotReady",
                "Warning",
                "waiting for the server to become ACTIVE",
            )),
            false,
        ),
        "Provisioned" => (
            Some((
                "WaitingForNodeRef",
                "Info",
                "waiting for the node to register",
            )),
            true,
        ),
        _ => (None, true),
    };
    st["conditions"] = match summary {
        None => {
            if c.v2 {
                // With the Machine's normal-False ones (v1.14
                // `internal/controllers/machine/machine_controller_status.go`:
                // `NotDeleting`, `NotPaused`).
                json!([
                    c.condition("Available", true, "Available", ""),
                    c.condition("Ready", true, "Ready", ""),
                    c.condition("InfrastructureReady", true, "Ready", ""),
                    c.condition("Deleting", false, "NotDeleting", ""),
                    c.condition("Paused", false, "NotPaused", "")
                ])
            } else {
                json!([
                    c.condition("Ready", true, "", ""),
                    c.condition("InfrastructureReady", true, "", "")
                ])
            }
        }
        Some((reason, severity, message)) => {
            let infra_cond = if infra {
                c.condition("InfrastructureReady", true, "Ready", "")
            } else {
                c.condition_with("InfrastructureReady", false, reason, severity, message)
            };
            let mut conds = vec![
                c.condition_with("Ready", false, reason, severity, message),
                infra_cond,
            ];
            if c.v2 {
                conds.push(c.condition("Deleting", false, "NotDeleting", ""));
                conds.push(c.condition("Paused", false, "NotPaused", ""));
            }
            json!(conds)
        }
    };
    next["status"] = st;
    keep_transition_times(&cur, &mut next);
    c.write(Kind::Machine, &cur, next);
}

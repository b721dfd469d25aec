//! Cluster, as CAPI's cluster controller reconciles it (cluster-api v1.10
//! `internal/controllers/cluster`):
//!
//! - its infrastructure and control plane get the Cluster as owner and the
//!   cluster-name label (`cluster_controller_phases.go` `reconcileExternal` /
//!   `ensureOwnerRefAndLabel`): CAPI 1.10 as their controller
//!   (`controllerutil.SetControllerReference`, replacing a plain reference
//!   to the same Cluster), CAPI 1.14 for a Cluster without a topology as a
//!   plain owner (`controllerutil.SetOwnerReference`;
//!   `core/reconcilers/cluster/cluster_controller_phases.go`);
//! - `spec.controlPlaneEndpoint` is copied from the infrastructure once it
//!   is ready (`reconcileInfrastructure`); a failure of the infrastructure
//!   becomes the Cluster's `failureMessage`, worded as `reconcileExternal`
//!   words it;
//! - phase (`reconcilePhase`) and conditions in the line's shape (v1beta1:
//!   Ready, ControlPlaneReady, InfrastructureReady; v1beta2: Available,
//!   InfrastructureReady, ControlPlaneInitialized, ControlPlaneAvailable;
//!   reasons as CAPI's, messages the simulator's own);
//! - deletion (`cluster_controller.go` `reconcileDelete`): the descendants it
//!   owns (MachineDeployments) are deleted and waited for, with their
//!   MachineSets and worker Machines; then the control plane, then the
//!   infrastructure; then the finalizer goes.

use serde_json::{Value, json};

use super::Ctx;
use crate::kinds::Kind;
use crate::obj::{
    CLUSTER_LABEL, CP_LABEL, deleting, ensure_owner_ref, has_exact_owner_ref,
    keep_transition_times, label, meta, name, namespace, owned_by, owner_ref, owner_refs,
    plain_owner_ref,
};

const FINALIZER: &str = "cluster.cluster.x-k8s.io";

fn ref_name(r: &Value) -> Option<&str> {
    r.get("name").and_then(Value::as_str)
}

pub fn reconcile(c: &mut Ctx<'_>, cur: Value) {
    // The topology controller runs beside the cluster controller.
    super::topology::reconcile(c, &cur);
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let infra = cur
        .pointer("/spec/infrastructureRef")
        .and_then(ref_name)
        .and_then(|r| c.get(Kind::OpenStackCluster, &ns, r));
    let kcp = cur
        .pointer("/spec/controlPlaneRef")
        .and_then(ref_name)
        .and_then(|r| c.get(Kind::KubeadmControlPlane, &ns, r));
    let mut next = cur.clone();
    if deleting(&cur) {
        let mds: Vec<Value> = c
            .labelled(Kind::MachineDeployment, &ns, &[(CLUSTER_LABEL, &n)])
            .into_iter()
            .filter(|md| owned_by(md, &uid))
            .collect();
        for md in &mds {
            c.delete(Kind::MachineDeployment, md);
        }
        let workers_left = c
            .labelled(Kind::Machine, &ns, &[(CLUSTER_LABEL, &n)])
            .iter()
            .any(|m| label(m, CP_LABEL).is_none());
        let sets_left = !c
            .labelled(Kind::MachineSet, &ns, &[(CLUSTER_LABEL, &n)])
            .is_empty();
        next["status"]["phase"] = json!("Deleting");
        if !mds.is_empty() || sets_left || workers_left {
            c.write(Kind::Cluster, &cur, next);
            return;
        }
        if let Some(k) = &kcp {
            c.delete(Kind::KubeadmControlPlane, k);
            c.write(Kind::Cluster, &cur, next);
            return;
        }
        if let Some(i) = &infra {
            c.delete(Kind::OpenStackCluster, i);
            c.write(Kind::Cluster, &cur, next);
            return;
        }
        c.drop_finalizer(&mut next, FINALIZER);
        c.write(Kind::Cluster, &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, FINALIZER);
    for (obj, kind) in [
        (&infra, Kind::OpenStackCluster),
        (&kcp, Kind::KubeadmControlPlane),
    ] {
        let Some(o) = obj else { continue };
        let desired = if c.v2 {
            plain_owner_ref(&cur)
        } else {
            owner_ref(&cur, true)
        };
        let mut refs = owner_refs(o);
        if has_exact_owner_ref(&refs, &desired) && label(o, CLUSTER_LABEL) == Some(n.as_str()) {
            continue;
        }
        ensure_owner_ref(&mut refs, desired);
        let mut o2 = o.clone();
        o2["metadata"]["ownerReferences"] = json!(refs);
        o2["metadata"]["labels"][CLUSTER_LABEL] = json!(n);
        c.write(kind, o, o2);
    }
    let infra_ready = infra
        .as_ref()
        .is_some_and(|i| i.pointer("/status/ready") == Some(&json!(true)));
    let infra_failed = infra
        .as_ref()
        .and_then(|i| i.pointer("/status/failureMessage"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if infra_ready
        && next
            .pointer("/spec/controlPlaneEndpoint/host")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        && let Some(ep) = infra
            .as_ref()
            .and_then(|i| i.pointer("/spec/controlPlaneEndpoint"))
    {
        next["spec"]["controlPlaneEndpoint"] = ep.clone();
    }
    let cp_init = kcp.as_ref().is_some_and(|k| {
        k.pointer("/status/initialized") == Some(&json!(true))
            || k.pointer("/status/initialization/controlPlaneInitialized") == Some(&json!(true))
    });
    let cp_ready = kcp.as_ref().is_some_and(|k| {
        let want = k
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        k.pointer("/status/readyReplicas").and_then(Value::as_i64) == Some(want)
            || (c.v2
                && k.pointer("/status/availableReplicas")
                    .and_then(Value::as_i64)
                    == Some(want))
    });
    let has_endpoint = !next
        .pointer("/spec/controlPlaneEndpoint/host")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty();
    // reconcilePhase: Pending -> Provisioning (infrastructure referenced)
    // -> Provisioned (infrastructure ready and an endpoint); Failed.
    let phase = if infra_failed.is_some() {
        "Failed"
    } else if infra_ready && has_endpoint {
        "Provisioned"
    } else if infra.is_some() {
        "Provisioning"
    } else {
        "Pending"
    };
    let infra_msg = infra_failed.clone().unwrap_or_default();
    let failure = infra_failed.as_ref().map(|m| {
        format!(
            "Failure detected from referenced resource infrastructure.cluster.x-k8s.io/v1beta1, Kind=OpenStackCluster with name {:?}: {m}",
            infra.as_ref().map(name).unwrap_or("")
        )
    });
    let mut status = next.get("status").cloned().unwrap_or(json!({}));
    status["phase"] = json!(phase);
    status["observedGeneration"] = next["metadata"]["generation"].clone();
    if c.v2 {
        status["initialization"] =
            json!({"infrastructureProvisioned": infra_ready, "controlPlaneInitialized": cp_init});
        if let Some(f) = &failure {
            status["deprecated"] =
                json!({"v1beta1": {"failureReason": "UpdateError", "failureMessage": f}});
        }
        status["conditions"] = json!([
            c.condition(
                "Available",
                infra_ready && cp_ready,
                if infra_ready && cp_ready {
                    "Available"
                } else {
                    "NotAvailable"
                },
                &infra_msg
            ),
            c.condition(
                "InfrastructureReady",
                infra_ready,
                if infra_ready { "Ready" } else { "NotReady" },
                &infra_msg
            ),
            c.condition(
                "ControlPlaneInitialized",
                cp_init,
                if cp_init {
                    "Initialized"
                } else {
                    "NotInitialized"
                },
                ""
            ),
            c.condition(
                "ControlPlaneAvailable",
                cp_ready,
                if cp_ready {
                    "Available"
                } else {
                    "NotAvailable"
                },
                ""
            ),
        ]);
        // Upstream's normal-False ones (not aggregated here from the
        // control plane's and MachineDeployments' own: those carry them).
        if let Some(a) = status["conditions"].as_array_mut() {
            a.extend(c.negative_conditions(&[]));
        }
    } else {
        status["infrastructureReady"] = json!(infra_ready);
        status["controlPlaneReady"] = json!(cp_init);
        if let Some(f) = &failure {
            status["failureReason"] = json!("UpdateError");
            status["failureMessage"] = json!(f);
        }
        status["conditions"] = json!([
            c.condition(
                "Ready",
                infra_ready && cp_ready,
                "WaitingForControlPlane",
                &infra_msg
            ),
            c.condition("ControlPlaneReady", cp_ready, "WaitingForControlPlane", ""),
            c.condition(
                "InfrastructureReady",
                infra_ready,
                "WaitingForInfrastructure",
                &infra_msg
            ),
        ]);
    }
    next["status"] = status;
    keep_transition_times(&cur, &mut next);
    c.write(Kind::Cluster, &cur, next);
}

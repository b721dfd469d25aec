//! MachineHealthCheck (cluster-api v1.10
//! `internal/controllers/machinehealthcheck`): the cluster-name label and
//! the Cluster as owner (`machinehealthcheck_controller.go`: `mhc.Labels[...]`,
//! `util.EnsureOwnerRef`); counts of expected and healthy targets. A
//! Machine annotated `capi-sim/unhealthy` is remediated. Simplified: CAPI's
//! MHC marks it `OwnerRemediated=False` and its MachineSet or
//! KubeadmControlPlane deletes and replaces it; here the MHC deletes it and
//! its owner replaces it (what the conductor observes is the same).

use serde_json::{Value, json};

use super::{Ctx, ready_machine, selector_matches};
use crate::kinds::Kind;
use crate::obj::{
    CLUSTER_LABEL, UNHEALTHY, annotation, deleting, ensure_owner_ref, has_exact_owner_ref, label,
    meta, namespace, owner_refs,
};

pub fn reconcile(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let ns = namespace(&cur).to_string();
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let targets: Vec<Value> = c
        .labelled(Kind::Machine, &ns, &[(CLUSTER_LABEL, &cluster)])
        .into_iter()
        .filter(|m| m.pointer("/spec/clusterName").and_then(Value::as_str) == Some(&cluster))
        .filter(|m| selector_matches(cur.pointer("/spec/selector"), m))
        .filter(|m| !deleting(m))
        .collect();
    let mut healthy = 0;
    for m in &targets {
        if annotation(m, UNHEALTHY).is_some() {
            c.delete(Kind::Machine, m);
        } else if ready_machine(m) {
            healthy += 1;
        }
    }
    let mut next = cur.clone();
    if label(&cur, CLUSTER_LABEL) != Some(cluster.as_str()) {
        next["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
    }
    if let Some(cl) = c.get(Kind::Cluster, &ns, &cluster) {
        let desired = json!({"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": cluster, "uid": meta(&cl, "uid")});
        let mut refs = owner_refs(&cur);
        if !has_exact_owner_ref(&refs, &desired) {
            ensure_owner_ref(&mut refs, desired);
            next["metadata"]["ownerReferences"] = json!(refs);
        }
    }
    let names: Vec<&str> = targets.iter().map(crate::obj::name).collect();
    next["status"] = json!({"expectedMachines": targets.len(), "currentHealthy": healthy,
                            "remediationsAllowed": targets.len(), "targets": names,
                            "observedGeneration": cur["metadata"]["generation"]});
    if let Some(conds) = cur.pointer("/status/conditions") {
        next["status"]["conditions"] = conds.clone();
    }
    c.write(Kind::MachineHealthCheck, &cur, next);
}

//! KubeadmControlPlane, as KCP reconciles it (cluster-api v1.10
//! `controlplane/kubeadm/internal/controllers`): nothing before the
//! Cluster's infrastructure is ready; then one Machine at a time, each
//! only while every existing machine is healthy (`scale.go`
//! `preflightChecks`); a machine whose version or infrastructure template
//! (`filters.go` `matchesTemplateClonedFrom`: the clone's
//! `cluster.x-k8s.io/cloned-from-name`) differs from the spec is rolled out
//! by surging one up-to-date machine, then scaling down
//! (`selectMachineForScaleDown`: outdated machines marked
//! `cluster.x-k8s.io/delete-machine` first, then marked, then outdated,
//! then any; the oldest of those). The machine template is owned by the
//! Cluster (`helpers.go` `reconcileExternalReference`). Status: replicas,
//! ready/available, up-to-date, `initialized`, and `version` = the lowest
//! version a machine runs, a machine being deleted included (`status.go`:
//! `controlPlane.Machines.LowestVersion()`).
//! Deletion deletes the machines, then drops the finalizer.

use serde_json::{Value, json};

use super::{Ctx, create_machine, infra_provisioned, new_machine, own_template, ready_machine};
use crate::kinds::Kind;
use crate::obj::{
    CLUSTER_LABEL, CP_LABEL, CP_NAME_LABEL, DELETE_MACHINE, annotation, deleting, label, meta,
    name, namespace, owned_by, version_key,
};

const FINALIZER: &str = "kubeadm.controlplane.cluster.x-k8s.io";

pub fn reconcile(c: &mut Ctx<'_>, cur: Value) {
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let machines: Vec<Value> = c
        .labelled(Kind::Machine, &ns, &[(CP_NAME_LABEL, &n)])
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect();
    if deleting(&cur) {
        for m in &machines {
            c.delete(Kind::Machine, m);
        }
        let mut next = cur.clone();
        if machines.is_empty() {
            c.drop_finalizer(&mut next, FINALIZER);
        }
        c.write(Kind::KubeadmControlPlane, &cur, next);
        return;
    }
    let Some(cluster) = label(&cur, CLUSTER_LABEL).map(str::to_string) else {
        return;
    };
    let infra_ready = c
        .get(Kind::Cluster, &ns, &cluster)
        .is_some_and(|cl| infra_provisioned(&cl));
    let mut next = cur.clone();
    c.ensure_finalizer(&mut next, FINALIZER);
    let want = cur
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1) as usize;
    let version = cur.pointer("/spec/version").cloned();
    let template = if c.v2 {
        cur.pointer("/spec/machineTemplate/spec/infrastructureRef/name")
    } else {
        cur.pointer("/spec/machineTemplate/infrastructureRef/name")
    }
    .and_then(Value::as_str)
    .unwrap_or("")
    .to_string();
    own_template(c, &ns, &template, &cluster);
    let cloned_from = |m: &Value| -> Option<String> {
        c.get(Kind::OpenStackMachine, &ns, name(m))
            .and_then(|o| annotation(&o, "cluster.x-k8s.io/cloned-from-name").map(str::to_string))
    };
    let up_to_date = |m: &Value| {
        m.pointer("/spec/version") == version.as_ref()
            && cloned_from(m).is_none_or(|t| t == template)
    };
    let live: Vec<&Value> = machines.iter().filter(|m| !deleting(m)).collect();
    let updated = live.iter().filter(|m| up_to_date(m)).count();
    let ready = live.iter().filter(|m| ready_machine(m)).count();
    if infra_ready {
        if (live.len() < want || (updated < want && live.len() == want))
            && live.iter().all(|m| ready_machine(m))
            && machines.iter().all(|m| !deleting(m))
        {
            let labels = json!({CLUSTER_LABEL: cluster, CP_LABEL: "", CP_NAME_LABEL: n});
            let m = new_machine(c, &cur, &cluster, version.as_ref(), labels);
            create_machine(c, &cur, m, &template);
        } else if live.len() > want {
            let marked = |m: &&&Value| annotation(m, DELETE_MACHINE).is_some();
            let outdated = |m: &&&Value| !up_to_date(m);
            let pick = |f: &dyn Fn(&&&Value) -> bool| -> Vec<&Value> {
                live.iter().filter(|m| f(m)).copied().collect()
            };
            let eligible = [
                pick(&|m| marked(m) && outdated(m)),
                pick(&marked),
                pick(&outdated),
                live.clone(),
            ]
            .into_iter()
            .find(|v| !v.is_empty())
            .unwrap_or_default();
            let victim = eligible
                .iter()
                .min_by_key(|m| {
                    (
                        meta(m, "creationTimestamp").unwrap_or("").to_string(),
                        name(m).to_string(),
                    )
                })
                .map(|m| (*m).clone());
            if let Some(v) = victim {
                c.delete(Kind::Machine, &v);
            }
        }
    }
    let initialized = ready > 0
        || cur.pointer("/status/initialized") == Some(&json!(true))
        || cur.pointer("/status/initialization/controlPlaneInitialized") == Some(&json!(true));
    let mut st = json!({"replicas": live.len(), "readyReplicas": ready, "observedGeneration": cur["metadata"]["generation"],
                        "selector": format!("{CLUSTER_LABEL}={cluster},{CP_LABEL}")});
    // Over every owned machine, those being deleted too (`controller.go`:
    // `ownedMachines` are not filtered by deletion).
    if let Some(v) = machines
        .iter()
        .filter_map(|m| m.pointer("/spec/version").and_then(Value::as_str))
        .min_by_key(|v| version_key(v))
    {
        st["version"] = json!(v);
    }
    if c.v2 {
        st["initialization"] = json!({"controlPlaneInitialized": initialized});
        st["availableReplicas"] = json!(ready);
        st["upToDateReplicas"] = json!(updated);
        // KCP v1.14's v1beta2 conditions (`controlplane/kubeadm/internal/
        // controllers/status.go`): Available once initialized with a ready
        // machine, then the normal-False ones, True while it scales or
        // rolls out (messages worded as upstream's).
        let want = cur
            .pointer("/spec/replicas")
            .and_then(Value::as_u64)
            .unwrap_or(1) as usize;
        let mut active = Vec::new();
        let up_msg = format!("Scaling up from {} to {want} replicas", live.len());
        let down_msg = format!("Scaling down from {} to {want} replicas", live.len());
        let roll_msg = format!(
            "Rolling out {} not up-to-date replicas",
            live.len().saturating_sub(updated)
        );
        if live.len() < want {
            active.push(("ScalingUp", "ScalingUp", up_msg.as_str()));
        }
        if live.len() > want {
            active.push(("ScalingDown", "ScalingDown", down_msg.as_str()));
        }
        if updated < live.len() {
            active.push(("RollingOut", "RollingOut", roll_msg.as_str()));
        }
        let available = initialized && ready > 0;
        let mut conds = vec![c.condition(
            "Available",
            available,
            if available {
                "Available"
            } else {
                "NotAvailable"
            },
            "",
        )];
        conds.extend(c.negative_conditions(&active));
        st["conditions"] = json!(conds);
    } else {
        st["initialized"] = json!(initialized);
        st["ready"] = json!(ready > 0);
        st["updatedReplicas"] = json!(updated);
        st["unavailableReplicas"] = json!(live.len() - ready);
    }
    next["status"] = st;
    c.write(Kind::KubeadmControlPlane, &cur, next);
}

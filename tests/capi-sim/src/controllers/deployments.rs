//! MachineDeployment and MachineSet (cluster-api v1.10
//! `internal/controllers/machinedeployment`, `.../machineset`).
//!
//! MachineDeployment: owned by its Cluster (`machinedeployment_controller.go`:
//! `util.EnsureOwnerRef`); one MachineSet per template, the current one
//! found by its `machine-template-hash` label (`mdutil.FindNewMachineSet`
//! compares the templates), named `<deployment>-<random>`. A rolling update
//! as `machinedeployment_rolling.go` does it (`mdutil.NewMSNewReplicas`,
//! `ResolveFenceposts`): the new MachineSet grows while the total stays
//! within replicas + maxSurge, old ones shrink (unhealthy machines first,
//! `cleanupUnhealthyReplicas`, then `scaleDownOldMachineSetsForRollingUpdate`)
//! while replicas - maxUnavailable stay available; old MachineSets are
//! deleted once empty (CAPI keeps `revisionHistoryLimit` of them in
//! v1beta1; none here). A count change in the middle of a rollout is not
//! spread proportionally over the MachineSets as `scale()` does. Status and
//! conditions in the line's shape (v1beta1 `Ready`/`Available` "Minimum
//! availability requires ..."; v1beta2 `Available`, `RollingOut`,
//! `ScalingUp`, `ScalingDown`, worded as v1.14 `machinedeployment_status.go`).
//!
//! MachineSet (`machineset_controller.go`; its finalizer, and
//! `reconcileDelete`: machines deleted before the finalizer goes;
//! `syncReplicas`): creates or
//! deletes every missing or extra Machine at once; which go first follows
//! the delete policy (`machineset_delete_policy.go`: already deleting, then
//! annotated `cluster.x-k8s.io/delete-machine`, then unhealthy, then the
//! newest); its infrastructure template is owned by the Cluster
//! (`reconcileExternalTemplateReference`).

use serde_json::{Value, json};

use super::{
    Ctx, create_machine, new_machine, own_template, ready_machine, scaled, spec_replicas,
    status_int,
};
use crate::kinds::Kind;
use crate::obj::{
    CLUSTER_LABEL, DELETE_MACHINE, DEPLOYMENT_LABEL, NEVER_READY, SET_LABEL, annotation, deleting,
    ensure_owner_ref, generate_name, has_exact_owner_ref, keep_transition_times, label, meta, name,
    namespace, owned_by, owner_ref, owner_refs, short_hash,
};

const MD_FINALIZER: &str = "machinedeployment.cluster.x-k8s.io";
const MS_FINALIZER: &str = "machineset.cluster.x-k8s.io";
const HASH_LABEL: &str = "machine-template-hash";

pub fn reconcile_deployment(c: &mut Ctx<'_>, cur: Value) {
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let mut sets: Vec<Value> = c
        .labelled(Kind::MachineSet, &ns, &[(DEPLOYMENT_LABEL, &n)])
        .into_iter()
        .filter(|s| owned_by(s, &uid))
        .collect();
    sets.sort_by_key(|s| {
        (
            meta(s, "creationTimestamp").unwrap_or("").to_string(),
            name(s).to_string(),
        )
    });
    let mut next = cur.clone();
    if deleting(&cur) {
        for s in &sets {
            c.delete(Kind::MachineSet, s);
        }
        if sets.is_empty() {
            c.drop_finalizer(&mut next, MD_FINALIZER);
        }
        c.write(Kind::MachineDeployment, &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, MD_FINALIZER);
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(cl) = c.get(Kind::Cluster, &ns, &cluster) {
        let desired = json!({"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": cluster, "uid": meta(&cl, "uid")});
        let mut refs = owner_refs(&cur);
        if !has_exact_owner_ref(&refs, &desired) {
            ensure_owner_ref(&mut refs, desired);
            next["metadata"]["ownerReferences"] = json!(refs);
        }
    }
    let want = spec_replicas(&cur);
    let rolling = cur
        .pointer("/spec/strategy/rollingUpdate")
        .or_else(|| cur.pointer("/spec/rollout/strategy/rollingUpdate"));
    let mut max_surge = scaled(rolling.and_then(|r| r.get("maxSurge")), want, true, 1);
    let mut max_unavailable = scaled(
        rolling.and_then(|r| r.get("maxUnavailable")),
        want,
        false,
        0,
    );
    if max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    max_unavailable = max_unavailable.min(want);
    max_surge = max_surge.max(0);
    let template = cur.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let hash = short_hash(&template);
    let new_idx = sets
        .iter()
        .position(|s| label(s, HASH_LABEL) == Some(hash.as_str()) && !deleting(s));
    let set_replicas = |c: &mut Ctx<'_>, s: &Value, r: i64| {
        if spec_replicas(s) != r {
            let mut u = s.clone();
            u["spec"]["replicas"] = json!(r);
            c.write(Kind::MachineSet, s, u);
        }
    };
    // NewMSNewReplicas: grow within replicas + maxSurge.
    let grow = |all: &[Value], new_spec: i64| -> i64 {
        let total: i64 = all.iter().map(spec_replicas).sum();
        let max_total = want + max_surge;
        if total >= max_total {
            return new_spec;
        }
        new_spec + (max_total - total).min(want - new_spec)
    };
    match new_idx {
        None => {
            let mut tmpl = template.clone();
            tmpl["metadata"]["labels"][DEPLOYMENT_LABEL] = json!(n);
            tmpl["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
            tmpl["metadata"]["labels"][HASH_LABEL] = json!(hash);
            let replicas = grow(&sets, 0).max(0);
            let mut ms = json!({"apiVersion": c.api_version(Kind::MachineSet), "kind": "MachineSet",
                "metadata": {"name": generate_name(&format!("{n}-")),
                             "labels": {DEPLOYMENT_LABEL: n, CLUSTER_LABEL: cluster, HASH_LABEL: hash},
                             "ownerReferences": [owner_ref(&cur, true)]},
                "spec": {"clusterName": cluster, "replicas": replicas,
                         "selector": {"matchLabels": {DEPLOYMENT_LABEL: n, HASH_LABEL: hash}}, "template": tmpl}});
            if let Some(a) = annotation(&cur, NEVER_READY) {
                ms["metadata"]["annotations"] = json!({NEVER_READY: a});
            }
            c.create(Kind::MachineSet, &ns, ms);
        }
        Some(i) => {
            let mut all = sets.clone();
            // reconcileNewMachineSet.
            let new_spec = spec_replicas(&all[i]);
            let target = if new_spec > want {
                want
            } else if new_spec < want {
                grow(&all, new_spec)
            } else {
                new_spec
            };
            set_replicas(c, &all[i], target);
            all[i]["spec"]["replicas"] = json!(target);
            // reconcileOldMachineSets.
            let new = all[i].clone();
            let old_count: i64 = all
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, s)| spec_replicas(s))
                .sum();
            if old_count > 0 {
                let all_count: i64 = all.iter().map(spec_replicas).sum();
                let min_available = want - max_unavailable;
                let new_unavailable = spec_replicas(&new) - status_int(&new, "availableReplicas");
                let max_scaled_down = all_count - min_available - new_unavailable;
                if max_scaled_down > 0 {
                    // cleanupUnhealthyReplicas, oldest first.
                    let mut cleaned = 0;
                    for j in (0..all.len()).filter(|j| *j != i) {
                        if cleaned >= max_scaled_down {
                            break;
                        }
                        let spec = spec_replicas(&all[j]);
                        let unhealthy = spec - status_int(&all[j], "availableReplicas");
                        if spec == 0 || unhealthy <= 0 {
                            continue;
                        }
                        let down = (max_scaled_down - cleaned).min(unhealthy);
                        let s = all[j].clone();
                        set_replicas(c, &s, spec - down);
                        all[j]["spec"]["replicas"] = json!(spec - down);
                        cleaned += down;
                    }
                    // scaleDownOldMachineSetsForRollingUpdate.
                    let available: i64 =
                        all.iter().map(|s| status_int(s, "availableReplicas")).sum();
                    if available > min_available {
                        let total = available - min_available;
                        let mut scaled_down = 0;
                        for j in (0..all.len()).filter(|j| *j != i) {
                            if scaled_down >= total {
                                break;
                            }
                            let spec = spec_replicas(&all[j]);
                            if spec == 0 {
                                continue;
                            }
                            let down = spec.min(total - scaled_down);
                            let s = all[j].clone();
                            set_replicas(c, &s, spec - down);
                            all[j]["spec"]["replicas"] = json!(spec - down);
                            scaled_down += down;
                        }
                    }
                }
            }
            for (j, o) in sets.iter().enumerate() {
                if j != i && spec_replicas(&all[j]) == 0 && status_int(o, "replicas") == 0 {
                    c.delete(Kind::MachineSet, o);
                }
            }
        }
    }
    let sum = |k: &str| sets.iter().map(|s| status_int(s, k)).sum::<i64>();
    let replicas = sum("replicas");
    let ready = sum("readyReplicas");
    let available = sum("availableReplicas");
    let updated = new_idx
        .map(|i| status_int(&sets[i], "replicas"))
        .unwrap_or(0);
    let min_available = want - max_unavailable;
    let phase = if replicas < want {
        "ScalingUp"
    } else if replicas > want {
        "ScalingDown"
    } else {
        "Running"
    };
    let mut st = json!({"replicas": replicas, "readyReplicas": ready, "availableReplicas": available,
                        "observedGeneration": cur["metadata"]["generation"],
                        "selector": format!("{DEPLOYMENT_LABEL}={n}"), "phase": phase});
    let available_ok = available >= min_available;
    if c.v2 {
        st["upToDateReplicas"] = json!(updated);
        let not_up_to_date = replicas - updated;
        let unavailable = rolling
            .and_then(|r| r.get("maxUnavailable"))
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            })
            .unwrap_or_else(|| "0".into());
        st["conditions"] = json!([
            if available_ok {
                c.condition("Available", true, "Available", "")
            } else {
                c.condition("Available", false, "NotAvailable", &format!(
                    "{available} available replicas, at least {min_available} required (spec.strategy.rollout.maxUnavailable is {unavailable}, spec.replicas is {want})"))
            },
            if not_up_to_date > 0 {
                c.condition(
                    "RollingOut",
                    true,
                    "RollingOut",
                    &format!("Rolling out {not_up_to_date} not up-to-date replicas"),
                )
            } else {
                c.condition("RollingOut", false, "NotRollingOut", "")
            },
            if replicas < want {
                c.condition(
                    "ScalingUp",
                    true,
                    "ScalingUp",
                    &format!("Scaling up from {replicas} to {want} replicas"),
                )
            } else {
                c.condition("ScalingUp", false, "NotScalingUp", "")
            },
            if replicas > want {
                c.condition(
                    "ScalingDown",
                    true,
                    "ScalingDown",
                    &format!("Scaling down from {replicas} to {want} replicas"),
                )
            } else {
                c.condition("ScalingDown", false, "NotScalingDown", "")
            },
        ]);
    } else {
        st["updatedReplicas"] = json!(updated);
        st["unavailableReplicas"] = json!((replicas - available).max(0));
        let msg = format!(
            "Minimum availability requires {min_available} replicas, current {available} available"
        );
        let cond = |ty: &str| {
            if available_ok {
                c.condition(ty, true, "", "")
            } else {
                c.condition_with(ty, false, "WaitingForAvailableMachines", "Warning", &msg)
            }
        };
        st["conditions"] = json!([cond("Ready"), cond("Available")]);
    }
    next["status"] = st;
    keep_transition_times(&cur, &mut next);
    c.write(Kind::MachineDeployment, &cur, next);
}

/// Which machines of a MachineSet go first on scale-down (lower first):
/// annotated for deletion, then unhealthy, then the rest, the newest first.
fn delete_priority(m: &Value) -> u8 {
    if annotation(m, DELETE_MACHINE).is_some() {
        0
    } else if !ready_machine(m) {
        1
    } else {
        2
    }
}

pub fn reconcile_set(c: &mut Ctx<'_>, cur: Value) {
    let (ns, n) = (namespace(&cur).to_string(), name(&cur).to_string());
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let machines: Vec<Value> = c
        .labelled(Kind::Machine, &ns, &[(SET_LABEL, &n)])
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect();
    let live: Vec<&Value> = machines.iter().filter(|m| !deleting(m)).collect();
    let mut next = cur.clone();
    if deleting(&cur) {
        // reconcileDelete: delete the machines, then drop the finalizer.
        for m in &machines {
            c.delete(Kind::Machine, m);
        }
        if machines.is_empty() {
            c.drop_finalizer(&mut next, MS_FINALIZER);
        }
        c.write(Kind::MachineSet, &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, MS_FINALIZER);
    let want = spec_replicas(&cur).max(0) as usize;
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let template = cur
        .pointer("/spec/template/spec/infrastructureRef/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    own_template(c, &ns, &template, &cluster);
    if live.len() < want {
        let version = cur.pointer("/spec/template/spec/version").cloned();
        let mut labels = cur
            .pointer("/spec/template/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        labels[SET_LABEL] = json!(n);
        labels[CLUSTER_LABEL] = json!(cluster);
        for _ in live.len()..want {
            let m = new_machine(c, &cur, &cluster, version.as_ref(), labels.clone());
            create_machine(c, &cur, m, &template);
        }
    } else if live.len() > want {
        let mut order: Vec<&&Value> = live.iter().collect();
        order.sort_by_key(|m| {
            (
                delete_priority(m),
                std::cmp::Reverse(meta(m, "creationTimestamp").unwrap_or("").to_string()),
                name(m).to_string(),
            )
        });
        let victims: Vec<Value> = order
            .iter()
            .take(live.len() - want)
            .map(|m| (**m).clone())
            .collect();
        for v in &victims {
            c.delete(Kind::Machine, v);
        }
    }
    let ready = live.iter().filter(|m| ready_machine(m)).count();
    next["status"] = json!({"replicas": live.len(), "readyReplicas": ready, "availableReplicas": ready,
                            "observedGeneration": cur["metadata"]["generation"],
                            "selector": format!("{DEPLOYMENT_LABEL}={}", label(&cur, DEPLOYMENT_LABEL).unwrap_or(""))});
    if c.v2 {
        next["status"]["upToDateReplicas"] = json!(live.len());
    }
    c.write(Kind::MachineSet, &cur, next);
}

//! A Cluster with a managed topology (`spec.topology`, a ClusterClass), as
//! CAPI's topology controller reconciles it (cluster-api v1.10
//! `internal/controllers/topology/cluster`, desired state computed as
//! `exp/topology/desiredstate/desired_state.go` does), on the v1beta1 line
//! only (vexxhost magnum-cluster-api writes v1beta1 objects; the v1beta2
//! CRDs here carry no conversion webhook to serve them):
//!
//! - the infrastructure cluster and the control plane are created from the
//!   class's templates, named `{{ .cluster.name }}-{{ .random }}`
//!   (`computeInfrastructureCluster`, `computeControlPlane`: the default
//!   name templates), and the Cluster's `infrastructureRef` and
//!   `controlPlaneRef` point at them; the control plane's machine template
//!   is a clone of the class's (`templateToTemplate`: the
//!   `cluster.x-k8s.io/cloned-from-*` annotations, the cluster-name and
//!   `topology.cluster.x-k8s.io/owned` labels);
//! - one MachineDeployment per `workers.machineDeployments` entry, named
//!   `{{ .cluster.name }}-{{ .machineDeployment.topologyName }}-{{ .random }}`,
//!   labelled, selecting and templating with
//!   `topology.cluster.x-k8s.io/deployment-name: <entry name>` and
//!   `topology.cluster.x-k8s.io/owned` (`computeMachineDeployment`), with
//!   clones of the class's bootstrap and infrastructure templates; the
//!   entry's `metadata` goes on the MachineDeployment and its machines;
//!   an entry removed from the topology deletes its MachineDeployment
//!   (`reconcileMachineDeployments`: `diff.toDelete`);
//! - replicas come from the topology (none given: left to whoever sets
//!   them, the autoscaler); the control plane takes the topology's version
//!   at once (`computeControlPlaneVersion`, no upgrade hooks), a
//!   MachineDeployment only once the control plane is stable at it
//!   (`computeMachineDeploymentVersion`: `IsControlPlaneStable...`; every
//!   MachineDeployment at once, where CAPI's default upgrade concurrency
//!   takes them one at a time), and a
//!   new MachineDeployment waits for a stable control plane
//!   (`MarkPendingCreate`).
//!
//! Simplified: ClusterClass patches and variables are not applied (the
//! templates are cloned as the class holds them), so a variable change
//! alone rolls nothing here, where CAPI would roll the machines whose
//! templates it changes; template rotation (a new clone when the class's
//! template changes) and the class's MachineHealthChecks are not
//! simulated.

use serde_json::{Value, json};

use super::Ctx;
use crate::kinds::{Kind, Line};
use crate::obj::{CLUSTER_LABEL, deleting, generate_name, label, meta, name, namespace};

pub const OWNED_LABEL: &str = "topology.cluster.x-k8s.io/owned";
pub const MD_NAME_LABEL: &str = "topology.cluster.x-k8s.io/deployment-name";

fn cluster_owner(cl: &Value) -> Value {
    json!([{"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": name(cl), "uid": meta(cl, "uid")}])
}

/// A clone of class template `t` (of `kind`) named `new_name`
/// (`templateToTemplate`).
fn clone_template(
    c: &Ctx<'_>,
    kind: Kind,
    t: &Value,
    cl: &Value,
    new_name: &str,
    extra_labels: &[(&str, &str)],
) -> Value {
    let mut labels = json!({CLUSTER_LABEL: name(cl), OWNED_LABEL: ""});
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    json!({"apiVersion": c.api_version(kind), "kind": kind.name(),
           "metadata": {"name": new_name, "labels": labels,
                        "annotations": {"cluster.x-k8s.io/cloned-from-name": name(t),
                                        "cluster.x-k8s.io/cloned-from-groupkind": format!("{}.{}", kind.name(), kind.gvk(c.line).0)},
                        "ownerReferences": cluster_owner(cl)},
           "spec": t["spec"].clone()})
}

fn class_ref_name<'a>(class: &'a Value, p: &str) -> Option<&'a str> {
    class.pointer(p).and_then(Value::as_str)
}

/// Whether the control plane runs `version` on every machine and is not
/// scaling or rolling (`IsControlPlaneStable`, simplified to the status
/// KCP reports).
fn control_plane_stable(kcp: &Value, version: &str) -> bool {
    let n = |p: &str| kcp.pointer(p).and_then(Value::as_i64).unwrap_or(-1);
    kcp.pointer("/spec/version").and_then(Value::as_str) == Some(version)
        && kcp.pointer("/status/version").and_then(Value::as_str) == Some(version)
        && n("/status/replicas") == n("/spec/replicas")
        && n("/status/updatedReplicas") == n("/spec/replicas")
        && n("/status/readyReplicas") == n("/spec/replicas")
}

/// Reconcile the topology of Cluster `cl` (nothing without one, or on the
/// v1beta2 line, or while the Cluster is being deleted: the cluster
/// controller deletes what the topology made).
pub fn reconcile(c: &mut Ctx<'_>, cl: &Value) {
    let Some(topo) = cl.pointer("/spec/topology").filter(|t| t.is_object()) else {
        return;
    };
    if c.line != Line::V1beta1 || deleting(cl) {
        return;
    }
    let ns = namespace(cl).to_string();
    let cname = name(cl).to_string();
    let Some(class) = topo["class"]
        .as_str()
        .and_then(|n| c.get(Kind::ClusterClass, &ns, n))
    else {
        return;
    };
    let version = topo["version"].as_str().unwrap_or("").to_string();
    let mut cluster_next = cl.clone();
    let mut refs_changed = false;

    // Infrastructure cluster.
    if cl.pointer("/spec/infrastructureRef/name").is_none()
        && let Some(t) = class_ref_name(&class, "/spec/infrastructure/ref/name")
            .and_then(|n| c.get(Kind::OpenStackClusterTemplate, &ns, n))
    {
        let n = generate_name(&format!("{cname}-"));
        let mut o = json!({"apiVersion": c.api_version(Kind::OpenStackCluster), "kind": "OpenStackCluster",
            "metadata": {"name": n, "labels": {CLUSTER_LABEL: cname, OWNED_LABEL: ""},
                         "ownerReferences": cluster_owner(cl)},
            "spec": t.pointer("/spec/template/spec").cloned().unwrap_or(json!({}))});
        o["metadata"]["annotations"] = json!({"cluster.x-k8s.io/cloned-from-name": name(&t)});
        c.create(Kind::OpenStackCluster, &ns, o);
        cluster_next["spec"]["infrastructureRef"] = json!({"apiVersion": c.api_version(Kind::OpenStackCluster),
            "kind": "OpenStackCluster", "name": n, "namespace": ns});
        refs_changed = true;
    }

    // Control plane.
    let replicas = topo.pointer("/controlPlane/replicas").cloned();
    let cp_meta = topo
        .pointer("/controlPlane/metadata")
        .cloned()
        .unwrap_or(json!({}));
    let kcp = cl
        .pointer("/spec/controlPlaneRef/name")
        .and_then(Value::as_str)
        .and_then(|n| c.get(Kind::KubeadmControlPlane, &ns, n));
    match &kcp {
        None if cl.pointer("/spec/controlPlaneRef/name").is_none() => {
            let (Some(t), Some(mt)) = (
                class_ref_name(&class, "/spec/controlPlane/ref/name")
                    .and_then(|n| c.get(Kind::KubeadmControlPlaneTemplate, &ns, n)),
                class_ref_name(&class, "/spec/controlPlane/machineInfrastructure/ref/name")
                    .and_then(|n| c.get(Kind::OpenStackMachineTemplate, &ns, n)),
            ) else {
                return;
            };
            let mt_name = generate_name(&format!("{cname}-control-plane-"));
            c.create(
                Kind::OpenStackMachineTemplate,
                &ns,
                clone_template(c, Kind::OpenStackMachineTemplate, &mt, cl, &mt_name, &[]),
            );
            let n = generate_name(&format!("{cname}-"));
            let mut spec = t
                .pointer("/spec/template/spec")
                .cloned()
                .unwrap_or(json!({}));
            spec["version"] = json!(version);
            if let Some(r) = &replicas {
                spec["replicas"] = r.clone();
            }
            spec["machineTemplate"] = json!({"metadata": cp_meta,
                "infrastructureRef": {"apiVersion": c.api_version(Kind::OpenStackMachineTemplate),
                    "kind": "OpenStackMachineTemplate", "name": mt_name, "namespace": ns}});
            c.create(
                Kind::KubeadmControlPlane,
                &ns,
                json!({"apiVersion": c.api_version(Kind::KubeadmControlPlane), "kind": "KubeadmControlPlane",
                    "metadata": {"name": n, "labels": {CLUSTER_LABEL: cname, OWNED_LABEL: ""},
                                 "ownerReferences": cluster_owner(cl)},
                    "spec": spec}),
            );
            cluster_next["spec"]["controlPlaneRef"] = json!({"apiVersion": c.api_version(Kind::KubeadmControlPlane),
                "kind": "KubeadmControlPlane", "name": n, "namespace": ns});
            refs_changed = true;
        }
        None => {}
        Some(k) => {
            let mut next = k.clone();
            next["spec"]["version"] = json!(version);
            if let Some(r) = &replicas {
                next["spec"]["replicas"] = r.clone();
            }
            c.write(Kind::KubeadmControlPlane, k, next);
        }
    }
    if refs_changed {
        c.write(Kind::Cluster, cl, cluster_next);
    }
    let cp_stable = kcp
        .as_ref()
        .is_some_and(|k| control_plane_stable(k, &version));

    // Worker MachineDeployments.
    let entries: Vec<Value> = topo
        .pointer("/workers/machineDeployments")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let current = c.labelled(
        Kind::MachineDeployment,
        &ns,
        &[(CLUSTER_LABEL, &cname), (OWNED_LABEL, "")],
    );
    for md in &current {
        let topo_name = label(md, MD_NAME_LABEL).unwrap_or("");
        if !entries
            .iter()
            .any(|e| e["name"].as_str() == Some(topo_name))
        {
            c.delete(Kind::MachineDeployment, md);
        }
    }
    for e in &entries {
        let Some(ename) = e["name"].as_str() else {
            continue;
        };
        let md_labels = e
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let md_annotations = e
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        match current
            .iter()
            .find(|md| label(md, MD_NAME_LABEL) == Some(ename))
        {
            Some(md) => {
                let mut next = md.clone();
                if let Some(r) = e.get("replicas").filter(|r| !r.is_null()) {
                    next["spec"]["replicas"] = r.clone();
                }
                if cp_stable {
                    next["spec"]["template"]["spec"]["version"] = json!(version);
                }
                if let Some(a) = md_annotations.as_object() {
                    for (k, v) in a {
                        next["metadata"]["annotations"][k] = v.clone();
                    }
                }
                c.write(Kind::MachineDeployment, md, next);
            }
            None if cp_stable => {
                let class_name = e["class"].as_str().unwrap_or("");
                let Some(wc) = class
                    .pointer("/spec/workers/machineDeployments")
                    .and_then(Value::as_array)
                    .and_then(|l| l.iter().find(|w| w["class"].as_str() == Some(class_name)))
                    .cloned()
                else {
                    continue;
                };
                let (Some(bt), Some(it)) = (
                    class_ref_name(&wc, "/template/bootstrap/ref/name")
                        .and_then(|n| c.get(Kind::KubeadmConfigTemplate, &ns, n)),
                    class_ref_name(&wc, "/template/infrastructure/ref/name")
                        .and_then(|n| c.get(Kind::OpenStackMachineTemplate, &ns, n)),
                ) else {
                    continue;
                };
                let prefix = format!("{cname}-{ename}-");
                let (bt_name, it_name, md_name) = (
                    generate_name(&prefix),
                    generate_name(&prefix),
                    generate_name(&prefix),
                );
                let extra = [(MD_NAME_LABEL, ename)];
                c.create(
                    Kind::KubeadmConfigTemplate,
                    &ns,
                    clone_template(c, Kind::KubeadmConfigTemplate, &bt, cl, &bt_name, &extra),
                );
                c.create(
                    Kind::OpenStackMachineTemplate,
                    &ns,
                    clone_template(c, Kind::OpenStackMachineTemplate, &it, cl, &it_name, &extra),
                );
                let mut labels = serde_json::Map::new();
                for (k, v) in &md_labels {
                    labels.insert(k.clone(), v.clone());
                }
                labels.insert(CLUSTER_LABEL.into(), json!(cname));
                labels.insert(OWNED_LABEL.into(), json!(""));
                labels.insert(MD_NAME_LABEL.into(), json!(ename));
                let selector = json!({CLUSTER_LABEL: cname, OWNED_LABEL: "", MD_NAME_LABEL: ename});
                let mut spec = json!({"clusterName": cname,
                    "selector": {"matchLabels": selector},
                    "template": {"metadata": {"labels": labels, "annotations": md_annotations},
                        "spec": {"clusterName": cname, "version": version,
                            "bootstrap": {"configRef": {"apiVersion": c.api_version(Kind::KubeadmConfigTemplate),
                                "kind": "KubeadmConfigTemplate", "name": bt_name, "namespace": ns}},
                            "infrastructureRef": {"apiVersion": c.api_version(Kind::OpenStackMachineTemplate),
                                "kind": "OpenStackMachineTemplate", "name": it_name, "namespace": ns}}}});
                if let Some(fd) = e["failureDomain"].as_str().filter(|f| !f.is_empty()) {
                    spec["template"]["spec"]["failureDomain"] = json!(fd);
                }
                if let Some(r) = e.get("replicas").filter(|r| !r.is_null()) {
                    spec["replicas"] = r.clone();
                }
                c.create(
                    Kind::MachineDeployment,
                    &ns,
                    json!({"apiVersion": c.api_version(Kind::MachineDeployment), "kind": "MachineDeployment",
                        "metadata": {"name": md_name, "labels": labels, "annotations": md_annotations,
                                     "ownerReferences": cluster_owner(cl)},
                        "spec": spec}),
                );
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::controllers::Action;

    fn class() -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "ClusterClass",
            "metadata": {"name": "magnum-v0.38.1", "namespace": "magnum-system", "resourceVersion": "1"},
            "spec": {"controlPlane": {"ref": {"name": "magnum-v0.38.1"},
                                      "machineInfrastructure": {"ref": {"name": "magnum-v0.38.1"}}},
                     "infrastructure": {"ref": {"name": "magnum-v0.38.1"}},
                     "workers": {"machineDeployments": [{"class": "default-worker", "template": {
                         "bootstrap": {"ref": {"name": "magnum-v0.38.1"}},
                         "infrastructure": {"ref": {"name": "magnum-v0.38.1"}}}}]}}})
    }

    fn template(kind: &str, spec: Value) -> Value {
        json!({"kind": kind, "metadata": {"name": "magnum-v0.38.1", "namespace": "magnum-system", "resourceVersion": "1"},
               "spec": {"template": {"spec": spec}}})
    }

    fn cache() -> Cache {
        let mut c = Cache::default();
        c.upsert(Kind::ClusterClass, class());
        c.upsert(
            Kind::OpenStackClusterTemplate,
            template(
                "OpenStackClusterTemplate",
                json!({"apiServerLoadBalancer": {"enabled": true}}),
            ),
        );
        c.upsert(
            Kind::KubeadmControlPlaneTemplate,
            template(
                "KubeadmControlPlaneTemplate",
                json!({"kubeadmConfigSpec": {}}),
            ),
        );
        c.upsert(
            Kind::OpenStackMachineTemplate,
            template("OpenStackMachineTemplate", json!({"flavor": "m1"})),
        );
        c.upsert(
            Kind::KubeadmConfigTemplate,
            template("KubeadmConfigTemplate", json!({"joinConfiguration": {}})),
        );
        c
    }

    fn cluster(workers: Value) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "kube-abcde", "namespace": "magnum-system", "uid": "u1", "resourceVersion": "1"},
            "spec": {"topology": {"class": "magnum-v0.38.1", "version": "v1.30.4",
                "controlPlane": {"replicas": 3},
                "workers": {"machineDeployments": workers}}}})
    }

    fn created(c: &Ctx<'_>, kind: Kind) -> Vec<Value> {
        c.actions
            .iter()
            .filter_map(|a| match a {
                Action::Create { kind: k, obj, .. } if *k == kind => Some(obj.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_new_topology_gets_infrastructure_and_control_plane_named_as_capi_names_them() {
        let cache = cache();
        let mut c = Ctx::new(&cache, Line::V1beta1);
        let cl =
            cluster(json!([{"class": "default-worker", "name": "default-worker", "replicas": 2}]));
        reconcile(&mut c, &cl);
        let kcp = &created(&c, Kind::KubeadmControlPlane)[0];
        let n = name(kcp);
        assert!(
            n.starts_with("kube-abcde-") && n.len() == "kube-abcde-".len() + 5,
            "{n}"
        );
        assert_eq!(kcp["spec"]["replicas"], 3);
        assert_eq!(kcp["spec"]["version"], "v1.30.4");
        assert_eq!(created(&c, Kind::OpenStackCluster).len(), 1);
        // Workers wait for a stable control plane.
        assert!(created(&c, Kind::MachineDeployment).is_empty());
        let patch = c.actions.iter().find_map(|a| match a {
            Action::Patch {
                kind: Kind::Cluster,
                patch,
                ..
            } => Some(patch.clone()),
            _ => None,
        });
        assert_eq!(
            patch.and_then(|p| p.pointer("/spec/controlPlaneRef/name").cloned()),
            Some(json!(n))
        );
    }

    #[test]
    fn workers_follow_the_topology_once_the_control_plane_is_stable() {
        let mut cache = cache();
        cache.upsert(
            Kind::KubeadmControlPlane,
            json!({"kind": "KubeadmControlPlane", "metadata": {"name": "kube-abcde-xyz12", "namespace": "magnum-system",
                "labels": {CLUSTER_LABEL: "kube-abcde"}, "resourceVersion": "1"},
                "spec": {"replicas": 3, "version": "v1.30.4"},
                "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "version": "v1.30.4"}}),
        );
        cache.upsert(
            Kind::MachineDeployment,
            json!({"kind": "MachineDeployment", "metadata": {"name": "kube-abcde-old-k2j4h", "namespace": "magnum-system",
                "labels": {CLUSTER_LABEL: "kube-abcde", OWNED_LABEL: "", MD_NAME_LABEL: "old"}, "resourceVersion": "1"},
                "spec": {"replicas": 1}}),
        );
        let mut cl = cluster(
            json!([{"class": "default-worker", "name": "default-worker", "replicas": 2,
            "metadata": {"labels": {"node.cluster.x-k8s.io/nodegroup": "default-worker"}}}]),
        );
        cl["spec"]["controlPlaneRef"] = json!({"name": "kube-abcde-xyz12"});
        cl["spec"]["infrastructureRef"] = json!({"name": "kube-abcde-infra"});
        let mut c = Ctx::new(&cache, Line::V1beta1);
        reconcile(&mut c, &cl);
        let md = &created(&c, Kind::MachineDeployment)[0];
        assert!(name(md).starts_with("kube-abcde-default-worker-"));
        assert_eq!(md["spec"]["replicas"], 2);
        assert_eq!(
            md["spec"]["selector"]["matchLabels"][MD_NAME_LABEL],
            "default-worker"
        );
        assert_eq!(
            md["spec"]["template"]["metadata"]["labels"]["node.cluster.x-k8s.io/nodegroup"],
            "default-worker"
        );
        assert!(c.actions.iter().any(|a| matches!(a,
            Action::Delete { kind: Kind::MachineDeployment, name, .. } if name == "kube-abcde-old-k2j4h")));
        // Nothing on the v1beta2 line.
        let mut c2 = Ctx::new(&cache, Line::V1beta2);
        reconcile(&mut c2, &cl);
        assert!(c2.actions.is_empty());
    }
}

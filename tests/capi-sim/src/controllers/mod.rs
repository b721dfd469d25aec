//! The simulated controllers of CAPI 1.10/1.14, CAPO 0.12/0.14 and CAAPH
//! 0.4/0.6: pure functions from what the cache holds to the writes the real
//! controller would send ([`Action`]s), executed against the real apiserver
//! by [`crate::runtime`]. Each reconciler cites the upstream code it
//! follows; where it simplifies (no real servers, no Helm), its module says so.
//!
//! - [`openstack`]: OpenStackCluster (CAPO): network, router, API load
//!   balancer, `ready`, or a failure on demand.
//! - [`topology`]: a Cluster's managed topology (ClusterClass): its
//!   infrastructure, control plane and MachineDeployments.
//! - [`cluster`]: Cluster: controller references on its infrastructure and
//!   control plane, `controlPlaneEndpoint`, phase and conditions in the
//!   line's shape; deletion in order.
//! - [`control_plane`]: KubeadmControlPlane: machines one at a time,
//!   rollouts, scale-down order, status.
//! - [`deployments`]: MachineDeployment (rolling updates through
//!   MachineSets) and MachineSet (machines, delete policy).
//! - [`machine`]: Machine: phases, the infrastructure machine's ownership,
//!   addresses, node reference, drain and deletion.
//! - [`health`]: MachineHealthCheck: counts and remediation.
//! - [`addons`]: HelmChartProxy -> HelmReleaseProxy (CAAPH),
//!   ClusterResourceSet -> ClusterResourceSetBinding.
//!
//! Writes are what CAPI's `util/patch` helper sends: a JSON merge patch of
//! metadata and spec, and one of status on the status subresource
//! (cluster-api v1.10 `util/patch/patch.go` `Helper.Patch`: `patch` and
//! `patchStatus`, both `client.MergeFrom`), so a write never conflicts on
//! resourceVersion. Faults by annotation: [`crate::obj::FAIL`],
//! [`crate::obj::NEVER_READY`], [`crate::obj::UNHEALTHY`].

pub mod addons;
pub mod cluster;
pub mod control_plane;
pub mod deployments;
pub mod health;
pub mod machine;
pub mod openstack;
pub mod topology;

use serde_json::{Value, json};

use crate::cache::Cache;
use crate::kinds::{Kind, Line};
use crate::obj::{self, annotation, deleting, name, namespace};

/// A write a reconciler asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create `obj` in `ns` (`metadata.generateName` allowed); a `status`
    /// in it is written to the status subresource afterwards.
    Create { kind: Kind, ns: String, obj: Value },
    /// A JSON merge patch of the object, or of its status subresource.
    Patch {
        kind: Kind,
        ns: String,
        name: String,
        patch: Value,
        status: bool,
    },
    /// Delete (background propagation, as controller-runtime's default).
    Delete {
        kind: Kind,
        ns: String,
        name: String,
    },
}

/// What a reconciler sees and where its writes go.
pub struct Ctx<'a> {
    pub cache: &'a Cache,
    pub line: Line,
    pub v2: bool,
    /// RFC 3339, for condition transition times.
    pub now: String,
    pub actions: Vec<Action>,
    /// With `--workload-apiservers`: the addresses of the workload
    /// clusters' apiservers that are ready, by (namespace, cluster); the
    /// API load balancer CAPO publishes ([`openstack`]). None: simulated
    /// addresses.
    pub endpoints: Option<std::collections::BTreeMap<crate::workload::ClusterKey, (String, u16)>>,
    /// With `--workload-apiservers`, for a Machine of a cluster whose
    /// apiserver is ready: the Nodes registered there ([`machine`] sets a
    /// `nodeRef` only to a Node that exists).
    pub registered_nodes: Option<std::collections::BTreeSet<String>>,
    /// With `--openstack`: where each cluster's network, router and API
    /// load balancer stand in the real Neutron and Octavia ([`openstack`]
    /// waits for them, and on delete for their removal).
    pub infra: Option<std::collections::BTreeMap<crate::workload::ClusterKey, crate::cloud::Infra>>,
    /// With `--helm-engine`, for a HelmReleaseProxy: its release's outcome
    /// in the workload cluster ([`crate::helm`]), None until first tried.
    pub release: Option<Option<crate::helm::Outcome>>,
}

pub type Reconcile = fn(&mut Ctx<'_>, Value);

/// Every reconciler, in the order a pass runs them over a Cluster's objects.
pub fn reconciler(kind: Kind) -> Option<Reconcile> {
    Some(match kind {
        Kind::OpenStackCluster => openstack::reconcile,
        Kind::Cluster => cluster::reconcile,
        Kind::KubeadmControlPlane => control_plane::reconcile,
        Kind::MachineDeployment => deployments::reconcile_deployment,
        Kind::MachineSet => deployments::reconcile_set,
        Kind::Machine => machine::reconcile,
        Kind::MachineHealthCheck => health::reconcile,
        Kind::HelmChartProxy => addons::reconcile_chart_proxy,
        Kind::HelmReleaseProxy => addons::reconcile_release_proxy,
        Kind::ClusterResourceSet => addons::reconcile_resource_set,
        _ => return None,
    })
}

impl<'a> Ctx<'a> {
    pub fn new(cache: &'a Cache, line: Line) -> Ctx<'a> {
        Ctx {
            cache,
            line,
            v2: line.v2(),
            now: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            actions: Vec::new(),
            endpoints: None,
            registered_nodes: None,
            infra: None,
            release: None,
        }
    }

    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<Value> {
        self.cache.get(kind, ns, name).cloned()
    }

    pub fn labelled(&self, kind: Kind, ns: &str, pairs: &[(&str, &str)]) -> Vec<Value> {
        self.cache
            .labelled(kind, ns, pairs)
            .into_iter()
            .cloned()
            .collect()
    }

    /// An annotation of namespace `ns` (faults set for a whole namespace).
    pub fn ns_annotation(&self, ns: &str, key: &str) -> Option<String> {
        self.cache
            .get(Kind::Namespace, "", ns)
            .and_then(|n| annotation(n, key))
            .map(str::to_string)
    }

    pub fn api_version(&self, kind: Kind) -> String {
        kind.api_version(self.line)
    }

    /// Write `next` over `cur`: the status subresource if the status
    /// changed, then metadata and spec if they did.
    pub fn write(&mut self, kind: Kind, cur: &Value, next: Value) {
        let (ns, n) = (namespace(cur).to_string(), name(cur).to_string());
        let status = |v: &Value| json!({"status": v.get("status").cloned().unwrap_or(json!({}))});
        if let Some(p) = obj::merge_patch(&status(cur), &status(&next)) {
            self.actions.push(Action::Patch {
                kind,
                ns: ns.clone(),
                name: n.clone(),
                patch: p,
                status: true,
            });
        }
        let rest = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("status");
            }
            v
        };
        if let Some(p) = obj::merge_patch(&rest(cur), &rest(&next)) {
            self.actions.push(Action::Patch {
                kind,
                ns,
                name: n,
                patch: p,
                status: false,
            });
        }
    }

    pub fn create(&mut self, kind: Kind, ns: &str, obj: Value) {
        self.actions.push(Action::Create {
            kind,
            ns: ns.to_string(),
            obj,
        });
    }

    /// Delete `o` unless it is already being deleted.
    pub fn delete(&mut self, kind: Kind, o: &Value) {
        if deleting(o) {
            return;
        }
        self.actions.push(Action::Delete {
            kind,
            ns: namespace(o).to_string(),
            name: name(o).to_string(),
        });
    }

    /// `controllerutil.AddFinalizer` (not on an object being deleted).
    pub fn ensure_finalizer(&self, o: &mut Value, f: &str) {
        if deleting(o) {
            return;
        }
        let mut list = o["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !list.iter().any(|x| x == f) {
            list.push(json!(f));
            o["metadata"]["finalizers"] = json!(list);
        }
    }

    pub fn drop_finalizer(&self, o: &mut Value, f: &str) {
        if let Some(l) = o["metadata"]["finalizers"].as_array_mut() {
            l.retain(|x| x != f);
        }
    }

    pub fn condition(&self, ty: &str, ok: bool, reason: &str, message: &str) -> Value {
        obj::condition(self.v2, &self.now, ty, ok, reason, message)
    }

    /// The v1beta2 conditions of normal-False polarity that cluster-api
    /// v1.14 writes on a Cluster, KubeadmControlPlane, MachineDeployment or
    /// MachineSet at rest, with their reasons (`api/core/v1beta2`
    /// `cluster_types.go`, `machinedeployment_types.go`; `api/controlplane/
    /// kubeadm/v1beta2` `v1beta2_condition_consts.go`: `NotRollingOut`,
    /// `NotScalingUp`, `NotScalingDown`, `NotRemediating`, `NotDeleting`,
    /// `NotPaused`), each True with `active` while that is going on.
    pub fn negative_conditions(&self, active: &[(&str, &str, &str)]) -> Vec<Value> {
        [
            ("RollingOut", "NotRollingOut"),
            ("ScalingUp", "NotScalingUp"),
            ("ScalingDown", "NotScalingDown"),
            ("Remediating", "NotRemediating"),
            ("Deleting", "NotDeleting"),
            ("Paused", "NotPaused"),
        ]
        .iter()
        .map(|(ty, not)| match active.iter().find(|(t, _, _)| t == ty) {
            Some((_, reason, message)) => self.condition(ty, true, reason, message),
            None => self.condition(ty, false, not, ""),
        })
        .collect()
    }

    pub fn condition_with(
        &self,
        ty: &str,
        ok: bool,
        reason: &str,
        severity: &str,
        message: &str,
    ) -> Value {
        obj::condition_with(self.v2, &self.now, ty, ok, reason, severity, message)
    }
}

pub use crate::obj::selector_matches;

/// A Cluster's infrastructure is provisioned (v1beta1 or v1beta2 shape).
pub fn infra_provisioned(cl: &Value) -> bool {
    cl.pointer("/status/infrastructureReady") == Some(&json!(true))
        || cl.pointer("/status/initialization/infrastructureProvisioned") == Some(&json!(true))
}

/// A Cluster's control plane is initialized (v1beta1 or v1beta2 shape).
pub fn cp_initialized(cl: &Value) -> bool {
    cl.pointer("/status/controlPlaneReady") == Some(&json!(true))
        || cl.pointer("/status/initialization/controlPlaneInitialized") == Some(&json!(true))
}

pub fn ready_machine(m: &Value) -> bool {
    m.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

pub fn spec_replicas(o: &Value) -> i64 {
    o.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

pub fn status_int(o: &Value, k: &str) -> i64 {
    o.pointer(&format!("/status/{k}"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Create a Machine and, first, its infrastructure machine cloned from
/// `template`, as a MachineSet (cluster-api v1.10
/// `machineset_controller.go` `syncReplicas`) and a KubeadmControlPlane
/// (`controlplane/kubeadm/internal/controllers/helpers.go`
/// `cloneConfigsAndGenerateMachine`) do: the clone is named like the
/// Machine, carries `cluster.x-k8s.io/cloned-from-name` and
/// `-groupkind` and the cluster-name label (`controllers/external/util.go`
/// `GenerateTemplate`), and is owned by the creator, not as controller,
/// until the Machine's controller takes it over ([`machine`]). Bootstrap
/// configs (KubeadmConfig) are not created: nothing the conductor reads
/// depends on them.
pub fn create_machine(c: &mut Ctx<'_>, creator: &Value, machine: Value, template: &str) {
    let ns = namespace(creator).to_string();
    let mname = name(&machine).to_string();
    let cluster = machine
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let spec = c
        .get(Kind::OpenStackMachineTemplate, &ns, template)
        .and_then(|t| t.pointer("/spec/template/spec").cloned())
        .unwrap_or(json!({}));
    let mut labels = machine["metadata"]["labels"].clone();
    labels[obj::CLUSTER_LABEL] = json!(cluster);
    c.create(
        Kind::OpenStackMachine,
        &ns,
        json!({
            "apiVersion": c.api_version(Kind::OpenStackMachine), "kind": "OpenStackMachine",
            "metadata": {"name": mname, "labels": labels,
                         "annotations": {"cluster.x-k8s.io/cloned-from-name": template,
                                         "cluster.x-k8s.io/cloned-from-groupkind": "OpenStackMachineTemplate.infrastructure.cluster.x-k8s.io"},
                         "ownerReferences": [obj::owner_ref(creator, false)]},
            "spec": spec}),
    );
    c.create(Kind::Machine, &ns, machine);
}

/// A Machine for a control plane or machine set (v1beta1 or v1beta2 refs),
/// named `<owner>-<random>` (the default naming template of both).
pub fn new_machine(
    c: &Ctx<'_>,
    owner: &Value,
    cluster: &str,
    version: Option<&Value>,
    labels: Value,
) -> Value {
    let mname = obj::generate_name(&format!("{}-", name(owner)));
    let ns = namespace(owner);
    let infra_ref = if c.v2 {
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachine", "name": mname})
    } else {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine", "name": mname, "namespace": ns})
    };
    let bootstrap_ref = if c.v2 {
        json!({"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": mname}})
    } else {
        json!({"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": mname, "namespace": ns}})
    };
    let mut m = json!({"apiVersion": c.api_version(Kind::Machine), "kind": "Machine",
        "metadata": {"name": mname, "labels": labels, "ownerReferences": [obj::owner_ref(owner, true)],
                     "finalizers": ["machine.cluster.x-k8s.io"]},
        "spec": {"clusterName": cluster, "bootstrap": bootstrap_ref, "infrastructureRef": infra_ref}});
    if let Some(v) = version {
        m["spec"]["version"] = v.clone();
    }
    if annotation(owner, obj::NEVER_READY).is_some() {
        m["metadata"]["annotations"] = json!({obj::NEVER_READY: "true"});
    }
    m
}

/// The Cluster as owner (not controller) of a machine template, as a
/// MachineSet (`reconcileExternalTemplateReference`) and a
/// KubeadmControlPlane (`reconcileExternalReference`) make it.
pub fn own_template(c: &mut Ctx<'_>, ns: &str, template: &str, cluster: &str) {
    let (Some(t), Some(cl)) = (
        c.get(Kind::OpenStackMachineTemplate, ns, template),
        c.get(Kind::Cluster, ns, cluster),
    ) else {
        return;
    };
    let desired = json!({"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": cluster,
                         "uid": obj::meta(&cl, "uid")});
    let mut refs = obj::owner_refs(&t);
    if obj::has_exact_owner_ref(&refs, &desired) || deleting(&t) {
        return;
    }
    obj::ensure_owner_ref(&mut refs, desired);
    let mut next = t.clone();
    next["metadata"]["ownerReferences"] = json!(refs);
    c.write(Kind::OpenStackMachineTemplate, &t, next);
}

/// An int-or-percent of `total` (CAPI's GetScaledValueFromIntOrPercent).
pub fn scaled(v: Option<&Value>, total: i64, round_up: bool, default: i64) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(default),
        Some(Value::String(p)) if p.ends_with('%') => {
            let pct: i64 = p.trim_end_matches('%').parse().unwrap_or(0);
            let x = pct * total;
            if round_up { (x + 99) / 100 } else { x / 100 }
        }
        Some(Value::String(p)) => p.parse().unwrap_or(default),
        _ => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_split_status_from_the_rest_and_skip_what_did_not_change() {
        let cache = Cache::default();
        let mut c = Ctx::new(&cache, Line::V1beta1);
        let cur = json!({"metadata": {"name": "m", "namespace": "n", "resourceVersion": "3"},
                         "spec": {"x": 1}, "status": {"phase": "Pending"}});
        c.write(Kind::Machine, &cur, cur.clone());
        assert!(c.actions.is_empty(), "nothing changed, nothing sent");
        let mut next = cur.clone();
        next["status"]["phase"] = json!("Running");
        next["metadata"]["finalizers"] = json!(["f"]);
        c.write(Kind::Machine, &cur, next);
        assert_eq!(
            c.actions,
            vec![
                Action::Patch {
                    kind: Kind::Machine,
                    ns: "n".into(),
                    name: "m".into(),
                    patch: json!({"status": {"phase": "Running"}}),
                    status: true
                },
                Action::Patch {
                    kind: Kind::Machine,
                    ns: "n".into(),
                    name: "m".into(),
                    patch: json!({"metadata": {"finalizers": ["f"]}}),
                    status: false
                },
            ]
        );
    }

    #[test]
    fn int_or_percent() {
        assert_eq!(scaled(Some(&json!("25%")), 5, true, 0), 2);
        assert_eq!(scaled(Some(&json!("25%")), 5, false, 0), 1);
        assert_eq!(scaled(Some(&json!(3)), 5, false, 0), 3);
        assert_eq!(scaled(None, 5, false, 7), 7);
    }
}

//! The management cluster as the status mapper needs it (pure).
//!
//! The watches ([`super::watch`]) feed every event of the six watched kinds
//! in here; the status worker asks for one CAPI cluster's objects at a time.
//! Built for fleets of 10,000 clusters (~80,000 objects):
//!
//! - **indexed by cluster**: objects are filed under the (namespace, CAPI
//!   cluster name) they belong to, so one cluster's view costs that
//!   cluster's objects, not a scan of the fleet (kube-runtime's store
//!   offers only a scan: a full status pass was quadratic);
//! - **projected**: only what [`crate::capi::status`] and
//!   [`super::plan`] read is kept ([`project`]): no `managedFields` (with
//!   server-side apply, often the largest part of an object), no Helm
//!   values, no OpenStack network inventory, no kubeadm configuration;
//! - **kept as compact JSON text** and parsed when a cluster is looked at:
//!   a parsed `serde_json` tree takes several times the bytes of its text.
//!
//! A relist (a watch restarted: objects may have gone meanwhile without an
//! event) is built aside and swapped in whole when complete, as
//! kube-runtime's reflector does.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::capi::render::{CLUSTER_NAME_LABEL, UUID_LABEL};
use crate::capi::status::Observed;

/// The watched kinds, by what the status mapper does with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Cluster,
    Infra,
    ControlPlane,
    MachineDeployment,
    Machine,
    HelmRelease,
    /// The EndpointSlices `magnum-capi-proxy` hosts publish for a cluster
    /// without an API floating IP (they carry the cluster's label).
    ApiSlice,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Role::Cluster,
        Role::Infra,
        Role::ControlPlane,
        Role::MachineDeployment,
        Role::Machine,
        Role::HelmRelease,
        Role::ApiSlice,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Keep only the fields of `o` that [`crate::capi::status::map`] and
/// [`super::plan`] read (a test below maps full and projected objects and
/// compares): what is not read here is not in the cache.
pub fn project(role: Role, mut o: Value) -> Value {
    let Some(obj) = o.as_object_mut() else {
        return o;
    };
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "ownerReferences",
            "resourceVersion",
            "creationTimestamp",
            "selfLink",
        ] {
            m.remove(k);
        }
        // A Cluster's uid is what the ownerReferences of every other object
        // name (the apiserver refuses an empty one: 422); the others' is not read.
        if role != Role::Cluster {
            m.remove("uid");
        }
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
            if a.is_empty() {
                m.remove("annotations");
            }
        }
    }
    let keep = |v: Option<&Value>, fields: &[&str]| -> Value {
        let mut out = Map::new();
        if let Some(v) = v.and_then(Value::as_object) {
            for f in fields {
                if let Some(x) = v.get(*f) {
                    out.insert((*f).to_string(), x.clone());
                }
            }
        }
        Value::Object(out)
    };
    match role {
        // The mapper reads an OpenStackCluster's failure, readiness and
        // network only.
        Role::Infra => {
            let mut status = keep(
                obj.get("status"),
                &["ready", "failureMessage", "failureReason", "conditions"],
            );
            if let Some(id) = obj.get("status").and_then(|s| s.pointer("/network/id")) {
                status["network"] = serde_json::json!({"id": id});
            }
            obj.remove("spec");
            obj.insert("status".into(), status);
        }
        // The addon's release name and status; not the Helm values.
        Role::HelmRelease => {
            let spec = keep(obj.get("spec"), &["releaseName"]);
            obj.insert("spec".into(), spec);
        }
        // Version, replicas and the machine template; not kubeadm's files.
        Role::ControlPlane => {
            if let Some(s) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                s.remove("kubeadmConfigSpec");
            }
        }
        // Its version and provider id; whether it has a node, not the node's
        // inventory.
        Role::Machine => {
            let spec = keep(obj.get("spec"), &["version", "providerID"]);
            obj.insert("spec".into(), spec);
            if let Some(s) = obj.get_mut("status").and_then(Value::as_object_mut) {
                s.remove("nodeInfo");
                if let Some(n) = s.get_mut("nodeRef") {
                    *n = keep(Some(n), &["name"]);
                }
            }
        }
        // Whether a proxy host is ready to pass connections, and which.
        Role::ApiSlice => {
            if let Some(Value::Array(es)) = obj.get_mut("endpoints") {
                for e in es.iter_mut() {
                    *e = keep(Some(e), &["addresses", "conditions"]);
                }
            }
            obj.remove("ports");
        }
        Role::Cluster | Role::MachineDeployment => {}
    }
    if let Some(s) = obj.get_mut("status").and_then(Value::as_object_mut) {
        // Conditions as the mapper reads them: type, status, reason, message.
        if let Some(Value::Array(cs)) = s.get_mut("conditions") {
            for c in cs.iter_mut() {
                *c = keep(Some(c), &["type", "status", "reason", "message"]);
            }
        }
        // CAPI v1beta2's copy of the v1beta1 status: its failure message
        // only; v1beta1's preview of v1beta2 conditions: not read.
        if let Some(d) = s.get_mut("deprecated") {
            let failure = d.pointer("/v1beta1/failureMessage").cloned();
            *d = match failure {
                Some(f) => serde_json::json!({"v1beta1": {"failureMessage": f}}),
                None => Value::Object(Map::new()),
            };
        }
        s.remove("v1beta2");
    }
    o
}

/// (namespace, CAPI cluster name).
pub type Key = (String, String);

fn str_at<'a>(o: &'a Value, path: &str) -> Option<&'a str> {
    o.pointer(path).and_then(Value::as_str)
}

/// The (namespace, CAPI cluster name) `o` belongs to: a Cluster is its own;
/// the others carry CAPI's `cluster.x-k8s.io/cluster-name` label.
pub fn key_of(role: Role, o: &Value) -> Option<Key> {
    let ns = str_at(o, "/metadata/namespace")?;
    let name = if role == Role::Cluster {
        str_at(o, "/metadata/name")?
    } else {
        o.pointer("/metadata/labels")
            .and_then(|l| l.get(CLUSTER_NAME_LABEL))
            .and_then(Value::as_str)?
    };
    Some((ns.to_string(), name.to_string()))
}

/// One kind's objects.
#[derive(Default)]
struct Objects {
    /// Cluster -> object name -> projected object as compact JSON.
    by_cluster: HashMap<Key, BTreeMap<Box<str>, Box<str>>>,
    /// (namespace, object name) -> the cluster name it is filed under (an
    /// object whose label changes moves).
    filed: HashMap<(Box<str>, Box<str>), Box<str>>,
    bytes: usize,
    count: usize,
}

impl Objects {
    /// File `o`; the clusters whose view changed (its old one if it moved).
    fn put(&mut self, role: Role, o: Value) -> Vec<Key> {
        let Some(key) = key_of(role, &o) else {
            return Vec::new();
        };
        let Some(name) = str_at(&o, "/metadata/name").map(Box::<str>::from) else {
            return Vec::new();
        };
        let mut touched = Vec::new();
        let id = (Box::<str>::from(key.0.as_str()), name.clone());
        if let Some(old) = self.filed.get(&id)
            && **old != *key.1
        {
            let old_key = (key.0.clone(), old.to_string());
            self.remove_from(&old_key, &name);
            touched.push(old_key);
        }
        let text: Box<str> = project(role, o).to_string().into();
        self.bytes += text.len();
        let group = self.by_cluster.entry(key.clone()).or_default();
        match group.insert(name, text) {
            Some(prev) => self.bytes -= prev.len(),
            None => self.count += 1,
        }
        self.filed.insert(id, key.1.as_str().into());
        touched.push(key);
        touched
    }

    fn remove_from(&mut self, key: &Key, name: &str) {
        if let Some(group) = self.by_cluster.get_mut(key) {
            if let Some(prev) = group.remove(name) {
                self.bytes -= prev.len();
                self.count -= 1;
            }
            if group.is_empty() {
                self.by_cluster.remove(key);
            }
        }
    }

    fn delete(&mut self, role: Role, o: &Value) -> Option<Key> {
        let ns = str_at(o, "/metadata/namespace")?;
        let name = str_at(o, "/metadata/name")?;
        let filed = self.filed.remove(&(ns.into(), name.into()));
        let key = match filed {
            Some(c) => (ns.to_string(), c.to_string()),
            None => key_of(role, o)?,
        };
        self.remove_from(&key, name);
        Some(key)
    }
}

/// One kind: what is live, and a relist being built.
#[derive(Default)]
struct Kind {
    live: Objects,
    relist: Option<Objects>,
}

/// The watched kinds' objects, indexed by cluster.
#[derive(Default)]
pub struct Cache {
    kinds: [Kind; 7],
}

/// Sizes, for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub objects: usize,
    pub bytes: usize,
}

impl Cache {
    /// An object was added or changed: the clusters to look at again.
    pub fn apply(&mut self, role: Role, o: Value) -> Vec<Key> {
        self.kinds[role.index()].live.put(role, o)
    }

    /// An object was deleted.
    pub fn delete(&mut self, role: Role, o: &Value) -> Option<Key> {
        self.kinds[role.index()].live.delete(role, o)
    }

    /// A (re)list of `role` starts: what it lists replaces what is live.
    pub fn relist_begin(&mut self, role: Role) {
        self.kinds[role.index()].relist = Some(Objects::default());
    }

    /// One object of the relist.
    pub fn relist_apply(&mut self, role: Role, o: Value) {
        let k = &mut self.kinds[role.index()];
        k.relist.get_or_insert_with(Objects::default).put(role, o);
    }

    /// The relist is complete: swap it in.
    pub fn relist_done(&mut self, role: Role) {
        let k = &mut self.kinds[role.index()];
        if let Some(r) = k.relist.take() {
            k.live = r;
        }
    }

    /// What the cache holds for CAPI cluster `name` in `ns` (each kind's
    /// objects in name order).
    pub fn observed(&self, ns: &str, name: &str) -> Observed {
        let key = (ns.to_string(), name.to_string());
        let items = |role: Role| -> Vec<Value> {
            self.kinds[role.index()]
                .live
                .by_cluster
                .get(&key)
                .map(|g| {
                    g.values()
                        .filter_map(|t| serde_json::from_str(t).ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        Observed {
            cluster: items(Role::Cluster).into_iter().next(),
            infra: items(Role::Infra).into_iter().next(),
            control_plane: items(Role::ControlPlane).into_iter().next(),
            machine_deployments: items(Role::MachineDeployment),
            machines: items(Role::Machine),
            helm_releases: items(Role::HelmRelease),
            api_slices: items(Role::ApiSlice),
        }
    }

    /// Every CAPI Cluster: (namespace, name).
    pub fn clusters(&self) -> Vec<Key> {
        self.kinds[Role::Cluster.index()]
            .live
            .by_cluster
            .keys()
            .cloned()
            .collect()
    }

    /// Whether CAPI Cluster `ns`/`name` is cached (outer `Some`) and the
    /// Magnum cluster uuid it carries (our `magnum.openstack.org/cluster-uuid`
    /// label; `Some(None)`: a Cluster without it, which another driver made).
    pub fn uuid_of(&self, ns: &str, name: &str) -> Option<Option<String>> {
        let key = (ns.to_string(), name.to_string());
        let text = self.kinds[Role::Cluster.index()]
            .live
            .by_cluster
            .get(&key)?
            .values()
            .next()?;
        let v: Value = serde_json::from_str(text).ok()?;
        Some(
            v.pointer("/metadata/labels")
                .and_then(|l| l.get(UUID_LABEL))
                .and_then(Value::as_str)
                .map(str::to_string),
        )
    }

    /// What one kind holds (live).
    pub fn size(&self, role: Role) -> Size {
        let l = &self.kinds[role.index()].live;
        Size {
            objects: l.count,
            bytes: l.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::status::{self, Clock, GroupTarget, Operation, Targets};
    use serde_json::json;

    const NS: &str = "magnum-p1";

    fn md(name: &str, cluster: &str, replicas: i64) -> Value {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
               "metadata": {"name": name, "namespace": NS, "uid": "u-1", "resourceVersion": "7",
                            "labels": {CLUSTER_NAME_LABEL: cluster, "magnum.openstack.org/nodegroup": "default-worker"},
                            "managedFields": [{"manager": "magnum-conductor", "operation": "Apply",
                                               "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
               "spec": {"replicas": replicas, "clusterName": cluster,
                        "template": {"spec": {"version": "v1.30.4", "infrastructureRef": {"name": "t-1"}}}},
               "status": {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas,
                          "phase": "Running", "observedGeneration": 1}})
    }

    #[test]
    fn objects_are_filed_under_their_cluster_and_move_with_their_label() {
        let mut c = Cache::default();
        assert_eq!(
            c.apply(Role::MachineDeployment, md("a-md", "a", 1)),
            vec![(NS.to_string(), "a".to_string())]
        );
        c.apply(Role::MachineDeployment, md("b-md", "b", 2));
        assert_eq!(c.observed(NS, "a").machine_deployments.len(), 1);
        assert_eq!(
            c.observed(NS, "b").machine_deployments[0]["spec"]["replicas"],
            2
        );
        assert!(c.observed("other", "a").machine_deployments.is_empty());
        // Relabelled: leaves cluster a, and both are looked at again.
        let touched = c.apply(Role::MachineDeployment, md("a-md", "b", 3));
        assert_eq!(
            touched,
            vec![
                (NS.to_string(), "a".to_string()),
                (NS.to_string(), "b".to_string())
            ]
        );
        assert!(c.observed(NS, "a").machine_deployments.is_empty());
        assert_eq!(c.observed(NS, "b").machine_deployments.len(), 2);
        assert_eq!(c.size(Role::MachineDeployment).objects, 2);
        // Deleted with its labels gone (a delete event carries the last state).
        let mut gone = md("a-md", "x", 3);
        gone["metadata"]["labels"] = json!({});
        assert_eq!(
            c.delete(Role::MachineDeployment, &gone),
            Some((NS.to_string(), "b".to_string()))
        );
        assert_eq!(c.size(Role::MachineDeployment).objects, 1);
        c.delete(Role::MachineDeployment, &md("b-md", "b", 2));
        assert_eq!(c.size(Role::MachineDeployment), Size::default());
        assert!(
            c.kinds[Role::MachineDeployment.index()]
                .live
                .by_cluster
                .is_empty()
        );
    }

    #[test]
    fn a_clusters_uid_is_kept_for_the_owner_references_of_its_objects() {
        // Day-2 applies name the CAPI Cluster as owner from this cache; the
        // apiserver refuses an ownerReference without a uid (HTTP 422).
        let mut cl = md("k-1", "k-1", 1);
        cl["kind"] = json!("Cluster");
        let projected = project(Role::Cluster, cl.clone());
        assert_eq!(projected["metadata"]["uid"], "u-1");
        assert!(projected["metadata"].get("managedFields").is_none());
        let mut c = Cache::default();
        c.apply(Role::Cluster, cl);
        let cached = c.observed(NS, "k-1").cluster.unwrap();
        assert_eq!(cached["metadata"]["uid"], "u-1");
        // Other kinds' uids are not read: not kept.
        assert!(
            project(Role::MachineDeployment, md("a", "k-1", 1))["metadata"]
                .get("uid")
                .is_none()
        );
    }

    #[test]
    fn a_relist_replaces_what_was_live_only_when_complete() {
        let mut c = Cache::default();
        c.apply(Role::MachineDeployment, md("a-md", "a", 1));
        c.apply(Role::MachineDeployment, md("b-md", "b", 1));
        c.relist_begin(Role::MachineDeployment);
        c.relist_apply(Role::MachineDeployment, md("b-md", "b", 5));
        // Until it is done, readers see the old state.
        assert_eq!(c.observed(NS, "a").machine_deployments.len(), 1);
        c.relist_done(Role::MachineDeployment);
        assert!(
            c.observed(NS, "a").machine_deployments.is_empty(),
            "deleted while the watch was down"
        );
        assert_eq!(
            c.observed(NS, "b").machine_deployments[0]["spec"]["replicas"],
            5
        );
        assert_eq!(c.size(Role::MachineDeployment).objects, 1);
    }

    #[test]
    fn clusters_and_their_magnum_uuids() {
        let mut c = Cache::default();
        c.apply(
            Role::Cluster,
            json!({"metadata": {"name": "k-1", "namespace": NS,
                                "labels": {UUID_LABEL: "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", CLUSTER_NAME_LABEL: "k-1"}}}),
        );
        c.apply(
            Role::Cluster,
            json!({"metadata": {"name": "k-2", "namespace": NS}}),
        );
        let mut all = c.clusters();
        all.sort();
        assert_eq!(
            all,
            vec![
                (NS.to_string(), "k-1".to_string()),
                (NS.to_string(), "k-2".to_string())
            ]
        );
        assert_eq!(
            c.uuid_of(NS, "k-1"),
            Some(Some("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e".to_string()))
        );
        // Cached without our label (another driver's), and not cached.
        assert_eq!(c.uuid_of(NS, "k-2"), Some(None));
        assert_eq!(c.uuid_of(NS, "k-3"), None);
    }

    /// What is projected away is what the mapper does not read: the same
    /// view from full objects and from the cache (a realistic cluster in
    /// the middle of a rollout, with the fields the projection drops).
    #[test]
    fn the_projection_keeps_what_the_mapper_reads() {
        let meta = |name: &str, extra: Value| {
            let mut m = json!({"name": name, "namespace": NS, "uid": "x", "resourceVersion": "9",
                               "creationTimestamp": "2026-01-01T00:00:00Z",
                               "labels": {CLUSTER_NAME_LABEL: "k"},
                               "annotations": {LAST_APPLIED: "{\"big\": true}"},
                               "managedFields": [{"manager": "capi", "fieldsV1": {"f:status": {}}}],
                               "ownerReferences": [{"kind": "Cluster", "name": "k"}]});
            for (k, v) in extra.as_object().unwrap() {
                m[k] = v.clone();
            }
            m
        };
        let cond = |t: &str, s: &str| {
            json!({"type": t, "status": s, "reason": if s == "True" {""} else {"Waiting"}, "message": "m",
                                             "severity": if s == "True" {""} else {"Info"},
                                             "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        let cluster = json!({"metadata": meta("k", json!({"finalizers": ["cluster.cluster.x-k8s.io"],
                                                           "labels": {CLUSTER_NAME_LABEL: "k", UUID_LABEL: "u"}})),
            "spec": {"controlPlaneEndpoint": {"host": "203.0.113.10", "port": 6443}},
            "status": {"phase": "Provisioned", "conditions": [cond("Ready", "False"), cond("ControlPlaneReady", "False")]}});
        let infra = json!({"metadata": meta("k", json!({})),
            "spec": {"externalNetwork": {"id": "n"}, "managedSubnets": [{"cidr": "10.0.0.0/24"}]},
            "status": {"ready": true, "network": {"id": "n", "subnets": [{"cidr": "10.0.0.0/24"}]},
                       "router": {"ips": ["1.2.3.4"]}, "conditions": [cond("Ready", "True")]}});
        let kcp = json!({"metadata": meta("k-cp", json!({"generation": 2})),
            "spec": {"replicas": 3, "version": "v1.31.1",
                     "machineTemplate": {"infrastructureRef": {"name": "k-cp-abc"}},
                     "kubeadmConfigSpec": {"files": [{"path": "/etc/x", "content": "x".repeat(4000)}]}},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 1, "version": "v1.30.4",
                       "observedGeneration": 2, "conditions": [cond("Ready", "False")]}});
        let md = md("k-md", "k", 2);
        let machine = |n: &str, cp: bool, ip: &str| {
            let mut labels = json!({CLUSTER_NAME_LABEL: "k"});
            if cp {
                labels["cluster.x-k8s.io/control-plane"] = json!("");
            } else {
                labels["magnum.openstack.org/nodegroup"] = json!("default-worker");
            }
            json!({"metadata": meta(n, json!({"labels": labels})),
                   "spec": {"clusterName": "k", "version": "v1.30.4", "providerID": format!("openstack:///{n}"),
                            "infrastructureRef": {"name": n}},
                   "status": {"phase": "Running", "addresses": [{"type": "InternalIP", "address": ip}],
                              "nodeRef": {"name": n, "uid": "x", "kind": "Node", "apiVersion": "v1"},
                              "nodeInfo": {"kernelVersion": "6.1", "osImage": "Ubuntu"},
                              "conditions": [cond("Ready", "True")],
                              "v1beta2": {"conditions": [cond("Available", "True")]},
                              "deprecated": {"v1beta1": {"conditions": [cond("Ready", "True")],
                                                         "failureMessage": if cp { "" } else { "boom" }}}}})
        };
        let hrp = json!({"metadata": meta("k-cni", json!({})),
            "spec": {"releaseName": "cni-calico", "values": "x".repeat(5000), "chartName": "tigera-operator"},
            "status": {"status": "deployed", "conditions": [cond("Ready", "True")]}});
        let slice = json!({"metadata": meta("k-apiserver-h1", json!({"labels": {
                CLUSTER_NAME_LABEL: "k",
                "endpointslice.kubernetes.io/managed-by": common::api_proxy::MANAGED_BY}})),
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["192.0.2.1"], "conditions": {"ready": true, "serving": true},
                           "nodeName": "h1"}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]});
        let full = Observed {
            cluster: Some(cluster.clone()),
            infra: Some(infra.clone()),
            control_plane: Some(kcp.clone()),
            machine_deployments: vec![md.clone()],
            machines: vec![
                machine("k-cp-1", true, "10.0.0.3"),
                machine("k-md-1", false, "10.0.0.4"),
            ],
            helm_releases: vec![hrp.clone()],
            api_slices: vec![slice.clone()],
        };
        let mut c = Cache::default();
        c.apply(Role::Cluster, cluster);
        c.apply(Role::Infra, infra);
        c.apply(Role::ControlPlane, kcp);
        c.apply(Role::MachineDeployment, md);
        for m in &full.machines {
            c.apply(Role::Machine, m.clone());
        }
        c.apply(Role::HelmRelease, hrp);
        c.apply(Role::ApiSlice, slice);
        let cached = c.observed(NS, "k");
        let targets = Targets {
            control_plane: GroupTarget {
                replicas: Some(3),
                version: "v1.31.1".into(),
                ..GroupTarget::default()
            },
            workers: vec![GroupTarget {
                key: "default-worker".into(),
                replicas: Some(2),
                version: "v1.30.4".into(),
                ..GroupTarget::default()
            }],
            proxied: true,
        };
        let clock = Clock {
            elapsed_min: 3,
            create_timeout_min: 60,
            stalled_min: 0,
            update_timeout_min: 60,
        };
        for op in [Operation::Create, Operation::Update, Operation::Delete] {
            assert_eq!(
                status::map(op, &full, &targets, clock),
                status::map(op, &cached, &targets, clock),
                "{op:?}"
            );
        }
        assert_eq!(
            cached.machine_deployments[0]["spec"], full.machine_deployments[0]["spec"],
            "the plan reads a MachineDeployment's whole spec"
        );
        let full_bytes: usize = [&full.cluster, &full.infra, &full.control_plane]
            .iter()
            .filter_map(|o| o.as_ref())
            .chain(full.machine_deployments.iter())
            .chain(full.machines.iter())
            .chain(full.helm_releases.iter())
            .map(|o| o.to_string().len())
            .sum();
        let cached_bytes: usize = Role::ALL.iter().map(|r| c.size(*r).bytes).sum();
        assert!(
            cached_bytes * 4 < full_bytes,
            "{cached_bytes} of {full_bytes} bytes"
        );
    }
}

//! The management cluster as the status mapper needs it (pure).
//!
//! The watches ([`super::watch`]) feed every event of the seven watched kinds
//! in here; the status worker asks for one CAPI cluster's objects at a time.
//! Built for fleets of 10,000 clusters (~100,000 objects):
//!
//! - **indexed by cluster**: objects are filed under the (namespace, CAPI
//!   cluster name) they belong to, so one cluster's view costs that
//!   cluster's objects, not a scan of the fleet (kube-runtime's store
//!   offers only a scan: a full status pass was quadratic); a cluster's
//!   objects of every kind are one small vector (a map per kind and an
//!   index of every object's cluster weighed as much as the objects);
//! - **projected**: only what [`crate::capi::status`] and
//!   [`super::plan`] read is kept ([`project`]): no `managedFields` (with
//!   server-side apply, often the largest part of an object), no Helm
//!   values, no OpenStack network inventory, no kubeadm configuration, no
//!   labels nobody reads here;
//! - **kept as compact JSON text** and parsed when a cluster is looked at:
//!   a parsed `serde_json` tree takes several times the bytes of its text.
//!
//! `mc-cache-bytes` (tests/bin/cache_bytes.rs) counts the heap this holds per
//! cluster: 7.2 KB for a served cluster of ten objects (docs/benchmarks.md).
//!
//! A relist (a watch restarted: objects may have gone meanwhile without an
//! event) is gathered aside and replaces its kind whole when complete, as
//! kube-runtime's reflector does.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::capi::render::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, DEPLOYMENT_NAME_LABEL, NODEGROUP_LABEL, UUID_LABEL,
};
use crate::capi::status::Observed;
use crate::capi::topology::{MD_NAME_LABEL, OWNED_LABEL};

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

/// The labels [`crate::capi::status`] reads (a Cluster's uuid label too:
/// [`Cache::uuid_of`]).
const READ_LABELS: [&str; 7] = [
    CLUSTER_NAME_LABEL,
    NODEGROUP_LABEL,
    CONTROL_PLANE_LABEL,
    DEPLOYMENT_NAME_LABEL,
    OWNED_LABEL,
    MD_NAME_LABEL,
    common::api_proxy::MANAGED_BY_LABEL,
];

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
        // name (the apiserver refuses an empty one: 422); the others' is not
        // read, nor their namespace (the cluster's, filed under it).
        if role != Role::Cluster {
            m.remove("uid");
            m.remove("namespace");
        }
        // An object's name is not read from what generated it.
        m.remove("generateName");
        // The labels the mapper and the plan read; our project and cluster
        // labels (and CAPI's set and template hashes) are read elsewhere from
        // the apiserver, not from here: ~1 KB of ~9 per cluster.
        if let Some(l) = m.get_mut("labels").and_then(Value::as_object_mut) {
            l.retain(|k, _| {
                READ_LABELS.contains(&k.as_str()) || (role == Role::Cluster && k == UUID_LABEL)
            });
        }
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
            if a.is_empty() {
                m.remove("annotations");
            }
        }
    }
    // A Cluster is read back as a typed object (the owner of day-2
    // objects); the others' kind is the role they are filed under.
    if role != Role::Cluster {
        obj.remove("apiVersion");
        obj.remove("kind");
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

/// One cached object of a cluster.
struct Entry {
    role: Role,
    name: Box<str>,
    /// The projected object as compact JSON.
    text: Box<str>,
}

/// One CAPI cluster's objects of every kind, ordered by (kind, name).
///
/// One small vector per cluster, not a map per kind: at 10,000 clusters the
/// per-kind maps and their keys weighed about as much as the objects
/// (`mc-cache-bytes`, docs/benchmarks.md).
#[derive(Default)]
struct Group(Vec<Entry>);

impl Group {
    fn find(&self, role: Role, name: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|e| (e.role.index(), &*e.name).cmp(&(role.index(), name)))
    }

    fn of(&self, role: Role) -> impl Iterator<Item = &Entry> {
        self.0.iter().filter(move |e| e.role == role)
    }
}

/// An object of a relist: (cluster, object name, projected text).
type Listed = (Key, Box<str>, Box<str>);

/// Objects count and bytes, per kind.
#[derive(Default, Clone, Copy)]
struct Tally {
    objects: [usize; 7],
    bytes: [usize; 7],
}

impl Tally {
    fn add(&mut self, role: Role, text: &str) {
        self.objects[role.index()] += 1;
        self.bytes[role.index()] += text.len();
    }

    fn sub(&mut self, role: Role, text: &str) {
        self.objects[role.index()] -= 1;
        self.bytes[role.index()] -= text.len();
    }
}

/// The watched kinds' objects, indexed by namespace, then by cluster.
///
/// An object is found under the cluster its label names. One whose label
/// changed (it moves) or went (a delete that no longer says) is looked for
/// among its namespace's other clusters: a scan of one project's clusters,
/// on an event CAPI does not make in practice, instead of an index of every
/// object's cluster that costs ~200 bytes per object at all times.
#[derive(Default)]
pub struct Cache {
    namespaces: HashMap<Arc<str>, HashMap<Box<str>, Group>>,
    tally: Tally,
    /// Per kind, a relist being gathered.
    relists: [Option<Vec<Listed>>; 7],
}

/// Sizes, for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub objects: usize,
    pub bytes: usize,
}

impl Cache {
    fn group(&self, ns: &str, name: &str) -> Option<&Group> {
        self.namespaces.get(ns)?.get(name)
    }

    /// File `text` as `role`'s object `name` of cluster `key`, replacing the
    /// same object there (not looked for elsewhere).
    fn file(&mut self, key: &Key, role: Role, name: Box<str>, text: Box<str>) {
        let ns = match self.namespaces.get_key_value(key.0.as_str()) {
            Some((ns, _)) => ns.clone(),
            None => Arc::from(key.0.as_str()),
        };
        let group = self
            .namespaces
            .entry(ns)
            .or_default()
            .entry(key.1.as_str().into())
            .or_default();
        self.tally.add(role, &text);
        match group.find(role, &name) {
            Ok(i) => {
                let old = std::mem::replace(&mut group.0[i].text, text);
                self.tally.sub(role, &old);
            }
            Err(i) => {
                group.0.insert(i, Entry { role, name, text });
                group.0.shrink_to_fit();
            }
        }
    }

    /// Remove `role`'s object `name` from cluster `cluster` of `ns`; whether
    /// it was there.
    fn unfile(&mut self, ns: &str, cluster: &str, role: Role, name: &str) -> bool {
        let Some(clusters) = self.namespaces.get_mut(ns) else {
            return false;
        };
        let Some(group) = clusters.get_mut(cluster) else {
            return false;
        };
        let Ok(i) = group.find(role, name) else {
            return false;
        };
        let e = group.0.remove(i);
        self.tally.sub(role, &e.text);
        if group.0.is_empty() {
            clusters.remove(cluster);
            if clusters.is_empty() {
                self.namespaces.remove(ns);
            }
        } else {
            group.0.shrink_to_fit();
        }
        true
    }

    /// The cluster of `ns`, other than `except`, that holds `role`'s
    /// object `name` (a scan of the namespace).
    fn holder(&self, ns: &str, role: Role, name: &str, except: Option<&str>) -> Option<String> {
        self.namespaces.get(ns)?.iter().find_map(|(cluster, g)| {
            (except != Some(&**cluster) && g.find(role, name).is_ok()).then(|| cluster.to_string())
        })
    }

    /// An object was added or changed: the clusters to look at again (its
    /// old one too, if it moved).
    pub fn apply(&mut self, role: Role, o: Value) -> Vec<Key> {
        let Some(key) = key_of(role, &o) else {
            return Vec::new();
        };
        let Some(name) = str_at(&o, "/metadata/name").map(Box::<str>::from) else {
            return Vec::new();
        };
        let mut touched = Vec::new();
        let here = self
            .group(&key.0, &key.1)
            .is_some_and(|g| g.find(role, &name).is_ok());
        if !here && let Some(old) = self.holder(&key.0, role, &name, Some(&key.1)) {
            self.unfile(&key.0, &old, role, &name);
            touched.push((key.0.clone(), old));
        }
        let text: Box<str> = project(role, o).to_string().into();
        self.file(&key, role, name, text);
        touched.push(key);
        touched
    }

    /// An object was deleted: the cluster it was filed under.
    pub fn delete(&mut self, role: Role, o: &Value) -> Option<Key> {
        let ns = str_at(o, "/metadata/namespace")?;
        let name = str_at(o, "/metadata/name")?;
        let labelled = key_of(role, o);
        if let Some(k) = &labelled
            && self.unfile(&k.0, &k.1, role, name)
        {
            return labelled;
        }
        match self.holder(ns, role, name, None) {
            Some(cluster) => {
                self.unfile(ns, &cluster, role, name);
                Some((ns.to_string(), cluster))
            }
            None => labelled,
        }
    }

    /// A (re)list of `role` starts: what it lists replaces what is live.
    pub fn relist_begin(&mut self, role: Role) {
        self.relists[role.index()] = Some(Vec::new());
    }

    /// One object of the relist (projected now; filed when it completes).
    pub fn relist_apply(&mut self, role: Role, o: Value) {
        let Some(key) = key_of(role, &o) else {
            return;
        };
        let Some(name) = str_at(&o, "/metadata/name").map(Box::<str>::from) else {
            return;
        };
        let text: Box<str> = project(role, o).to_string().into();
        self.relists[role.index()]
            .get_or_insert_with(Vec::new)
            .push((key, name, text));
    }

    /// The relist is complete: it replaces every live object of its kind.
    pub fn relist_done(&mut self, role: Role) {
        let Some(listed) = self.relists[role.index()].take() else {
            return;
        };
        for clusters in self.namespaces.values_mut() {
            for g in clusters.values_mut() {
                if g.0.iter().any(|e| e.role == role) {
                    g.0.retain(|e| e.role != role);
                    g.0.shrink_to_fit();
                }
            }
            clusters.retain(|_, g| !g.0.is_empty());
        }
        self.namespaces.retain(|_, c| !c.is_empty());
        self.tally.objects[role.index()] = 0;
        self.tally.bytes[role.index()] = 0;
        for (key, name, text) in listed {
            self.file(&key, role, name, text);
        }
    }

    /// What the cache holds for CAPI cluster `name` in `ns` (each kind's
    /// objects in name order).
    pub fn observed(&self, ns: &str, name: &str) -> Observed {
        let group = self.group(ns, name);
        let items = |role: Role| -> Vec<Value> {
            group
                .map(|g| {
                    g.of(role)
                        .filter_map(|e| serde_json::from_str(&e.text).ok())
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
        self.namespaces
            .iter()
            .flat_map(|(ns, clusters)| {
                clusters
                    .iter()
                    .filter(|(_, g)| g.of(Role::Cluster).next().is_some())
                    .map(move |(name, _)| (ns.to_string(), name.to_string()))
            })
            .collect()
    }

    /// Whether CAPI Cluster `ns`/`name` is cached (outer `Some`) and the
    /// Magnum cluster uuid it carries (our `magnum.openstack.org/cluster-uuid`
    /// label; `Some(None)`: a Cluster without it, which another driver made).
    pub fn uuid_of(&self, ns: &str, name: &str) -> Option<Option<String>> {
        let text = &self.group(ns, name)?.of(Role::Cluster).next()?.text;
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
        Size {
            objects: self.tally.objects[role.index()],
            bytes: self.tally.bytes[role.index()],
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

    /// Targets of a control plane and one worker group (`default-worker`),
    /// each (replicas, version).
    fn targets(cp: (i64, &str), worker: (i64, &str), proxied: bool) -> Targets {
        Targets {
            control_plane: GroupTarget {
                replicas: Some(cp.0),
                version: cp.1.into(),
                ..GroupTarget::default()
            },
            workers: vec![GroupTarget {
                key: "default-worker".into(),
                replicas: Some(worker.0),
                version: worker.1.into(),
                ..GroupTarget::default()
            }],
            proxied,
        }
    }

    /// The mapper's view of every operation is the same from the full
    /// objects and from the cache.
    fn assert_maps_the_same(full: &Observed, cached: &Observed, targets: &Targets, what: &str) {
        let clock = Clock {
            elapsed_min: 3,
            create_timeout_min: 60,
            stalled_min: 0,
            update_timeout_min: 60,
        };
        for op in [Operation::Create, Operation::Update, Operation::Delete] {
            assert_eq!(
                status::map(op, full, targets, clock),
                status::map(op, cached, targets, clock),
                "{op:?} {what}"
            );
        }
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
        assert!(c.namespaces.is_empty(), "nothing left behind");
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
    fn a_relist_of_one_kind_leaves_the_other_kinds_alone() {
        let mut c = Cache::default();
        c.apply(Role::MachineDeployment, md("a-md", "a", 1));
        let mut m = md("a-m1", "a", 1);
        m["kind"] = json!("Machine");
        c.apply(Role::Machine, m);
        c.relist_begin(Role::MachineDeployment);
        c.relist_apply(Role::MachineDeployment, md("c-md", "c", 2));
        c.relist_done(Role::MachineDeployment);
        let a = c.observed(NS, "a");
        assert!(a.machine_deployments.is_empty());
        assert_eq!(a.machines.len(), 1, "another kind's object stays");
        assert_eq!(c.observed(NS, "c").machine_deployments.len(), 1);
        assert_eq!(c.size(Role::MachineDeployment).objects, 1);
        assert_eq!(c.size(Role::Machine).objects, 1);
        // The last object of a cluster gone: nothing of it is left.
        c.delete(Role::Machine, &md("a-m1", "a", 1));
        assert!(c.group(NS, "a").is_none());
        assert_eq!(
            c.namespaces.get(NS).map(HashMap::len),
            Some(1),
            "only cluster c"
        );
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

    /// A cluster as kube-apiserver v1.28.7 served it (capi-sim's objects
    /// after Magnum's client created the cluster:
    /// `scripts/bench-status.sh --dump-cluster`): mapped the same from the
    /// cache as from the objects, for every operation.
    #[test]
    fn a_served_cluster_maps_the_same_from_the_cache() {
        let served: Vec<Value> = serde_json::from_str(include_str!(
            "../../../tests/fixtures/status-cache/v1beta1.json"
        ))
        .unwrap();
        let of = |kind: &str| -> Vec<Value> {
            served
                .iter()
                .filter(|o| o["kind"] == kind)
                .cloned()
                .collect()
        };
        let name = of("Cluster")[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let ns = of("Cluster")[0]["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let full = Observed {
            cluster: of("Cluster").pop(),
            infra: of("OpenStackCluster").pop(),
            control_plane: of("KubeadmControlPlane").pop(),
            machine_deployments: of("MachineDeployment"),
            machines: of("Machine"),
            helm_releases: of("HelmReleaseProxy"),
            api_slices: Vec::new(),
        };
        let mut c = Cache::default();
        for (kind, role) in [
            ("Cluster", Role::Cluster),
            ("OpenStackCluster", Role::Infra),
            ("KubeadmControlPlane", Role::ControlPlane),
            ("MachineDeployment", Role::MachineDeployment),
            ("Machine", Role::Machine),
            ("HelmReleaseProxy", Role::HelmRelease),
        ] {
            for o in of(kind) {
                assert_eq!(c.apply(role, o), vec![(ns.clone(), name.clone())]);
            }
        }
        let cached = c.observed(&ns, &name);
        assert_eq!(cached.machines.len(), 2);
        assert_eq!(cached.helm_releases.len(), 4);
        for (replicas, version) in [(1, "v1.30.4"), (3, "v1.31.1")] {
            assert_maps_the_same(
                &full,
                &cached,
                &targets((replicas, version), (replicas, version), false),
                &format!("{replicas} {version}"),
            );
        }
        assert_eq!(
            c.uuid_of(&ns, &name).flatten().as_deref(),
            full.cluster.as_ref().unwrap()["metadata"]["labels"][UUID_LABEL].as_str()
        );
    }

    /// What is projected away is what the mapper does not read: the same
    /// view from full objects and from the cache (a realistic cluster in
    /// the middle of a rollout, with the fields the projection drops).
    #[test]
    fn the_projection_keeps_what_the_mapper_reads() {
        let meta = |name: &str, extra: Value| {
            let mut m = json!({"name": name, "namespace": NS, "uid": "x", "resourceVersion": "9",
                               "creationTimestamp": "2026-01-01T00:00:00Z",
                               "labels": {CLUSTER_NAME_LABEL: "k", "magnum.openstack.org/project-id": "p",
                                          "machine-template-hash": "32e35100fe"},
                               "generateName": "k-",
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
        assert_maps_the_same(
            &full,
            &cached,
            &targets((3, "v1.31.1"), (2, "v1.30.4"), true),
            "a rollout",
        );
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

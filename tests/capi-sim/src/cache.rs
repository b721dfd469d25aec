//! The controllers' view of the management cluster (pure): every object of
//! the kinds they read, as the watches last delivered it or as the
//! controllers' own writes returned it, like controller-runtime's informer
//! cache; plus the bookkeeping that tells a pass what to visit.
//!
//! - **By cluster**: each reconciled object is filed under the Cluster it
//!   belongs to ([`cluster_of`]); a change wakes that Cluster's objects
//!   (the simulated reconcilers look across a Cluster's objects, so a
//!   Cluster is the unit of work). Reconciled objects that name no Cluster
//!   (a ClusterResourceSet selecting many) are "loose": visited every pass.
//! - **Never back in time**: an object is replaced only by a newer
//!   `resourceVersion` (a watch event may arrive after the answer to our
//!   own write), and an object we deleted is not brought back by a late
//!   event. CAPI guards the same staleness by waiting for its cache to see
//!   its own creates and deletes (`machineset_controller.go`
//!   `waitForMachineCreation` / `waitForMachineDeletion`).
//! - **Label index** per kind and namespace, so a Cluster's Machines are
//!   found without a scan of the fleet.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use crate::kinds::Kind;
use crate::obj::{CLUSTER_LABEL, label, meta, name, namespace, resource_version};

/// (namespace, Cluster name).
pub type ClusterKey = (String, String);
/// (kind, namespace, name).
pub type ObjRef = (Kind, String, String);

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Kind) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kind {
    fn cmp(&self, other: &Kind) -> std::cmp::Ordering {
        self.index().cmp(&other.index())
    }
}

/// The Cluster an object belongs to: itself for a Cluster, else its
/// `cluster.x-k8s.io/cluster-name` label, `spec.clusterName`,
/// `spec.clusterRef` (HelmReleaseProxy) or an owning Cluster.
pub fn cluster_of(kind: Kind, o: &Value) -> Option<String> {
    if kind == Kind::Cluster {
        return meta(o, "name").map(str::to_string);
    }
    if kind == Kind::Namespace {
        return None;
    }
    label(o, CLUSTER_LABEL)
        .or_else(|| o.pointer("/spec/clusterName").and_then(Value::as_str))
        .or_else(|| o.pointer("/spec/clusterRef/name").and_then(Value::as_str))
        .or_else(|| {
            o.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)?
                .iter()
                .find(|r| r.get("kind").and_then(Value::as_str) == Some("Cluster"))
                .and_then(|r| r.get("name"))
                .and_then(Value::as_str)
        })
        .map(str::to_string)
}

/// What a change concerns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Wake {
    /// Everything (a relist).
    pub all: bool,
    pub clusters: BTreeSet<ClusterKey>,
}

impl Wake {
    pub fn merge(&mut self, other: Wake) {
        self.all |= other.all;
        self.clusters.extend(other.clusters);
    }
    pub fn is_empty(&self) -> bool {
        !self.all && self.clusters.is_empty()
    }
}

#[derive(Default)]
struct Store {
    objects: BTreeMap<(String, String), Value>,
    /// (namespace, label key, label value) -> names.
    by_label: HashMap<(String, String, String), BTreeSet<String>>,
    /// Objects we saw deleted, at that resourceVersion: older events for
    /// them are stale.
    tombstones: HashMap<(String, String), u64>,
}

impl Store {
    fn index(&mut self, o: &Value, add: bool) {
        let (ns, n) = (namespace(o).to_string(), name(o).to_string());
        let Some(labels) = o.pointer("/metadata/labels").and_then(Value::as_object) else {
            return;
        };
        for (k, v) in labels {
            let key = (ns.clone(), k.clone(), v.as_str().unwrap_or("").to_string());
            if add {
                self.by_label.entry(key).or_default().insert(n.clone());
            } else if let Some(set) = self.by_label.get_mut(&key) {
                set.remove(&n);
                if set.is_empty() {
                    self.by_label.remove(&key);
                }
            }
        }
    }
}

/// Every object the controllers read, and where each reconciled one is filed.
#[derive(Default)]
pub struct Cache {
    stores: [Store; Kind::ALL.len()],
    members: HashMap<ClusterKey, BTreeSet<(Kind, String)>>,
    filed: HashMap<ObjRef, ClusterKey>,
    loose: BTreeSet<ObjRef>,
}

impl Cache {
    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<&Value> {
        self.stores[kind.index()]
            .objects
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of `kind` in `ns` carrying every `(key, value)` label.
    pub fn labelled(&self, kind: Kind, ns: &str, pairs: &[(&str, &str)]) -> Vec<&Value> {
        let s = &self.stores[kind.index()];
        let mut names: Option<BTreeSet<&String>> = None;
        for (k, v) in pairs {
            let set: BTreeSet<&String> = s
                .by_label
                .get(&(ns.to_string(), k.to_string(), v.to_string()))
                .map(|x| x.iter().collect())
                .unwrap_or_default();
            names = Some(match names {
                None => set,
                Some(a) => a.intersection(&set).copied().collect(),
            });
        }
        match names {
            Some(ns_names) => ns_names
                .into_iter()
                .filter_map(|n| s.objects.get(&(ns.to_string(), n.clone())))
                .collect(),
            None => self.in_namespace(kind, ns),
        }
    }

    /// Every object of `kind` in `ns`.
    pub fn in_namespace(&self, kind: Kind, ns: &str) -> Vec<&Value> {
        self.stores[kind.index()]
            .objects
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn count(&self, kind: Kind) -> usize {
        self.stores[kind.index()].objects.len()
    }

    /// Names of `kind` filed under `cluster`, in name order.
    pub fn members(&self, cluster: &ClusterKey, kind: Kind) -> Vec<String> {
        self.members
            .get(cluster)
            .map(|set| {
                set.iter()
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, n)| n.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Reconciled objects of `kind` that name no Cluster.
    pub fn loose(&self, kind: Kind) -> Vec<(String, String)> {
        self.loose
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, ns, n)| (ns.clone(), n.clone()))
            .collect()
    }

    /// Every Cluster some object is filed under.
    pub fn clusters(&self) -> Vec<ClusterKey> {
        self.members.keys().cloned().collect()
    }

    fn clusters_in(&self, ns: &str) -> BTreeSet<ClusterKey> {
        self.members.keys().filter(|k| k.0 == ns).cloned().collect()
    }

    fn unfile(&mut self, r: &ObjRef) -> Option<ClusterKey> {
        self.loose.remove(r);
        let c = self.filed.remove(r)?;
        if let Some(set) = self.members.get_mut(&c) {
            set.remove(&(r.0, r.2.clone()));
            if set.is_empty() {
                self.members.remove(&c);
            }
        }
        Some(c)
    }

    fn file(&mut self, r: ObjRef, cluster: Option<ClusterKey>) {
        match cluster {
            Some(c) => {
                self.members
                    .entry(c.clone())
                    .or_default()
                    .insert((r.0, r.2.clone()));
                self.filed.insert(r, c);
            }
            None => {
                self.loose.insert(r);
            }
        }
    }

    /// What a change of `o` (or its removal) wakes, refiling it.
    fn touch(&mut self, kind: Kind, o: &Value, present: bool) -> Wake {
        let mut wake = Wake::default();
        let ns = namespace(o).to_string();
        if kind == Kind::Namespace {
            // Faults set on a namespace concern everything in it.
            wake.clusters = self.clusters_in(name(o));
            return wake;
        }
        let cluster = cluster_of(kind, o).map(|c| (ns.clone(), c));
        if kind.reconciled() {
            let r = (kind, ns.clone(), name(o).to_string());
            if let Some(old) = self.unfile(&r) {
                wake.clusters.insert(old);
            }
            if present {
                self.file(r, cluster.clone());
            }
        }
        match cluster {
            Some(c) => {
                wake.clusters.insert(c);
            }
            None if !kind.reconciled() => wake.clusters.extend(self.clusters_in(&ns)),
            None => {}
        }
        wake
    }

    /// An object as a watch delivered it or a write returned it. Ignored
    /// (None) when the cache already holds this or a newer version, or saw
    /// it deleted later.
    pub fn upsert(&mut self, kind: Kind, o: Value) -> Option<Wake> {
        let key = (namespace(&o).to_string(), name(&o).to_string());
        let rv = resource_version(&o);
        let s = &mut self.stores[kind.index()];
        if let Some(rv) = rv {
            if s.tombstones.get(&key).is_some_and(|t| rv <= *t) {
                return None;
            }
            if s.objects
                .get(&key)
                .and_then(resource_version)
                .is_some_and(|have| rv <= have)
            {
                return None;
            }
        }
        s.tombstones.remove(&key);
        if let Some(old) = s.objects.remove(&key) {
            s.index(&old, false);
        }
        s.index(&o, true);
        let mut wake = self.touch(kind, &o, true);
        // The previous filing's cluster may differ (a label moved): touch
        // already woke it through `unfile`.
        self.stores[kind.index()].objects.insert(key, o.clone());
        if kind == Kind::Namespace {
            wake.clusters.extend(self.clusters_in(name(&o)));
        }
        Some(wake)
    }

    /// An object is gone (a DELETED event, or a delete that removed it at
    /// once). Later events older than `o`'s resourceVersion are stale.
    pub fn remove(&mut self, kind: Kind, o: &Value) -> Wake {
        let key = (namespace(o).to_string(), name(o).to_string());
        let s = &mut self.stores[kind.index()];
        let old = s.objects.remove(&key);
        if let Some(old) = &old {
            s.index(old, false);
        }
        let rv = [resource_version(o), old.as_ref().and_then(resource_version)]
            .into_iter()
            .flatten()
            .max();
        if let Some(rv) = rv {
            let t = s.tombstones.entry(key).or_insert(rv);
            *t = (*t).max(rv);
        }
        self.touch(kind, old.as_ref().unwrap_or(o), false)
    }

    /// A (re)list of `kind` is complete: it replaces what was held (objects
    /// deleted meanwhile sent no event); everything is woken.
    pub fn replace(&mut self, kind: Kind, objects: Vec<Value>) -> Wake {
        let old: Vec<Value> = std::mem::take(&mut self.stores[kind.index()].objects)
            .into_values()
            .collect();
        for o in &old {
            self.touch(kind, o, false);
        }
        self.stores[kind.index()] = Store::default();
        for o in objects {
            let key = (namespace(&o).to_string(), name(&o).to_string());
            self.stores[kind.index()].index(&o, true);
            self.touch(kind, &o, true);
            self.stores[kind.index()].objects.insert(key, o);
        }
        Wake {
            all: true,
            ..Wake::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(name: &str, cluster: &str, rv: u64) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                            "labels": {CLUSTER_LABEL: cluster, "cluster.x-k8s.io/set-name": "s1"}}})
    }

    fn key(c: &str) -> ClusterKey {
        ("ns".to_string(), c.to_string())
    }

    #[test]
    fn objects_are_filed_by_cluster_and_found_by_label() {
        let mut c = Cache::default();
        let w = c.upsert(Kind::Machine, machine("m1", "a", 5)).unwrap();
        assert_eq!(w.clusters, [key("a")].into());
        c.upsert(Kind::Machine, machine("m2", "b", 6));
        assert_eq!(c.members(&key("a"), Kind::Machine), vec!["m1"]);
        assert_eq!(
            c.labelled(Kind::Machine, "ns", &[("cluster.x-k8s.io/set-name", "s1")])
                .len(),
            2
        );
        assert_eq!(
            c.labelled(Kind::Machine, "ns", &[(CLUSTER_LABEL, "b")])
                .len(),
            1
        );
        assert!(
            c.labelled(Kind::Machine, "other", &[(CLUSTER_LABEL, "b")])
                .is_empty()
        );
        // Relabelled: moves, and both clusters wake.
        let w = c.upsert(Kind::Machine, machine("m1", "b", 7)).unwrap();
        assert_eq!(w.clusters, [key("a"), key("b")].into());
        assert!(c.members(&key("a"), Kind::Machine).is_empty());
        assert!(
            c.labelled(Kind::Machine, "ns", &[(CLUSTER_LABEL, "a")])
                .is_empty()
        );
    }

    #[test]
    fn the_cache_never_goes_back_in_time() {
        let mut c = Cache::default();
        c.upsert(Kind::Machine, machine("m1", "a", 10)).unwrap();
        // A watch event older than what our own write returned.
        assert_eq!(c.upsert(Kind::Machine, machine("m1", "a", 9)), None);
        assert_eq!(c.upsert(Kind::Machine, machine("m1", "a", 10)), None);
        assert!(c.upsert(Kind::Machine, machine("m1", "a", 11)).is_some());
        // Deleted at 12: a late MODIFIED at 11 does not bring it back; a
        // new object of the same name (a later version) does.
        c.remove(Kind::Machine, &machine("m1", "a", 12));
        assert_eq!(c.upsert(Kind::Machine, machine("m1", "a", 11)), None);
        assert!(c.get(Kind::Machine, "ns", "m1").is_none());
        assert!(c.upsert(Kind::Machine, machine("m1", "a", 13)).is_some());
    }

    #[test]
    fn namespaces_and_read_only_kinds_wake_their_clusters() {
        let mut c = Cache::default();
        c.upsert(Kind::Machine, machine("m1", "a", 1));
        c.upsert(Kind::Machine, machine("m2", "b", 2));
        let ns = json!({"metadata": {"name": "ns", "resourceVersion": "3", "annotations": {"capi-sim/never-ready": "true"}}});
        assert_eq!(
            c.upsert(Kind::Namespace, ns).unwrap().clusters,
            [key("a"), key("b")].into()
        );
        // A template naming no cluster wakes its namespace's clusters.
        let t = json!({"metadata": {"name": "t", "namespace": "ns", "resourceVersion": "4"}});
        assert_eq!(
            c.upsert(Kind::OpenStackMachineTemplate, t)
                .unwrap()
                .clusters,
            [key("a"), key("b")].into()
        );
        // A reconciled object naming no cluster is loose.
        let crs = json!({"metadata": {"name": "crs", "namespace": "ns", "resourceVersion": "5"}});
        c.upsert(Kind::ClusterResourceSet, crs);
        assert_eq!(
            c.loose(Kind::ClusterResourceSet),
            vec![("ns".into(), "crs".into())]
        );
    }

    #[test]
    fn a_relist_replaces_and_wakes_everything() {
        let mut c = Cache::default();
        c.upsert(Kind::Machine, machine("m1", "a", 1));
        let w = c.replace(Kind::Machine, vec![machine("m2", "b", 5)]);
        assert!(w.all);
        assert!(c.get(Kind::Machine, "ns", "m1").is_none());
        assert_eq!(c.clusters(), vec![key("b")]);
        assert_eq!(
            c.labelled(Kind::Machine, "ns", &[(CLUSTER_LABEL, "a")])
                .len(),
            0
        );
    }
}

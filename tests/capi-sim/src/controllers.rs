//! Simulated CAPI / CAPO controllers: what CAPI 1.10/1.14 and CAPO
//! 0.12/0.14 do to the objects, one step per object per tick, written
//! through the store with schema validation (so a write the real CRDs would
//! refuse shows up as a controller error).
//!
//! - OpenStackCluster: network, router, API load balancer, `ready`.
//! - Cluster: owner references on its infrastructure and control plane,
//!   `controlPlaneEndpoint`, phase and conditions (v1beta1 or v1beta2 shape);
//!   deletion in order: control plane and workers, their Machines, then the
//!   infrastructure, then the Cluster.
//! - KubeadmControlPlane and MachineDeployment (through MachineSets):
//!   Machines with providerID, addresses, nodeRef and version; replica
//!   counts; rolling replacement when the version or template changes;
//!   scale-down honours `cluster.x-k8s.io/delete-machine`.
//! - Machine: Pending → Provisioning → Provisioned → Running, an
//!   OpenStackMachine from its template, finalizer and drain on delete.
//!
//! Faults by annotation: `capi-sim/fail-reason` on an OpenStackCluster (or
//! on its Namespace) makes it fail with that message (e.g. quota exceeded); `capi-sim/never-ready`
//! on a Machine (or on a MachineDeployment / KubeadmControlPlane, for all
//! its Machines, or on the Namespace) keeps it Provisioning.
//!
//! - MachineHealthCheck: counts; machines annotated `capi-sim/unhealthy` are
//!   remediated (deleted, their owner replaces them).
//! - HelmChartProxy → one HelmReleaseProxy per matching Cluster, deployed
//!   once the control plane is up; ClusterResourceSet → bindings.
//!   (Selectors: `matchLabels` only.)

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use crate::resources::Line;
use crate::store::{Event, Propagation, Store};
use crate::validate::FieldValidation;
use std::sync::Arc;

const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const CP_LABEL: &str = "cluster.x-k8s.io/control-plane";
const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
const SET_LABEL: &str = "cluster.x-k8s.io/set-name";
const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
const FAIL: &str = "capi-sim/fail-reason";
const NEVER_READY: &str = "capi-sim/never-ready";

/// What one controller pass did: events, error messages, objects visited.
pub struct Pass {
    pub events: Vec<Arc<Event>>,
    pub errors: Vec<String>,
    /// Objects reconciled.
    pub visited: usize,
}

struct Ctx<'a> {
    s: &'a mut Store,
    v2: bool,
    now: String,
    out: Pass,
}

fn meta<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.get("metadata")
        .and_then(|m| m.get(k))
        .and_then(Value::as_str)
}
fn label<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.pointer("/metadata/labels")
        .and_then(|l| l.get(k))
        .and_then(Value::as_str)
}
fn annotation<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")
        .and_then(|l| l.get(k))
        .and_then(Value::as_str)
}
fn deleting(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp").is_some()
}
fn key(o: &Value) -> (String, String) {
    (
        meta(o, "namespace").unwrap_or("").to_string(),
        meta(o, "name").unwrap_or("").to_string(),
    )
}
fn owner_ref(o: &Value, controller: bool) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": meta(o, "name"), "uid": meta(o, "uid"),
           "controller": controller, "blockOwnerDeletion": true})
}
fn owned_by(o: &Value, owner_uid: &str) -> bool {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
        })
}
fn short_hash(v: &Value) -> String {
    let mut h = DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016x}", h.finish())[..10].to_string()
}
/// `v1.MINOR.PATCH` as a sortable key.
fn version_key(v: &str) -> (u64, u64, u64) {
    let mut it = v
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}
fn ready_machine(m: &Value) -> bool {
    m.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

impl Ctx<'_> {
    /// A fixed IP for a new server: derived from its name, moved on until
    /// no Machine of the cluster holds it (Neutron never gives two ports
    /// of one subnet the same address; a collision here would make two
    /// nodes look like one). One subnet per cluster: CAPO creates a
    /// network, a subnet and a router for each OpenStackCluster with
    /// `managedSubnets` (its API reference, `OpenStackClusterSpec`), which
    /// is what the conductor renders unless a template names a fixed
    /// network (shared networks are not simulated); looked up
    /// through the label index: a scan of every Machine per new server
    /// made a fleet's creation quadratic.
    fn free_address(&self, ns: &str, cluster: &str, server: &str) -> String {
        let taken: std::collections::HashSet<String> = self
            .labelled(
                "cluster.x-k8s.io",
                "machines",
                ns,
                &[(CLUSTER_LABEL, cluster)],
            )
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
        // 10.6.0.10 is the load balancer's VIP (below); ports start at .20.
        (0..50_000u64)
            .map(|i| {
                let h = (start + i) % 50_000;
                format!("10.6.{}.{}", h / 230, 20 + h % 230)
            })
            .find(|a| !taken.contains(a))
            .unwrap_or_else(|| "10.6.255.255".to_string())
    }
    /// An annotation of namespace `ns` (faults set for a whole namespace).
    fn ns_annotation(&self, ns: &str, key: &str) -> Option<String> {
        let r = self.s.find("", "namespaces")?;
        annotation(self.s.peek(r, None, ns)?, key).map(str::to_string)
    }
    fn res(&self, group: &str, plural: &str) -> Option<usize> {
        self.s.find(group, plural)
    }
    fn all(&self, group: &str, plural: &str) -> Vec<Value> {
        self.res(group, plural)
            .map(|r| self.s.snapshot(r))
            .unwrap_or_default()
    }
    /// Objects in `ns` with all these labels (indexed, no full scan).
    fn labelled(&self, group: &str, plural: &str, ns: &str, pairs: &[(&str, &str)]) -> Vec<Value> {
        self.res(group, plural)
            .map(|r| self.s.labelled(r, ns, pairs))
            .unwrap_or_default()
    }
    fn get(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        let r = self.res(group, plural)?;
        self.s.get(r, Some(ns), name).ok()
    }
    fn record(
        &mut self,
        what: &str,
        r: Result<(Value, Vec<Arc<Event>>), crate::store::ApiError>,
    ) -> Option<Value> {
        match r {
            Ok((v, ev)) => {
                self.out.events.extend(ev);
                Some(v)
            }
            Err(e) => {
                self.out
                    .errors
                    .push(format!("{what}: {} {}", e.code, e.message));
                None
            }
        }
    }
    /// Write `next` over `cur` (main resource, then status if it changed).
    fn write(&mut self, group: &str, plural: &str, cur: &Value, next: Value) {
        let Some(r) = self.res(group, plural) else {
            return;
        };
        let (ns, name) = key(cur);
        let mut next = next;
        if next.get("status") != cur.get("status") {
            let status = next.get("status").cloned();
            let mut body = cur.clone();
            match status {
                Some(st) => body["status"] = st,
                None => {
                    if let Some(o) = body.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            let what = format!("{plural}/{name} status");
            let res = self
                .s
                .update_with(r, Some(&ns), &name, body, true, FieldValidation::Strict);
            let Some(updated) = self.record(&what, res) else {
                return;
            };
            next["metadata"]["resourceVersion"] = updated["metadata"]["resourceVersion"].clone();
            if let Some(st) = updated.get("status") {
                next["status"] = st.clone();
            }
        }
        // Compared with the stored object in place (no copy): equal but
        // for resourceVersion and managedFields means nothing to write.
        let changed = match self.s.peek(r, Some(&ns), &name) {
            None => true,
            Some(stored) => !same_but_bookkeeping(&next, stored),
        };
        if changed {
            let what = format!("{plural}/{name}");
            let res = self
                .s
                .update_with(r, Some(&ns), &name, next, false, FieldValidation::Strict);
            self.record(&what, res);
        }
    }
    fn create(&mut self, group: &str, plural: &str, ns: &str, obj: Value) {
        let Some(r) = self.res(group, plural) else {
            return;
        };
        let what = format!("create {plural}/{}", meta(&obj, "name").unwrap_or(""));
        let res = self
            .s
            .create_with(r, Some(ns), obj, FieldValidation::Strict);
        self.record(&what, res);
    }
    fn delete(&mut self, group: &str, plural: &str, o: &Value) {
        let Some(r) = self.res(group, plural) else {
            return;
        };
        if deleting(o) {
            return;
        }
        let (ns, name) = key(o);
        let what = format!("delete {plural}/{name}");
        let res = self
            .s
            .delete(r, Some(&ns), &name, Propagation::Background, None, None);
        self.record(&what, res);
    }
    fn ensure_finalizer(&self, o: &mut Value, f: &str) {
        if deleting(o) {
            return;
        }
        let list = o["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !list.iter().any(|x| x == f) {
            let mut l = list;
            l.push(json!(f));
            o["metadata"]["finalizers"] = json!(l);
        }
    }
    fn drop_finalizer(&self, o: &mut Value, f: &str) {
        if let Some(l) = o["metadata"]["finalizers"].as_array_mut() {
            l.retain(|x| x != f);
        }
    }
    /// A v1beta1 condition with an explicit severity (v1beta2 has none).
    fn condition_with(
        &self,
        ty: &str,
        ok: bool,
        reason: &str,
        severity: &str,
        message: &str,
    ) -> Value {
        let mut c = self.condition(ty, ok, reason, message);
        if !self.v2 && !ok {
            c["severity"] = json!(severity);
        }
        c
    }
    fn condition(&self, ty: &str, ok: bool, reason: &str, message: &str) -> Value {
        if self.v2 {
            json!({"type": ty, "status": if ok { "True" } else { "False" }, "reason": reason, "message": message,
                   "lastTransitionTime": self.now})
        } else {
            let mut c = json!({"type": ty, "status": if ok { "True" } else { "False" }, "lastTransitionTime": self.now});
            if !ok {
                c["reason"] = json!(reason);
                c["severity"] = json!(if message.is_empty() { "Info" } else { "Error" });
                if !message.is_empty() {
                    c["message"] = json!(message);
                }
            }
            c
        }
    }
}

type Reconcile = fn(&mut Ctx<'_>, Value);

/// Every controller, in the order a pass runs them (owners before owned).
const CONTROLLERS: &[(&str, &str, Reconcile)] = &[
    (
        "infrastructure.cluster.x-k8s.io",
        "openstackclusters",
        reconcile_openstack_cluster,
    ),
    ("cluster.x-k8s.io", "clusters", reconcile_cluster),
    (
        "controlplane.cluster.x-k8s.io",
        "kubeadmcontrolplanes",
        reconcile_kcp,
    ),
    ("cluster.x-k8s.io", "machinedeployments", reconcile_md),
    ("cluster.x-k8s.io", "machinesets", reconcile_ms),
    ("cluster.x-k8s.io", "machines", reconcile_machine),
    ("cluster.x-k8s.io", "machinehealthchecks", reconcile_mhc),
    ("addons.cluster.x-k8s.io", "helmchartproxies", reconcile_hcp),
    (
        "addons.cluster.x-k8s.io",
        "helmreleaseproxies",
        reconcile_hrp,
    ),
    (
        "addons.cluster.x-k8s.io",
        "clusterresourcesets",
        reconcile_crs,
    ),
];

/// Kinds the controllers read but do not reconcile: a change to one wakes
/// the objects of its Cluster (or, when it names none, of its namespace).
const READ_ONLY: &[(&str, &str)] = &[
    ("infrastructure.cluster.x-k8s.io", "openstackmachines"),
    (
        "infrastructure.cluster.x-k8s.io",
        "openstackmachinetemplates",
    ),
    ("addons.cluster.x-k8s.io", "clusterresourcesetbindings"),
];

/// (namespace, Cluster name).
type ClusterKey = (String, String);
/// (resource, namespace, name).
type ObjRef = (usize, String, String);

/// The Cluster an object belongs to: itself for a Cluster, else its
/// `cluster.x-k8s.io/cluster-name` label, `spec.clusterName`,
/// `spec.clusterRef` (HelmReleaseProxy) or an owning Cluster.
fn cluster_of(group: &str, plural: &str, o: &Value) -> Option<String> {
    if group == "cluster.x-k8s.io" && plural == "clusters" {
        return meta(o, "name").map(str::to_string);
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

/// Which objects a pass visits. The real controllers reconcile an object
/// when it or an object they watch for it changes (controller-runtime's
/// work queue, fed by watches and `Watches(..., EnqueueRequestsFromMapFunc)`
/// from owned and related objects), and again after an error; nothing runs
/// for a fleet at rest. Visiting every object every tick made the
/// simulator, not the conductor, the bottleneck past ~2,000 clusters in
/// flight. The scheduler reads the store's event history since its last
/// pass and wakes every object of each Cluster that an event touched (the
/// simulated reconcilers look across a Cluster's objects, so a Cluster is
/// the unit); objects that belong to no Cluster (e.g. a
/// ClusterResourceSet selecting many) are visited every pass. The first
/// pass, and any pass after the history it needs was compacted away,
/// visits everything.
#[derive(Default)]
pub struct Scheduler {
    /// Store version up to which events have been read (None: never).
    seen: Option<u64>,
    /// Reconciled objects per Cluster.
    members: std::collections::HashMap<ClusterKey, std::collections::BTreeSet<ObjRef>>,
    /// Where each reconciled object is filed.
    filed: std::collections::HashMap<ObjRef, ClusterKey>,
    /// Reconciled objects of no Cluster: visited every pass.
    loose: std::collections::BTreeSet<ObjRef>,
    /// Clusters whose reconcile hit an error: visited again next pass.
    retry: std::collections::HashSet<ClusterKey>,
}

/// What a pass must visit.
#[derive(Default)]
struct Wake {
    all: bool,
    clusters: std::collections::HashSet<ClusterKey>,
}

impl Scheduler {
    fn reconciled(group: &str, plural: &str) -> bool {
        CONTROLLERS
            .iter()
            .any(|(g, p, _)| *g == group && *p == plural)
    }

    fn file(&mut self, r: ObjRef, cluster: Option<ClusterKey>) {
        match cluster {
            Some(c) => {
                self.members.entry(c.clone()).or_default().insert(r.clone());
                self.filed.insert(r, c);
            }
            None => {
                self.loose.insert(r);
            }
        }
    }

    fn unfile(&mut self, r: &ObjRef) -> Option<ClusterKey> {
        self.loose.remove(r);
        let c = self.filed.remove(r)?;
        if let Some(set) = self.members.get_mut(&c) {
            set.remove(r);
            if set.is_empty() {
                self.members.remove(&c);
            }
        }
        Some(c)
    }

    /// File every reconciled object afresh (first pass, or history lost).
    fn rebuild(&mut self, s: &Store) {
        self.members.clear();
        self.filed.clear();
        self.loose.clear();
        for (group, plural, _) in CONTROLLERS {
            let Some(res) = s.find(group, plural) else {
                continue;
            };
            for o in s.objects(res) {
                let (ns, name) = key(o);
                let c = cluster_of(group, plural, o).map(|c| (ns.clone(), c));
                self.file((res, ns, name), c);
            }
        }
    }

    fn wake_namespace(&self, ns: &str, wake: &mut Wake) {
        wake.clusters
            .extend(self.members.keys().filter(|k| k.0 == ns).cloned());
    }

    /// Follow one change: refile the object, wake what it concerns.
    fn absorb(&mut self, s: &Store, ev: &Event, wake: &mut Wake) {
        let Some(r) = s.resources.get(ev.res) else {
            return;
        };
        let (group, plural) = (r.group.as_str(), r.plural.as_str());
        let o = &ev.object;
        if group.is_empty() && plural == "namespaces" {
            // Faults set on a namespace concern everything in it.
            self.wake_namespace(meta(o, "name").unwrap_or(""), wake);
            return;
        }
        let reconciled = Self::reconciled(group, plural);
        if !reconciled && !READ_ONLY.contains(&(group, plural)) {
            return;
        }
        let (ns, name) = key(o);
        let cluster = cluster_of(group, plural, o).map(|c| (ns.clone(), c));
        if reconciled {
            let obj = (ev.res, ns.clone(), name);
            if let Some(old) = self.unfile(&obj) {
                wake.clusters.insert(old);
            }
            if ev.ty != crate::store::EventType::Deleted {
                self.file(obj, cluster.clone());
            }
        }
        match cluster {
            Some(c) => {
                wake.clusters.insert(c);
            }
            None if !reconciled => self.wake_namespace(&ns, wake),
            None => {}
        }
    }

    /// Read the events after `from`; false when the history no longer
    /// holds them (then everything is refiled and woken).
    fn catch_up(&mut self, s: &Store, from: Option<u64>, wake: &mut Wake) -> u64 {
        let now = s.resource_version();
        match from.map(|rv| s.events_since(rv)) {
            Some(Ok(evs)) => {
                for ev in &evs {
                    self.absorb(s, ev, wake);
                }
            }
            _ => {
                self.rebuild(s);
                wake.all = true;
            }
        }
        now
    }

    /// What to visit of one resource, in (namespace, name) order.
    fn targets(&self, s: &Store, res: usize, wake: &Wake) -> Vec<Value> {
        if wake.all {
            return s.snapshot(res);
        }
        let mut refs: std::collections::BTreeSet<&ObjRef> =
            self.loose.iter().filter(|r| r.0 == res).collect();
        for c in &wake.clusters {
            if let Some(set) = self.members.get(c) {
                refs.extend(set.iter().filter(|r| r.0 == res));
            }
        }
        refs.into_iter()
            .filter_map(|(res, ns, name)| s.get(*res, Some(ns), name).ok())
            .collect()
    }

    /// One pass of every controller over what changed since the last one.
    pub fn pass(&mut self, s: &mut Store, line: Line) -> Pass {
        let mut wake = Wake {
            clusters: std::mem::take(&mut self.retry),
            ..Wake::default()
        };
        // Events after this pass's start (its own writes among them) are
        // read again next pass: what a write changes is reconciled again.
        let start = self.catch_up(s, self.seen, &mut wake);
        self.seen = Some(start);
        let mut cursor = start;
        let mut c = Ctx {
            s,
            v2: line == Line::V1beta2,
            now: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            out: Pass {
                events: vec![],
                errors: vec![],
                visited: 0,
            },
        };
        for (group, plural, reconcile) in CONTROLLERS {
            // What earlier controllers of this pass changed is visited by
            // the later ones in the same pass (owners before owned).
            if !wake.all {
                cursor = self.catch_up(c.s, Some(cursor), &mut wake);
            }
            let Some(res) = c.s.find(group, plural) else {
                continue;
            };
            for obj in self.targets(c.s, res, &wake) {
                let cluster = cluster_of(group, plural, &obj).map(|n| (key(&obj).0, n));
                let errors = c.out.errors.len();
                c.out.visited += 1;
                reconcile(&mut c, obj);
                if c.out.errors.len() > errors
                    && let Some(k) = cluster
                {
                    self.retry.insert(k);
                }
            }
        }
        c.out
    }
}

/// One pass of every controller over every object (no scheduler).
pub fn pass(s: &mut Store, line: Line) -> Pass {
    Scheduler::default().pass(s, line)
}

/// `matchLabels` of a LabelSelector (matchExpressions are not simulated).
fn selector_matches(selector: Option<&Value>, o: &Value) -> bool {
    let Some(ml) = selector
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
    else {
        return selector.is_some_and(|s| s.as_object().is_some_and(|m| m.is_empty()));
    };
    ml.iter().all(|(k, v)| label(o, k) == v.as_str())
}

/// A Cluster's infrastructure is provisioned (v1beta1 or v1beta2 shape).
fn infra_provisioned(cl: &Value) -> bool {
    cl.pointer("/status/infrastructureReady") == Some(&json!(true))
        || cl.pointer("/status/initialization/infrastructureProvisioned") == Some(&json!(true))
}

/// A Cluster's control plane is initialized (v1beta1 or v1beta2 shape).
fn cp_initialized(cl: &Value) -> bool {
    cl.pointer("/status/controlPlaneReady") == Some(&json!(true))
        || cl.pointer("/status/initialization/controlPlaneInitialized") == Some(&json!(true))
}

/// MachineHealthCheck: counts, and remediation of machines annotated
/// `capi-sim/unhealthy` (deleted; their owner replaces them).
fn reconcile_mhc(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let (ns, _) = key(&cur);
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let targets: Vec<Value> = c
        .labelled(
            "cluster.x-k8s.io",
            "machines",
            &ns,
            &[(CLUSTER_LABEL, &cluster)],
        )
        .into_iter()
        .filter(|m| m.pointer("/spec/clusterName").and_then(Value::as_str) == Some(&cluster))
        .filter(|m| selector_matches(cur.pointer("/spec/selector"), m))
        .filter(|m| !deleting(m))
        .collect();
    let mut healthy = 0;
    for m in &targets {
        if annotation(m, "capi-sim/unhealthy").is_some() {
            c.delete("cluster.x-k8s.io", "machines", m);
        } else if ready_machine(m) {
            healthy += 1;
        }
    }
    let mut next = cur.clone();
    // CAPI makes the Cluster the owner of its health checks.
    if let Some(cl) = c.get("cluster.x-k8s.io", "clusters", &ns, &cluster)
        && !owned_by(&cur, meta(&cl, "uid").unwrap_or(""))
    {
        let mut refs = next["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        refs.push(owner_ref(&cl, false));
        next["metadata"]["ownerReferences"] = json!(refs);
        next["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
    }
    let names: Vec<&str> = targets.iter().filter_map(|m| meta(m, "name")).collect();
    next["status"] = json!({"expectedMachines": targets.len(), "currentHealthy": healthy, "remediationsAllowed": targets.len(),
                            "targets": names, "observedGeneration": cur["metadata"]["generation"]});
    c.write("cluster.x-k8s.io", "machinehealthchecks", &cur, next);
}

/// HelmChartProxy: one HelmReleaseProxy per matching Cluster.
fn reconcile_hcp(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let (ns, name) = key(&cur);
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let match_labels: Vec<(String, String)> = cur
        .pointer("/spec/clusterSelector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let pairs: Vec<(&str, &str)> = match_labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let clusters: Vec<Value> = c
        .labelled("cluster.x-k8s.io", "clusters", &ns, &pairs)
        .into_iter()
        .filter(|cl| !deleting(cl) && selector_matches(cur.pointer("/spec/clusterSelector"), cl))
        .collect();
    let existing: Vec<Value> = c
        .labelled(
            "addons.cluster.x-k8s.io",
            "helmreleaseproxies",
            &ns,
            &[("helmchartproxy.addons.cluster.x-k8s.io/name", &name)],
        )
        .into_iter()
        .filter(|h| owned_by(h, &uid))
        .collect();
    for cl in &clusters {
        let cname = meta(cl, "name").unwrap_or("");
        let hname = format!("{name}-{cname}");
        let spec = json!({
            "clusterRef": {"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": cname, "namespace": ns},
            "chartName": cur["spec"]["chartName"], "repoURL": cur["spec"]["repoURL"],
            "releaseName": cur["spec"].get("releaseName").cloned().unwrap_or(json!(cur["spec"]["chartName"])),
            "namespace": cur["spec"].get("namespace").cloned().unwrap_or(json!("default")),
            "values": cur["spec"].get("valuesTemplate").cloned().unwrap_or(json!("")),
            "version": cur["spec"].get("version").cloned().unwrap_or(json!("")),
        });
        match existing.iter().find(|h| meta(h, "name") == Some(hname.as_str())) {
            None => c.create("addons.cluster.x-k8s.io", "helmreleaseproxies", &ns, json!({
                "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "HelmReleaseProxy",
                "metadata": {"name": hname, "labels": {CLUSTER_LABEL: cname, "helmchartproxy.addons.cluster.x-k8s.io/name": name},
                             "ownerReferences": [owner_ref(&cur, true)]},
                "spec": spec})),
            Some(h) if h["spec"] != spec => {
                let mut n = h.clone();
                n["spec"] = spec;
                c.write("addons.cluster.x-k8s.io", "helmreleaseproxies", h, n);
            }
            Some(_) => {}
        }
    }
    for h in &existing {
        let still = clusters
            .iter()
            .any(|cl| label(h, CLUSTER_LABEL) == meta(cl, "name"));
        if !still {
            c.delete("addons.cluster.x-k8s.io", "helmreleaseproxies", h);
        }
    }
    let ready = !existing.is_empty()
        && existing
            .iter()
            .all(|h| h.pointer("/status/status").and_then(Value::as_str) == Some("deployed"));
    let refs: Vec<Value> = clusters.iter().map(|cl| json!({"apiVersion": cl["apiVersion"], "kind": "Cluster", "name": meta(cl, "name"), "namespace": ns})).collect();
    let mut next = cur.clone();
    next["status"] = json!({"matchingClusters": refs, "observedGeneration": cur["metadata"]["generation"],
                            "conditions": [c.condition("Ready", ready, if ready { "Ready" } else { "HelmReleaseProxiesNotReady" }, "")]});
    keep_transition_times(&cur, &mut next);
    c.write("addons.cluster.x-k8s.io", "helmchartproxies", &cur, next);
}

/// HelmReleaseProxy: "deployed" once its cluster's control plane is up;
/// the revision counts spec generations.
fn reconcile_hrp(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let (ns, _) = key(&cur);
    let cname = cur
        .pointer("/spec/clusterRef/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let up = c
        .get("cluster.x-k8s.io", "clusters", &ns, cname)
        .is_some_and(|cl| cp_initialized(&cl));
    let mut next = cur.clone();
    let generation = cur["metadata"]["generation"].as_i64().unwrap_or(1);
    next["status"] = if up {
        json!({"status": "deployed", "revision": generation, "observedGeneration": generation,
               "conditions": [c.condition("Ready", true, "Deployed", "")]})
    } else {
        json!({"observedGeneration": generation,
               "conditions": [c.condition("Ready", false, "WaitingForControlPlane", "waiting for the cluster's control plane")]})
    };
    keep_transition_times(&cur, &mut next);
    c.write("addons.cluster.x-k8s.io", "helmreleaseproxies", &cur, next);
}

/// ClusterResourceSet: a ClusterResourceSetBinding per matching Cluster
/// once its control plane is up (resources recorded as applied).
fn reconcile_crs(c: &mut Ctx<'_>, cur: Value) {
    if deleting(&cur) {
        return;
    }
    let (ns, name) = key(&cur);
    let resources: Vec<Value> = cur
        .pointer("/spec/resources")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|r| json!({"kind": r["kind"], "name": r["name"], "applied": true, "hash": short_hash(r), "lastAppliedTime": c.now}))
                .collect()
        })
        .unwrap_or_default();
    let clusters: Vec<Value> = c
        .all("cluster.x-k8s.io", "clusters")
        .into_iter()
        .filter(|cl| {
            meta(cl, "namespace") == Some(&ns)
                && !deleting(cl)
                && cp_initialized(cl)
                && selector_matches(cur.pointer("/spec/clusterSelector"), cl)
        })
        .collect();
    for cl in clusters {
        let cname = meta(&cl, "name").unwrap_or("").to_string();
        let binding = json!({"clusterResourceSetName": name, "resources": resources});
        match c.get(
            "addons.cluster.x-k8s.io",
            "clusterresourcesetbindings",
            &ns,
            &cname,
        ) {
            None => {
                let api = if c.v2 {
                    "addons.cluster.x-k8s.io/v1beta2"
                } else {
                    "addons.cluster.x-k8s.io/v1beta1"
                };
                c.create("addons.cluster.x-k8s.io", "clusterresourcesetbindings", &ns, json!({
                    "apiVersion": api, "kind": "ClusterResourceSetBinding",
                    "metadata": {"name": cname, "labels": {CLUSTER_LABEL: cname}, "ownerReferences": [owner_ref(&cl, false)]},
                    "spec": {"clusterName": cname, "bindings": [binding]}}));
            }
            Some(b) => {
                let has = b
                    .pointer("/spec/bindings")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x["clusterResourceSetName"] == json!(name)));
                if !has {
                    let mut n = b.clone();
                    let mut list = n["spec"]["bindings"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    list.push(binding);
                    n["spec"]["bindings"] = json!(list);
                    c.write(
                        "addons.cluster.x-k8s.io",
                        "clusterresourcesetbindings",
                        &b,
                        n,
                    );
                }
            }
        }
    }
}

/// Equal objects but for `metadata.resourceVersion` and
/// `metadata.managedFields`.
fn same_but_bookkeeping(a: &Value, b: &Value) -> bool {
    const SKIP: [&str; 2] = ["resourceVersion", "managedFields"];
    let (Some(ao), Some(bo)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let top = |o: &'_ serde_json::Map<String, Value>| o.keys().filter(|k| *k != "metadata").count();
    if top(ao) != top(bo)
        || ao
            .iter()
            .any(|(k, v)| k != "metadata" && bo.get(k) != Some(v))
    {
        return false;
    }
    let empty = serde_json::Map::new();
    let am = ao
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let bm = bo
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let keys = |m: &'_ serde_json::Map<String, Value>| {
        m.keys().filter(|k| !SKIP.contains(&k.as_str())).count()
    };
    keys(am) == keys(bm)
        && am
            .iter()
            .all(|(k, v)| SKIP.contains(&k.as_str()) || bm.get(k) == Some(v))
}

fn keep_transition_times(cur: &Value, next: &mut Value) {
    if let (Some(old), Some(new)) = (
        cur.pointer("/status/conditions").and_then(Value::as_array),
        next.pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut),
    ) {
        for n in new.iter_mut() {
            if let Some(o) = old
                .iter()
                .find(|o| o["type"] == n["type"] && o["status"] == n["status"])
            {
                n["lastTransitionTime"] = o["lastTransitionTime"].clone();
            }
        }
    }
}

fn reconcile_openstack_cluster(c: &mut Ctx<'_>, cur: Value) {
    let mut next = cur.clone();
    if deleting(&cur) {
        c.drop_finalizer(
            &mut next,
            "openstackcluster.infrastructure.cluster.x-k8s.io",
        );
        c.write(
            "infrastructure.cluster.x-k8s.io",
            "openstackclusters",
            &cur,
            next,
        );
        return;
    }
    c.ensure_finalizer(
        &mut next,
        "openstackcluster.infrastructure.cluster.x-k8s.io",
    );
    let name = meta(&cur, "name").unwrap_or("");
    // The annotation on the object, or on its namespace (a test can mark a
    // namespace before the client creates anything in it).
    let ns_reason = meta(&cur, "namespace").and_then(|ns| c.ns_annotation(ns, FAIL));
    if let Some(reason) = annotation(&cur, FAIL).map(str::to_string).or(ns_reason) {
        next["status"] =
            json!({"ready": false, "failureReason": "CreateError", "failureMessage": reason});
    } else if cur.pointer("/status/ready") != Some(&json!(true)) {
        let n = short_hash(&json!(meta(&cur, "uid")));
        next["status"] = json!({
            "ready": true,
            "network": {"id": format!("net-{n}"), "name": format!("k8s-clusterapi-cluster-{name}")},
            "router": {"id": format!("router-{n}"), "name": format!("k8s-clusterapi-cluster-{name}")},
            "apiServerLoadBalancer": {"id": format!("lb-{n}"), "name": format!("k8s-clusterapi-cluster-{name}-kubeapi"),
                                      "ip": "203.0.113.10", "internalIP": "10.6.0.10"},
        });
        if next.pointer("/spec/controlPlaneEndpoint/host").is_none() {
            next["spec"]["controlPlaneEndpoint"] = json!({"host": "203.0.113.10", "port": 6443});
        }
    }
    c.write(
        "infrastructure.cluster.x-k8s.io",
        "openstackclusters",
        &cur,
        next,
    );
}

fn ref_name(r: &Value) -> Option<&str> {
    r.get("name").and_then(Value::as_str)
}

fn reconcile_cluster(c: &mut Ctx<'_>, cur: Value) {
    let (ns, name) = key(&cur);
    let infra = cur
        .pointer("/spec/infrastructureRef")
        .and_then(ref_name)
        .and_then(|n| {
            c.get(
                "infrastructure.cluster.x-k8s.io",
                "openstackclusters",
                &ns,
                n,
            )
        });
    let kcp = cur
        .pointer("/spec/controlPlaneRef")
        .and_then(ref_name)
        .and_then(|n| {
            c.get(
                "controlplane.cluster.x-k8s.io",
                "kubeadmcontrolplanes",
                &ns,
                n,
            )
        });
    let mut next = cur.clone();
    if deleting(&cur) {
        // Control plane and workers first, their Machines, then infrastructure.
        if let Some(k) = &kcp {
            c.delete("controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes", k);
        }
        // Through the label index: the defaulting webhook labels every
        // MachineDeployment with its cluster (webhooks.rs).
        for md in c.labelled(
            "cluster.x-k8s.io",
            "machinedeployments",
            &ns,
            &[(CLUSTER_LABEL, &name)],
        ) {
            c.delete("cluster.x-k8s.io", "machinedeployments", &md);
        }
        let machines_left = !c
            .labelled(
                "cluster.x-k8s.io",
                "machines",
                &ns,
                &[(CLUSTER_LABEL, &name)],
            )
            .is_empty();
        if machines_left || kcp.is_some() {
            next["status"]["phase"] = json!("Deleting");
            c.write("cluster.x-k8s.io", "clusters", &cur, next);
            return;
        }
        if let Some(i) = &infra {
            c.delete("infrastructure.cluster.x-k8s.io", "openstackclusters", i);
            next["status"]["phase"] = json!("Deleting");
            c.write("cluster.x-k8s.io", "clusters", &cur, next);
            return;
        }
        c.drop_finalizer(&mut next, "cluster.cluster.x-k8s.io");
        c.write("cluster.x-k8s.io", "clusters", &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, "cluster.cluster.x-k8s.io");
    // The Cluster owns its infrastructure and control plane.
    for (obj, group, plural) in [
        (
            &infra,
            "infrastructure.cluster.x-k8s.io",
            "openstackclusters",
        ),
        (
            &kcp,
            "controlplane.cluster.x-k8s.io",
            "kubeadmcontrolplanes",
        ),
    ] {
        if let Some(o) = obj
            && !owned_by(o, meta(&cur, "uid").unwrap_or(""))
        {
            let mut n = o.clone();
            let mut refs = n["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            refs.push(owner_ref(&cur, true));
            n["metadata"]["ownerReferences"] = json!(refs);
            let mut labels = n["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            labels.insert(CLUSTER_LABEL.into(), json!(name));
            n["metadata"]["labels"] = Value::Object(labels);
            c.write(group, plural, o, n);
        }
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
    });
    let phase = if infra_failed.is_some() {
        "Failed"
    } else if infra_ready && cp_init {
        "Provisioned"
    } else if infra.is_some() {
        "Provisioning"
    } else {
        "Pending"
    };
    let infra_msg = infra_failed.clone().unwrap_or_default();
    let mut status = next.get("status").cloned().unwrap_or(json!({}));
    status["phase"] = json!(phase);
    status["observedGeneration"] = next["metadata"]["generation"].clone();
    if c.v2 {
        status["initialization"] =
            json!({"infrastructureProvisioned": infra_ready, "controlPlaneInitialized": cp_init});
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
    } else {
        status["infrastructureReady"] = json!(infra_ready);
        status["controlPlaneReady"] = json!(cp_init);
        if let Some(m) = &infra_failed {
            status["failureReason"] = json!("CreateError");
            status["failureMessage"] = json!(m);
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
    c.write("cluster.x-k8s.io", "clusters", &cur, next);
}

/// A Machine for a control plane or machine set (v1beta1 or v1beta2 refs).
fn new_machine(
    c: &Ctx<'_>,
    owner: &Value,
    name: &str,
    cluster: &str,
    version: Option<&Value>,
    infra_template: &str,
    labels: Value,
) -> Value {
    let infra_ref = if c.v2 {
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachine", "name": name})
    } else {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine", "name": name, "namespace": meta(owner, "namespace")})
    };
    let bootstrap_ref = if c.v2 {
        json!({"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}})
    } else {
        json!({"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig", "name": name, "namespace": meta(owner, "namespace")}})
    };
    let api = if c.v2 {
        "cluster.x-k8s.io/v1beta2"
    } else {
        "cluster.x-k8s.io/v1beta1"
    };
    let mut m = json!({"apiVersion": api, "kind": "Machine",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner_ref(owner, true)],
                     "annotations": {"capi-sim/infrastructure-template": infra_template}},
        "spec": {"clusterName": cluster, "bootstrap": bootstrap_ref, "infrastructureRef": infra_ref}});
    if let Some(v) = version {
        m["spec"]["version"] = v.clone();
    }
    if annotation(owner, NEVER_READY).is_some() {
        m["metadata"]["annotations"][NEVER_READY] = json!("true");
    }
    m
}

fn machine_name(base: &str, c: &Ctx<'_>) -> String {
    let salt = short_hash(&json!([base, c.s.resource_version()]));
    format!("{base}-{}", &salt[..5.min(salt.len())])
}

fn reconcile_kcp(c: &mut Ctx<'_>, cur: Value) {
    let (ns, name) = key(&cur);
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let machines: Vec<Value> = c
        .labelled(
            "cluster.x-k8s.io",
            "machines",
            &ns,
            &[("cluster.x-k8s.io/control-plane-name", &name)],
        )
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect();
    if deleting(&cur) {
        for m in &machines {
            c.delete("cluster.x-k8s.io", "machines", m);
        }
        let mut next = cur.clone();
        if machines.is_empty() {
            c.drop_finalizer(&mut next, "kubeadm.controlplane.cluster.x-k8s.io");
        }
        c.write(
            "controlplane.cluster.x-k8s.io",
            "kubeadmcontrolplanes",
            &cur,
            next,
        );
        return;
    }
    let Some(cluster) = label(&cur, CLUSTER_LABEL).map(str::to_string) else {
        return;
    };
    let infra_ready = c
        .get("cluster.x-k8s.io", "clusters", &ns, &cluster)
        .is_some_and(|cl| infra_provisioned(&cl));
    let mut next = cur.clone();
    c.ensure_finalizer(&mut next, "kubeadm.controlplane.cluster.x-k8s.io");
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
    let up_to_date = |m: &Value| {
        m.pointer("/spec/version") == version.as_ref()
            && annotation(m, "capi-sim/infrastructure-template") == Some(template.as_str())
    };
    let live: Vec<&Value> = machines.iter().filter(|m| !deleting(m)).collect();
    let updated = live.iter().filter(|m| up_to_date(m)).count();
    let ready = live.iter().filter(|m| ready_machine(m)).count();
    if infra_ready {
        if (live.len() < want || (updated < want && live.len() == want))
            && live.iter().all(|m| ready_machine(m))
        {
            // Scale up, or surge one up-to-date machine for a rollout, one at a
            // time and only while every existing machine is healthy (KCP's preflight).
            let labels = json!({CLUSTER_LABEL: cluster, CP_LABEL: "", "cluster.x-k8s.io/control-plane-name": name});
            let mname = machine_name(&name, c);
            let m = new_machine(
                c,
                &cur,
                &mname,
                &cluster,
                version.as_ref(),
                &template,
                labels,
            );
            create_with_infra(c, &ns, m, &template);
        } else if live.len() > want {
            // Too many (KCP's selectMachineForScaleDown): outdated machines
            // marked cluster.x-k8s.io/delete-machine, then any marked, then
            // outdated ones, then any; the oldest of those.
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
                .min_by_key(|m| meta(m, "creationTimestamp").unwrap_or("").to_string())
                .map(|m| (*m).clone());
            if let Some(v) = victim {
                c.delete("cluster.x-k8s.io", "machines", &v);
            }
        }
    }
    let initialized = ready > 0
        || cur.pointer("/status/initialized") == Some(&json!(true))
        || cur.pointer("/status/initialization/controlPlaneInitialized") == Some(&json!(true));
    let mut st = json!({"replicas": live.len(), "readyReplicas": ready, "observedGeneration": cur["metadata"]["generation"],
                        "selector": format!("{CLUSTER_LABEL}={cluster},{CP_LABEL}")});
    // The lowest version any control-plane machine runs (KCP status.go:
    // `controlPlane.Machines.LowestVersion()`).
    if let Some(v) = live
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
    } else {
        st["initialized"] = json!(initialized);
        st["ready"] = json!(ready > 0);
        st["updatedReplicas"] = json!(updated);
        st["unavailableReplicas"] = json!(live.len() - ready);
    }
    next["status"] = st;
    c.write(
        "controlplane.cluster.x-k8s.io",
        "kubeadmcontrolplanes",
        &cur,
        next,
    );
}

/// A Machine and its OpenStackMachine (from the OpenStackMachineTemplate).
fn create_with_infra(c: &mut Ctx<'_>, ns: &str, machine: Value, template: &str) {
    let name = meta(&machine, "name").unwrap_or("").to_string();
    let spec = c
        .get(
            "infrastructure.cluster.x-k8s.io",
            "openstackmachinetemplates",
            ns,
            template,
        )
        .and_then(|t| t.pointer("/spec/template/spec").cloned())
        .unwrap_or(json!({}));
    let labels = machine["metadata"]["labels"].clone();
    c.create("cluster.x-k8s.io", "machines", ns, machine);
    // CAPI makes the Machine the owner of its infrastructure object.
    let owners = match c.get("cluster.x-k8s.io", "machines", ns, &name) {
        Some(m) => json!([owner_ref(&m, true)]),
        None => return,
    };
    c.create(
        "infrastructure.cluster.x-k8s.io",
        "openstackmachines",
        ns,
        json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owners}, "spec": spec}),
    );
}

/// An int-or-percent of `total` (CAPI's GetScaledValueFromIntOrPercent).
fn scaled(v: Option<&Value>, total: i64, round_up: bool, default: i64) -> i64 {
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

fn spec_replicas(o: &Value) -> i64 {
    o.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}
fn status_int(o: &Value, k: &str) -> i64 {
    o.pointer(&format!("/status/{k}"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// MachineDeployment: one MachineSet per template hash, rolled as CAPI's
/// rolling update does (cluster-api v1.10
/// `internal/controllers/machinedeployment/machinedeployment_rolling.go`
/// and `mdutil.NewMSNewReplicas` / `ResolveFenceposts`): the new
/// MachineSet grows while the total stays within replicas + maxSurge, old
/// ones shrink (unhealthy machines first) while at least replicas -
/// maxUnavailable stay available. Status and conditions in the line's
/// shape (v1beta1 `Available` "Minimum availability requires ...";
/// v1beta2 `Available`, `RollingOut`, `ScalingUp`, `ScalingDown`, as
/// v1.14 `machinedeployment_status.go` words them).
fn reconcile_md(c: &mut Ctx<'_>, cur: Value) {
    let (ns, name) = key(&cur);
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let mut sets: Vec<Value> = c
        .labelled(
            "cluster.x-k8s.io",
            "machinesets",
            &ns,
            &[(DEPLOYMENT_LABEL, &name)],
        )
        .into_iter()
        .filter(|s| owned_by(s, &uid))
        .collect();
    sets.sort_by_key(|s| meta(s, "creationTimestamp").unwrap_or("").to_string());
    let mut next = cur.clone();
    if deleting(&cur) {
        for s in &sets {
            c.delete("cluster.x-k8s.io", "machinesets", s);
        }
        if sets.is_empty() {
            c.drop_finalizer(&mut next, "machinedeployment.cluster.x-k8s.io");
        }
        c.write("cluster.x-k8s.io", "machinedeployments", &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, "machinedeployment.cluster.x-k8s.io");
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
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
    let current_name = format!("{name}-{hash}");
    let new_idx = sets
        .iter()
        .position(|s| meta(s, "name") == Some(current_name.as_str()));
    let set_replicas = |c: &mut Ctx<'_>, s: &Value, n: i64| {
        if spec_replicas(s) != n {
            let mut u = s.clone();
            u["spec"]["replicas"] = json!(n);
            c.write("cluster.x-k8s.io", "machinesets", s, u);
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
            let api = if c.v2 {
                "cluster.x-k8s.io/v1beta2"
            } else {
                "cluster.x-k8s.io/v1beta1"
            };
            let mut tmpl = template.clone();
            tmpl["metadata"]["labels"][DEPLOYMENT_LABEL] = json!(name);
            tmpl["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
            let replicas = grow(&sets, 0).max(0);
            let mut ms = json!({"apiVersion": api, "kind": "MachineSet",
                "metadata": {"name": current_name, "labels": {DEPLOYMENT_LABEL: name, CLUSTER_LABEL: cluster, "machine-template-hash": hash},
                             "ownerReferences": [owner_ref(&cur, true)]},
                "spec": {"clusterName": cluster, "replicas": replicas,
                         "selector": {"matchLabels": {DEPLOYMENT_LABEL: name, "machine-template-hash": hash}}, "template": tmpl}});
            if let Some(a) = annotation(&cur, NEVER_READY) {
                ms["metadata"]["annotations"] = json!({NEVER_READY: a});
            }
            c.create("cluster.x-k8s.io", "machinesets", &ns, ms);
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
            // Old MachineSets left without machines go (CAPI keeps
            // `revisionHistoryLimit` of them in v1beta1; none here).
            for (j, o) in sets.iter().enumerate() {
                if j != i && spec_replicas(&all[j]) == 0 && status_int(o, "replicas") == 0 {
                    c.delete("cluster.x-k8s.io", "machinesets", o);
                }
            }
        }
    }
    let sum = |k: &str| sets.iter().map(|s| status_int(s, k)).sum::<i64>();
    let replicas = sum("replicas");
    let ready = sum("readyReplicas");
    let available = sum("availableReplicas");
    let newest = new_idx.map(|i| &sets[i]);
    let updated = newest.map(|n| status_int(n, "replicas")).unwrap_or(0);
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
                        "selector": format!("{DEPLOYMENT_LABEL}={name}"), "phase": phase});
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
    c.write("cluster.x-k8s.io", "machinedeployments", &cur, next);
}

/// MachineSet: creates or deletes the missing or extra Machines at once.
/// Which go first on scale-down follows CAPI's delete policies
/// (`machineset_delete_policy.go`): machines already being deleted, then
/// those annotated `cluster.x-k8s.io/delete-machine`, then unhealthy ones,
/// then (Random) the newest here.
fn reconcile_ms(c: &mut Ctx<'_>, cur: Value) {
    let (ns, name) = key(&cur);
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let machines: Vec<Value> = c
        .labelled("cluster.x-k8s.io", "machines", &ns, &[(SET_LABEL, &name)])
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect();
    let live: Vec<&Value> = machines.iter().filter(|m| !deleting(m)).collect();
    let mut next = cur.clone();
    if deleting(&cur) {
        for m in &machines {
            c.delete("cluster.x-k8s.io", "machines", m);
        }
        c.write("cluster.x-k8s.io", "machinesets", &cur, next);
        return;
    }
    let want = spec_replicas(&cur).max(0) as usize;
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if live.len() < want {
        let template = cur
            .pointer("/spec/template/spec/infrastructureRef/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let version = cur.pointer("/spec/template/spec/version").cloned();
        let mut labels = cur
            .pointer("/spec/template/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        labels[SET_LABEL] = json!(name);
        for _ in live.len()..want {
            let mname = machine_name(&name, c);
            let m = new_machine(
                c,
                &cur,
                &mname,
                &cluster,
                version.as_ref(),
                &template,
                labels.clone(),
            );
            create_with_infra(c, &ns, m, &template);
        }
    } else if live.len() > want {
        let priority = |m: &Value| {
            if annotation(m, DELETE_MACHINE).is_some() {
                0
            } else if !ready_machine(m) {
                1
            } else {
                2
            }
        };
        let mut order: Vec<(usize, &&Value)> = live.iter().enumerate().collect();
        order.sort_by_key(|(i, m)| (priority(m), std::cmp::Reverse(*i)));
        let victims: Vec<Value> = order
            .iter()
            .take(live.len() - want)
            .map(|(_, m)| (**m).clone())
            .collect();
        for v in &victims {
            c.delete("cluster.x-k8s.io", "machines", v);
        }
    }
    let ready = live.iter().filter(|m| ready_machine(m)).count();
    next["status"] = json!({"replicas": live.len(), "readyReplicas": ready, "availableReplicas": ready,
                            "observedGeneration": cur["metadata"]["generation"],
                            "selector": format!("{DEPLOYMENT_LABEL}={}", label(&cur, DEPLOYMENT_LABEL).unwrap_or(""))});
    c.write("cluster.x-k8s.io", "machinesets", &cur, next);
}

fn reconcile_machine(c: &mut Ctx<'_>, cur: Value) {
    let (ns, name) = key(&cur);
    let mut next = cur.clone();
    let osm = c.get(
        "infrastructure.cluster.x-k8s.io",
        "openstackmachines",
        &ns,
        &name,
    );
    if deleting(&cur) {
        if cur.pointer("/status/phase").and_then(Value::as_str) != Some("Deleting") {
            next["status"]["phase"] = json!("Deleting"); // drain, one tick
        } else if let Some(o) = &osm {
            c.delete("infrastructure.cluster.x-k8s.io", "openstackmachines", o);
        } else {
            c.drop_finalizer(&mut next, "machine.cluster.x-k8s.io");
        }
        c.write("cluster.x-k8s.io", "machines", &cur, next);
        return;
    }
    c.ensure_finalizer(&mut next, "machine.cluster.x-k8s.io");
    let phase = cur
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let server = short_hash(&json!(meta(&cur, "uid")));
    let never =
        annotation(&cur, NEVER_READY).is_some() || c.ns_annotation(&ns, NEVER_READY).is_some();
    let mut st = cur.get("status").cloned().unwrap_or(json!({}));
    st["observedGeneration"] = cur["metadata"]["generation"].clone();
    // A machine waits for its cluster's infrastructure; workers also for an
    // initialized control plane (kubeadm join needs one).
    let cluster = cur
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let cl = c.get("cluster.x-k8s.io", "clusters", &ns, cluster);
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
        "Provisioning" if !never => {
            st["phase"] = json!("Provisioned");
            next["spec"]["providerID"] = json!(format!("openstack:///{server}"));
            let address = c.free_address(&ns, cluster, &server);
            st["addresses"] = json!([{"type": "InternalIP", "address": address}]);
            if c.v2 {
                st["initialization"] =
                    json!({"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true});
            } else {
                st["infrastructureReady"] = json!(true);
            }
        }
        "Provisioned" => {
            st["phase"] = json!("Running");
            st["nodeRef"] = if c.v2 {
                json!({"name": name})
            } else {
                json!({"apiVersion": "v1", "kind": "Node", "name": name, "uid": server})
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
    // Conditions of the phase reached (the sim's own messages; reasons
    // from CAPO and CAPI where they name these waits).
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
                json!([
                    c.condition("Available", true, "Available", ""),
                    c.condition("Ready", true, "Ready", ""),
                    c.condition("InfrastructureReady", true, "Ready", "")
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
            json!([
                c.condition_with("Ready", false, reason, severity, message),
                infra_cond
            ])
        }
    };
    next["status"] = st;
    keep_transition_times(&cur, &mut next);
    c.write("cluster.x-k8s.io", "machines", &cur, next);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookkeeping_fields_do_not_make_a_write() {
        let a = json!({"metadata": {"name": "m", "resourceVersion": "1", "managedFields": [1]},
                       "spec": {"x": 1}, "status": {"y": 2}});
        let mut b = a.clone();
        b["metadata"]["resourceVersion"] = json!("7");
        b["metadata"]["managedFields"] = json!([]);
        assert!(same_but_bookkeeping(&a, &b));
        for change in [
            json!({"metadata": {"name": "m", "resourceVersion": "1", "labels": {"l": "v"}}, "spec": {"x": 1}, "status": {"y": 2}}),
            json!({"metadata": {"name": "m"}, "spec": {"x": 2}, "status": {"y": 2}}),
            json!({"metadata": {"name": "m"}, "spec": {"x": 1}}),
            json!({"metadata": {"name": "m"}, "spec": {"x": 1}, "status": {"y": 2}, "extra": true}),
        ] {
            assert!(!same_but_bookkeeping(&change, &a), "{change}");
            assert!(!same_but_bookkeeping(&a, &change), "{change}");
        }
    }
}

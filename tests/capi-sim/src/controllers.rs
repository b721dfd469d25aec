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

/// One controller pass over everything; returns events and error messages.
pub struct Pass {
    pub events: Vec<Arc<Event>>,
    pub errors: Vec<String>,
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
fn ready_machine(m: &Value) -> bool {
    m.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
}

impl Ctx<'_> {
    /// An annotation of namespace `ns` (faults set for a whole namespace).
    fn ns_annotation(&self, ns: &str, key: &str) -> Option<String> {
        let r = self.s.find("", "namespaces")?;
        let n = self.s.get(r, None, ns).ok()?;
        annotation(&n, key).map(str::to_string)
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
        let mut cmp_next = next.clone();
        let mut cmp_cur = self.s.get(r, Some(&ns), &name).unwrap_or(Value::Null);
        for v in [&mut cmp_next, &mut cmp_cur] {
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
                m.remove("managedFields");
            }
        }
        if cmp_next != cmp_cur {
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

/// One pass of every controller.
pub fn pass(s: &mut Store, line: Line) -> Pass {
    let mut c = Ctx {
        s,
        v2: line == Line::V1beta2,
        now: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        out: Pass {
            events: vec![],
            errors: vec![],
        },
    };
    for (group, plural, reconcile) in CONTROLLERS {
        for obj in c.all(group, plural) {
            reconcile(&mut c, obj);
        }
    }
    c.out
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
        for md in c
            .all("cluster.x-k8s.io", "machinedeployments")
            .into_iter()
            .filter(|m| {
                label(m, CLUSTER_LABEL) == Some(&name)
                    || m.pointer("/spec/clusterName").and_then(Value::as_str) == Some(&name)
            })
        {
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
            // Too many: an outdated machine first, else the newest.
            let victim = live
                .iter()
                .find(|m| !up_to_date(m))
                .or_else(|| live.last())
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
    if let Some(v) = &version {
        st["version"] = v.clone();
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

fn reconcile_md(c: &mut Ctx<'_>, cur: Value) {
    let (ns, name) = key(&cur);
    let uid = meta(&cur, "uid").unwrap_or("").to_string();
    let sets: Vec<Value> = c
        .labelled(
            "cluster.x-k8s.io",
            "machinesets",
            &ns,
            &[(DEPLOYMENT_LABEL, &name)],
        )
        .into_iter()
        .filter(|s| owned_by(s, &uid))
        .collect();
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
    let want = cur
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let template = cur.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let hash = short_hash(&template);
    let current_name = format!("{name}-{hash}");
    let newest = sets
        .iter()
        .find(|s| meta(s, "name") == Some(current_name.as_str()))
        .cloned();
    match &newest {
        None => {
            let api = if c.v2 {
                "cluster.x-k8s.io/v1beta2"
            } else {
                "cluster.x-k8s.io/v1beta1"
            };
            let mut tmpl = template.clone();
            tmpl["metadata"]["labels"][DEPLOYMENT_LABEL] = json!(name);
            tmpl["metadata"]["labels"][CLUSTER_LABEL] = json!(cluster);
            let first = sets.is_empty();
            let mut ms = json!({"apiVersion": api, "kind": "MachineSet",
                "metadata": {"name": current_name, "labels": {DEPLOYMENT_LABEL: name, CLUSTER_LABEL: cluster, "machine-template-hash": hash},
                             "ownerReferences": [owner_ref(&cur, true)]},
                "spec": {"clusterName": cluster, "replicas": if first { want } else { 0 },
                         "selector": {"matchLabels": {DEPLOYMENT_LABEL: name, "machine-template-hash": hash}}, "template": tmpl}});
            if let Some(a) = annotation(&cur, NEVER_READY) {
                ms["metadata"]["annotations"] = json!({NEVER_READY: a});
            }
            c.create("cluster.x-k8s.io", "machinesets", &ns, ms);
        }
        Some(new) => {
            let new_replicas = new
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let new_ready = new
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let old: Vec<&Value> = sets
                .iter()
                .filter(|s| meta(s, "name") != Some(current_name.as_str()))
                .collect();
            let old_total: i64 = old
                .iter()
                .map(|s| {
                    s.pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                })
                .sum();
            let set_replicas = |c: &mut Ctx<'_>, s: &Value, n: i64| {
                let mut u = s.clone();
                u["spec"]["replicas"] = json!(n);
                c.write("cluster.x-k8s.io", "machinesets", s, u);
            };
            if old_total == 0 && new_replicas != want {
                set_replicas(c, new, want);
            } else if old_total > 0 && new_ready == new_replicas && new_replicas < want {
                set_replicas(c, new, new_replicas + 1); // surge one
            } else if old_total > 0
                && new_ready == new_replicas
                && new_replicas + old_total > want
                && let Some(o) = old.iter().find(|s| {
                    s.pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                        > 0
                })
            {
                let n = o
                    .pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                set_replicas(c, o, n - 1);
            }
            for o in old {
                let empty = o.pointer("/spec/replicas").and_then(Value::as_i64) == Some(0)
                    && o.pointer("/status/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                        == 0;
                if empty {
                    c.delete("cluster.x-k8s.io", "machinesets", o);
                }
            }
        }
    }
    let sum = |p: &str| {
        sets.iter()
            .map(|s| s.pointer(p).and_then(Value::as_i64).unwrap_or(0))
            .sum::<i64>()
    };
    let replicas = sum("/status/replicas");
    let ready = sum("/status/readyReplicas");
    let updated = newest
        .as_ref()
        .and_then(|n| n.pointer("/status/readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut st = json!({"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready,
                        "observedGeneration": cur["metadata"]["generation"],
                        "selector": format!("{DEPLOYMENT_LABEL}={name}"),
                        "phase": if ready == want && replicas == want { "Running" } else if replicas < want { "ScalingUp" } else if replicas > want { "ScalingDown" } else { "Running" }});
    if c.v2 {
        st["upToDateReplicas"] = json!(updated);
    } else {
        st["updatedReplicas"] = json!(updated);
        st["unavailableReplicas"] = json!((replicas - ready).max(0));
    }
    next["status"] = st;
    c.write("cluster.x-k8s.io", "machinedeployments", &cur, next);
}

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
    let want = cur
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0) as usize;
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
        // cluster.x-k8s.io/delete-machine first, then machines not ready, then the newest.
        let victim = live
            .iter()
            .find(|m| annotation(m, DELETE_MACHINE).is_some())
            .or_else(|| live.iter().find(|m| !ready_machine(m)))
            .or_else(|| live.last())
            .map(|m| (*m).clone());
        if let Some(v) = victim {
            c.delete("cluster.x-k8s.io", "machines", &v);
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
            let host =
                10 + u64::from_str_radix(&server[..2.min(server.len())], 16).unwrap_or(0) % 200;
            st["addresses"] = json!([{"type": "InternalIP", "address": format!("10.6.0.{host}")}]);
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
    next["status"] = st;
    c.write("cluster.x-k8s.io", "machines", &cur, next);
}

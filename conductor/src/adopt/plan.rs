//! The adoption plan (pure): what taking over another driver's cluster
//! would do to the objects that run it.
//!
//! Inputs are what [`super::read`] found on the management cluster for
//! one Magnum cluster (`live`) and what this conductor would render for
//! the same rows (`ours`, `capi::render`). Every object is put in one of
//! four places:
//!
//! - **own**: theirs, and ours has the same kind and name: it would carry
//!   our labels and keep its name (Kubernetes objects cannot be renamed);
//! - **create**: ours, with nothing of theirs at that name;
//! - **keep**: theirs, not rendered by us (the cluster's CAs, its
//!   application credential, Helm's release records, the templates its
//!   machines came from): left exactly as they are;
//! - **rolls**: a KubeadmControlPlane or MachineDeployment whose machines
//!   would be replaced if ours were applied over it. The triggers are the
//!   ones CAPI acts on: for a KubeadmControlPlane, its version, its
//!   machine template and its kubeadm configuration (KCP's
//!   `matchesMachineSpec`: `matchesKubernetesVersion`,
//!   `matchesTemplateClonedFrom`, `matchesKubeadmBootstrapConfig`,
//!   controlplane/kubeadm/internal/filters.go); for a MachineDeployment,
//!   its machine template spec (`MachineTemplateUpToDate`,
//!   internal/controllers/machinedeployment/mdutil/util.go: version,
//!   infrastructureRef, bootstrap configRef, failureDomain); a
//!   MachineDeployment of theirs that no nodegroup of ours would be named
//!   as loses all its machines.
//!
//! Some clusters cannot be adopted at all (**blockers**): one whose CAPI
//! Cluster is managed by a ClusterClass topology (vexxhost
//! magnum-cluster-api): CAPI refuses to remove `spec.topology` from an
//! existing Cluster ("cannot be removed from an existing Cluster",
//! internal/webhooks/cluster.go) and this conductor renders plain
//! objects; one in another namespace than ours (objects cannot change
//! namespace).
//!
//! The goal of an adoption is no replaced machine: a plan with a roll or a
//! blocker is refused, with them as the reason.

use serde_json::Value;

use crate::capi::render::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};

/// The label CAPI's MachineSet controller puts on the Machines of a
/// MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";

/// One object, by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjRef {
    pub kind: String,
    pub name: String,
}

impl std::fmt::Display for ObjRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

pub(super) fn obj_ref(o: &Value) -> ObjRef {
    ObjRef {
        kind: o["kind"].as_str().unwrap_or("?").to_string(),
        name: o["metadata"]["name"].as_str().unwrap_or("?").to_string(),
    }
}

/// Machines that would be replaced, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    /// The KubeadmControlPlane or MachineDeployment that would roll.
    pub object: ObjRef,
    /// Its Machines (names).
    pub machines: Vec<String>,
    /// What differs, one phrase each.
    pub why: Vec<String>,
}

/// What adopting one cluster would do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub uuid: String,
    pub driver: String,
    pub stack_id: String,
    /// Where its CAPI Cluster is (empty: not found).
    pub namespace: String,
    pub own: Vec<ObjRef>,
    pub create: Vec<ObjRef>,
    pub keep: Vec<(ObjRef, String)>,
    pub rolls: Vec<Roll>,
    pub blockers: Vec<String>,
}

/// Who the cluster is, as the rows say.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    pub uuid: &'a str,
    /// Its Magnum status: only an idle cluster is adopted.
    pub status: &'a str,
    /// The driver that owns it now.
    pub driver: &'a str,
    pub stack_id: &'a str,
    /// The namespace this conductor keeps it in.
    pub namespace: &'a str,
}

impl Plan {
    /// No blocker and no machine replaced.
    pub fn adoptable(&self) -> bool {
        self.blockers.is_empty() && self.rolls.is_empty()
    }

    /// Machines that would be replaced.
    pub fn machines_replaced(&self) -> usize {
        self.rolls.iter().map(|r| r.machines.len()).sum()
    }

    /// The plan as an operator reads it.
    pub fn render(&self) -> String {
        let mut out = format!(
            "cluster {} ({}), driver {}, CAPI Cluster {}\n",
            self.uuid,
            self.stack_id,
            self.driver,
            if self.namespace.is_empty() {
                "not found".to_string()
            } else {
                format!("in namespace {}", self.namespace)
            }
        );
        let list = |title: &str, items: Vec<String>, out: &mut String| {
            if items.is_empty() {
                return;
            }
            out.push_str(&format!("{title} ({}):\n", items.len()));
            for i in items {
                out.push_str(&format!("  {i}\n"));
            }
        };
        list(
            "own (kept under its name, labelled as ours)",
            self.own.iter().map(ToString::to_string).collect(),
            &mut out,
        );
        list(
            "create (ours, new)",
            self.create.iter().map(ToString::to_string).collect(),
            &mut out,
        );
        list(
            "keep (left as it is)",
            self.keep
                .iter()
                .map(|(o, why)| format!("{o}: {why}"))
                .collect(),
            &mut out,
        );
        list(
            "machines that would be replaced",
            self.rolls
                .iter()
                .map(|r| {
                    format!(
                        "{}: {} machine(s) ({}): {}",
                        r.object,
                        r.machines.len(),
                        r.machines.join(", "),
                        r.why.join("; ")
                    )
                })
                .collect(),
            &mut out,
        );
        if self.adoptable() {
            out.push_str("adoptable: no machine would be replaced\n");
        } else {
            let mut reasons = self.blockers.clone();
            if !self.rolls.is_empty() {
                reasons.push(format!(
                    "{} machine(s) would be replaced (an adoption replaces none)",
                    self.machines_replaced()
                ));
            }
            out.push_str(&format!("refused: {}\n", reasons.join("; ")));
        }
        out
    }
}

fn kind_is(o: &Value, kind: &str) -> bool {
    o["kind"].as_str() == Some(kind)
}

pub(super) fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

fn label<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o["metadata"]["labels"][key].as_str()
}

/// A reference's name, in either line's shape.
fn ref_name(o: &Value, pointers: &[&str]) -> Option<String> {
    pointers
        .iter()
        .find_map(|p| o.pointer(p).and_then(Value::as_str))
        .map(str::to_string)
}

fn version(v: Option<&Value>) -> String {
    v.and_then(Value::as_str)
        .unwrap_or("")
        .trim_start_matches('v')
        .to_string()
}

/// What would make a KubeadmControlPlane's machines roll, ours over theirs.
fn control_plane_changes(theirs: &Value, ours: &Value) -> Vec<String> {
    let mut why = Vec::new();
    let (a, b) = (
        version(theirs.pointer("/spec/version")),
        version(ours.pointer("/spec/version")),
    );
    if a != b {
        why.push(format!("Kubernetes version v{a} -> v{b}"));
    }
    let refs = [
        "/spec/machineTemplate/infrastructureRef/name",
        "/spec/machineTemplate/spec/infrastructureRef/name",
    ];
    let (a, b) = (ref_name(theirs, &refs), ref_name(ours, &refs));
    if a != b {
        why.push(format!(
            "machine template {} -> {}",
            a.unwrap_or_default(),
            b.unwrap_or_default()
        ));
    }
    // An adopted control plane keeps its kubeadm configuration (ours sends none).
    if ours.pointer("/spec/kubeadmConfigSpec").is_some()
        && theirs.pointer("/spec/kubeadmConfigSpec") != ours.pointer("/spec/kubeadmConfigSpec")
    {
        why.push("kubeadm configuration differs".into());
    }
    why
}

/// What would make a MachineDeployment's machines roll, ours over theirs.
fn group_changes(theirs: &Value, ours: &Value) -> Vec<String> {
    let mut why = Vec::new();
    let (a, b) = (
        version(theirs.pointer("/spec/template/spec/version")),
        version(ours.pointer("/spec/template/spec/version")),
    );
    if a != b {
        why.push(format!("Kubernetes version v{a} -> v{b}"));
    }
    for (what, p) in [
        (
            "machine template",
            "/spec/template/spec/infrastructureRef/name",
        ),
        (
            "bootstrap template",
            "/spec/template/spec/bootstrap/configRef/name",
        ),
    ] {
        let (a, b) = (ref_name(theirs, &[p]), ref_name(ours, &[p]));
        if a != b {
            why.push(format!(
                "{what} {} -> {}",
                a.unwrap_or_default(),
                b.unwrap_or_default()
            ));
        }
    }
    let fd = "/spec/template/spec/failureDomain";
    if theirs.pointer(fd) != ours.pointer(fd) {
        why.push("failure domain differs".into());
    }
    why
}

/// Why a live object no rendering of ours covers is kept.
fn keep_reason(o: &Value, stack: &str) -> String {
    let name = name_of(o);
    let suffix = name.strip_prefix(stack).unwrap_or("");
    match (o["kind"].as_str().unwrap_or(""), suffix) {
        ("Secret", "-ca" | "-etcd" | "-proxy" | "-sa") => {
            "one of the cluster's certificate authorities (Magnum's, as ours): kept, its \
             apiserver and every certificate Magnum signed keep working"
                .into()
        }
        ("Secret", "-kubeconfig") => "written by CAPI from the cluster's CA: kept".into(),
        ("Secret", "-cloud-credentials" | "-cloud-config") => {
            "the cluster's OpenStack credential: kept, its machines and cloud provider use it"
                .into()
        }
        ("Secret", _) if name.starts_with("sh.helm.release.") => {
            "Helm's record of the release: kept (never `helm uninstall` an adopted cluster: \
             it would delete what this conductor now runs)"
                .into()
        }
        ("OpenStackMachineTemplate" | "KubeadmConfigTemplate", _) => {
            "a template its machines were made from: kept while they use it".into()
        }
        ("MachineHealthCheck", _) => "its health check: kept, it remediates as before".into(),
        ("Deployment" | "ServiceAccount" | "Role" | "RoleBinding", _) => {
            "its driver's cluster autoscaler: kept (it acts on the MachineDeployments' \
             annotations, which this conductor writes as its driver did)"
                .into()
        }
        _ => "not rendered by this conductor: kept as it is".into(),
    }
}

/// Whether a cluster in this Magnum status has no operation under way.
pub fn idle(status: &str) -> bool {
    status.ends_with("_COMPLETE") && status != "DELETE_COMPLETE"
}

/// What adoption writes on one object: labels and annotations added by a
/// merge patch (nothing else of it changes).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub kind: String,
    pub name: String,
    pub labels: serde_json::Map<String, Value>,
    pub annotations: serde_json::Map<String, Value>,
}

/// The marks that hand an adoptable cluster's objects to this conductor
/// (pure): every object found (not its Machines) carries our cluster,
/// project and CAPI cluster-name labels, so our status cache finds it and
/// our delete sweeps it; each MachineDeployment, and the templates it
/// uses, its nodegroup's key (read off ours of the same name); the
/// control plane and the groups [`ADOPTED_ANNOTATION`]; the CAPI Cluster,
/// last, that and the templates before and after (`adopt --undo`).
pub fn marks(
    subject: &Subject<'_>,
    project: &str,
    live: &[Value],
    ours: &[Value],
    template: &str,
    twin: &str,
) -> Vec<Mark> {
    use crate::capi::render::{
        ADOPTED_ANNOTATION, ADOPTED_TEMPLATE_ANNOTATION, ADOPTED_TWIN_ANNOTATION, NODEGROUP_LABEL,
        PROJECT_LABEL, UUID_LABEL,
    };
    let key_of = |md: &str| -> Option<String> {
        ours.iter()
            .find(|o| kind_is(o, "MachineDeployment") && name_of(o) == md)
            .and_then(|o| label(o, NODEGROUP_LABEL))
            .map(str::to_string)
    };
    // Template name -> group key, for the templates adopted groups use.
    let mut template_keys: Vec<(String, String)> = Vec::new();
    for md in live.iter().filter(|o| kind_is(o, "MachineDeployment")) {
        if let Some(k) = key_of(name_of(md)) {
            for p in [
                "/spec/template/spec/infrastructureRef/name",
                "/spec/template/spec/bootstrap/configRef/name",
            ] {
                if let Some(t) = md.pointer(p).and_then(Value::as_str) {
                    template_keys.push((t.to_string(), k.clone()));
                }
            }
        }
    }
    let mut out: Vec<Mark> = Vec::new();
    let mut cluster_mark = None;
    for o in live.iter().filter(|o| !kind_is(o, "Machine")) {
        let (kind, name) = (o["kind"].as_str().unwrap_or(""), name_of(o));
        let mut labels = serde_json::Map::new();
        labels.insert(UUID_LABEL.into(), Value::from(subject.uuid));
        labels.insert(PROJECT_LABEL.into(), Value::from(project));
        labels.insert(CLUSTER_NAME_LABEL.into(), Value::from(subject.stack_id));
        let mut annotations = serde_json::Map::new();
        match kind {
            "MachineDeployment" => {
                if let Some(k) = key_of(name) {
                    labels.insert(NODEGROUP_LABEL.into(), Value::from(k));
                }
                annotations.insert(ADOPTED_ANNOTATION.into(), Value::from(subject.driver));
            }
            "OpenStackMachineTemplate" | "KubeadmConfigTemplate" => {
                if let Some((_, k)) = template_keys.iter().find(|(t, _)| t == name) {
                    labels.insert(NODEGROUP_LABEL.into(), Value::from(k.as_str()));
                }
            }
            "KubeadmControlPlane" => {
                annotations.insert(ADOPTED_ANNOTATION.into(), Value::from(subject.driver));
            }
            "Cluster" => {
                annotations.insert(ADOPTED_ANNOTATION.into(), Value::from(subject.driver));
                annotations.insert(ADOPTED_TEMPLATE_ANNOTATION.into(), Value::from(template));
                annotations.insert(ADOPTED_TWIN_ANNOTATION.into(), Value::from(twin));
            }
            _ => {}
        }
        let m = Mark {
            kind: kind.to_string(),
            name: name.to_string(),
            labels,
            annotations,
        };
        if kind == "Cluster" {
            cluster_mark = Some(m);
        } else {
            out.push(m);
        }
    }
    out.extend(cluster_mark);
    out
}

/// The adoption plan for `subject`: `live` is everything found for it
/// (its CAPI Cluster at `found_in`, and what carries its labels there),
/// `ours` what this conductor renders for its rows (`Err`: it cannot).
pub fn plan(
    subject: &Subject<'_>,
    found_in: Option<&str>,
    live: &[Value],
    ours: Result<&[Value], &str>,
) -> Plan {
    let mut p = Plan {
        uuid: subject.uuid.to_string(),
        driver: subject.driver.to_string(),
        stack_id: subject.stack_id.to_string(),
        namespace: found_in.unwrap_or("").to_string(),
        ..Plan::default()
    };
    let stack = subject.stack_id;
    if !idle(subject.status) {
        p.blockers.push(format!(
            "it is busy (status {}): adopt it once its driver has finished (status *_COMPLETE)",
            subject.status
        ));
    }
    let Some(cluster) = live
        .iter()
        .find(|o| kind_is(o, "Cluster") && name_of(o) == stack)
    else {
        p.blockers.push(format!(
            "no CAPI Cluster named {stack} on the management cluster (looked in {} and \
             magnum-system): nothing to adopt",
            subject.namespace
        ));
        return p;
    };
    if let Some(t) = cluster.pointer("/spec/topology").filter(|t| t.is_object()) {
        let class = t["class"]
            .as_str()
            .or_else(|| t.pointer("/classRef/name").and_then(Value::as_str))
            .unwrap_or("?");
        p.blockers.push(format!(
            "its CAPI Cluster is managed by the ClusterClass topology {class}: CAPI refuses to \
             remove spec.topology from an existing Cluster and this conductor renders plain \
             objects, so adopting it means a new cluster (every machine replaced)"
        ));
    }
    if p.namespace != subject.namespace {
        p.blockers.push(format!(
            "its objects are in namespace {}, this conductor keeps the project's clusters in {}: \
             Kubernetes objects cannot change namespace, so every object and machine would be \
             recreated",
            p.namespace, subject.namespace
        ));
    }
    let ours = match ours {
        Ok(o) => o,
        Err(e) => {
            p.blockers
                .push(format!("this conductor cannot render its rows: {e}"));
            &[]
        }
    };
    let machines = |pred: &dyn Fn(&Value) -> bool| -> Vec<String> {
        let mut m: Vec<String> = live
            .iter()
            .filter(|o| kind_is(o, "Machine") && pred(o))
            .map(|o| name_of(o).to_string())
            .collect();
        m.sort();
        m
    };
    let mut covered: Vec<ObjRef> = Vec::new();
    for o in ours {
        let r = obj_ref(o);
        match live.iter().find(|l| obj_ref(l) == r) {
            Some(theirs) => {
                let why = match r.kind.as_str() {
                    "KubeadmControlPlane" => control_plane_changes(theirs, o),
                    "MachineDeployment" => group_changes(theirs, o),
                    _ => Vec::new(),
                };
                if !why.is_empty() {
                    let ms = if r.kind == "KubeadmControlPlane" {
                        machines(&|m| {
                            label(m, CONTROL_PLANE_LABEL).is_some()
                                && label(m, CLUSTER_NAME_LABEL) == Some(stack)
                        })
                    } else {
                        machines(&|m| label(m, DEPLOYMENT_LABEL) == Some(&r.name))
                    };
                    p.rolls.push(Roll {
                        object: r.clone(),
                        machines: ms,
                        why,
                    });
                }
                p.own.push(r.clone());
            }
            None => p.create.push(r.clone()),
        }
        covered.push(r);
    }
    for l in live {
        let r = obj_ref(l);
        if covered.contains(&r) || r.kind == "Machine" {
            continue;
        }
        match r.kind.as_str() {
            "KubeadmControlPlane" => p.rolls.push(Roll {
                machines: machines(&|m| label(m, CONTROL_PLANE_LABEL).is_some()),
                why: vec![format!(
                    "this conductor's control plane has another name ({}): a new one would \
                     replace it",
                    ours.iter()
                        .find(|o| kind_is(o, "KubeadmControlPlane"))
                        .map(name_of)
                        .unwrap_or("none")
                )],
                object: r,
            }),
            "MachineDeployment" => p.rolls.push(Roll {
                machines: machines(&|m| label(m, DEPLOYMENT_LABEL) == Some(&r.name)),
                why: vec![
                    "no nodegroup of this cluster has that name here (this conductor names a \
                     nodegroup's MachineDeployment <stack_id>-<nodegroup>): its machines would \
                     be replaced by a new group's"
                        .into(),
                ],
                object: r,
            }),
            _ => {
                let why = keep_reason(l, stack);
                p.keep.push((r, why));
            }
        }
    }
    let n = live.iter().filter(|o| kind_is(o, "Machine")).count();
    if n > 0 {
        p.keep.push((
            ObjRef {
                kind: "Machine".into(),
                name: format!("({n})"),
            },
            "the running machines: kept unless listed as replaced".into(),
        ));
    }
    p.own.sort();
    p.create.sort();
    p.keep.sort();
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STACK: &str = "k8s-abcdefghijkl";
    const NS: &str = "magnum-p1";

    fn subject() -> Subject<'static> {
        Subject {
            uuid: "u-1",
            status: "CREATE_COMPLETE",
            driver: "k8s_capi_helm_v1",
            stack_id: STACK,
            namespace: NS,
        }
    }

    fn obj(kind: &str, name: &str, labels: Value, spec: Value) -> Value {
        json!({"kind": kind, "metadata": {"name": name, "labels": labels}, "spec": spec})
    }

    fn kcp(template: &str, version: &str) -> Value {
        obj(
            "KubeadmControlPlane",
            &format!("{STACK}-control-plane"),
            json!({}),
            json!({"version": version, "replicas": 1,
                   "machineTemplate": {"infrastructureRef": {"name": template}},
                   "kubeadmConfigSpec": {"clusterConfiguration": {}}}),
        )
    }

    fn md(group: &str, template: &str, boot: &str) -> Value {
        obj(
            "MachineDeployment",
            &format!("{STACK}-{group}"),
            json!({}),
            json!({"replicas": 2, "template": {"spec": {"version": "v1.30.2",
                "infrastructureRef": {"name": template}, "bootstrap": {"configRef": {"name": boot}}}}}),
        )
    }

    fn machine(name: &str, labels: Value) -> Value {
        obj("Machine", name, labels, json!({}))
    }

    fn cluster(spec: Value) -> Value {
        obj("Cluster", STACK, json!({}), spec)
    }

    /// A capi-helm cluster: one control-plane machine, two workers.
    fn live() -> Vec<Value> {
        vec![
            cluster(json!({})),
            obj("OpenStackCluster", STACK, json!({}), json!({})),
            kcp(&format!("{STACK}-control-plane-1a2b3c4d"), "v1.30.2"),
            md(
                "default-worker",
                &format!("{STACK}-default-worker-5e6f7a8b"),
                &format!("{STACK}-default-worker-9c0d1e2f"),
            ),
            machine(
                "cp-0",
                json!({CONTROL_PLANE_LABEL: "", CLUSTER_NAME_LABEL: STACK}),
            ),
            machine(
                "w-0",
                json!({DEPLOYMENT_LABEL: format!("{STACK}-default-worker")}),
            ),
            machine(
                "w-1",
                json!({DEPLOYMENT_LABEL: format!("{STACK}-default-worker")}),
            ),
            obj("Secret", &format!("{STACK}-ca"), json!({}), json!(null)),
            obj(
                "Secret",
                &format!("{STACK}-cloud-credentials"),
                json!({}),
                json!(null),
            ),
            obj(
                "Secret",
                &format!("sh.helm.release.v1.{STACK}.v1"),
                json!({}),
                json!(null),
            ),
        ]
    }

    #[test]
    fn the_same_objects_are_adopted_with_no_machine_replaced() {
        // Ours is what is there (same names, refs and kubeadm configuration).
        let l = live();
        let ours: Vec<Value> = l[..4].to_vec();
        let p = plan(&subject(), Some(NS), &l, Ok(&ours));
        assert!(p.adoptable(), "{}", p.render());
        assert_eq!(p.own.len(), 4);
        assert!(p.create.is_empty());
        assert!(
            p.keep.iter().any(|(o, why)| o.name == format!("{STACK}-ca")
                && why.contains("certificate authorities"))
        );
        assert!(
            p.keep.iter().any(
                |(o, why)| o.name.ends_with("-cloud-credentials") && why.contains("credential")
            )
        );
        assert!(
            p.keep
                .iter()
                .any(|(o, _)| o.kind == "Machine" && o.name == "(3)")
        );
        assert!(
            p.render()
                .contains("adoptable: no machine would be replaced")
        );
    }

    #[test]
    fn new_templates_roll_the_machines_that_use_them_and_are_refused() {
        let l = live();
        let ours = vec![
            cluster(json!({})),
            obj("OpenStackCluster", STACK, json!({}), json!({})),
            kcp(&format!("{STACK}-control-plane-ffffffff"), "1.30.2"),
            obj(
                "OpenStackMachineTemplate",
                &format!("{STACK}-control-plane-ffffffff"),
                json!({}),
                json!({}),
            ),
            md(
                "default-worker",
                &format!("{STACK}-default-worker-5e6f7a8b"),
                &format!("{STACK}-default-worker-00000000"),
            ),
        ];
        let p = plan(&subject(), Some(NS), &l, Ok(&ours));
        assert!(!p.adoptable());
        assert_eq!(p.machines_replaced(), 3);
        let cp = &p.rolls[0];
        assert_eq!(cp.machines, vec!["cp-0"]);
        // "v" prefixes are not a difference.
        assert_eq!(
            cp.why,
            vec![format!(
                "machine template {STACK}-control-plane-1a2b3c4d -> {STACK}-control-plane-ffffffff"
            )]
        );
        let w = &p.rolls[1];
        assert_eq!(w.machines, vec!["w-0", "w-1"]);
        assert_eq!(w.why.len(), 1);
        assert!(w.why[0].starts_with("bootstrap template"), "{:?}", w.why);
        assert!(
            p.create
                .iter()
                .any(|o| o.kind == "OpenStackMachineTemplate")
        );
        // Their old templates would be kept (machines still use them).
        assert!(
            p.render()
                .contains("refused: 3 machine(s) would be replaced")
        );
    }

    #[test]
    fn a_group_of_theirs_no_nodegroup_of_ours_is_named_as_is_a_roll() {
        let l = live();
        let mut ours: Vec<Value> = l[..3].to_vec();
        ours.push(md("default-worker-1a2b3c4d", "t", "b"));
        let p = plan(&subject(), Some(NS), &l, Ok(&ours));
        assert!(!p.adoptable());
        let r = p
            .rolls
            .iter()
            .find(|r| r.object.name == format!("{STACK}-default-worker"))
            .expect("their group rolls");
        assert_eq!(r.machines.len(), 2);
        assert!(
            p.create
                .iter()
                .any(|o| o.name == format!("{STACK}-default-worker-1a2b3c4d"))
        );
    }

    #[test]
    fn topology_and_another_namespace_are_blockers() {
        let l = vec![cluster(
            json!({"topology": {"class": "magnum-v0.38.2", "version": "v1.30.2"}}),
        )];
        let p = plan(&subject(), Some("magnum-system"), &l, Ok(&[]));
        assert_eq!(p.blockers.len(), 2, "{:?}", p.blockers);
        assert!(p.blockers[0].contains("ClusterClass topology magnum-v0.38.2"));
        assert!(p.blockers[1].contains("namespace magnum-system"));
        assert!(!p.adoptable());
    }

    #[test]
    fn nothing_found_or_nothing_rendered_is_refused_with_the_reason() {
        let p = plan(&subject(), None, &[], Ok(&[]));
        assert!(p.blockers[0].contains("no CAPI Cluster named"));
        assert!(p.render().contains("CAPI Cluster not found"));
        let l = live();
        let p = plan(&subject(), Some(NS), &l, Err("network_driver flannel"));
        assert!(!p.adoptable());
        assert!(p.blockers[0].contains("cannot render its rows: network_driver flannel"));
    }
}

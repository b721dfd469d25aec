//! Adopting a cluster run by a ClusterClass topology (pure): vexxhost
//! magnum-cluster-api 0.38's, a Cluster named by its `stack_id` in
//! `magnum-system` whose `spec.topology` names the driver's ClusterClass
//! (`magnum_cluster_api/resources.py` `Cluster.get_object`).
//!
//! Such a cluster stays a topology: CAPI never lets `spec.topology` go, and
//! CAPI's topology controller, not its driver, made its control plane and
//! MachineDeployments. Adopting it writes nothing that CAPI acts on: the
//! CAPI Cluster gets this conductor's labels (its watch finds the cluster
//! by `cluster.x-k8s.io/cluster-name`, which a topology Cluster does not
//! carry) and the adoption annotations; the driver's per-cluster Secrets,
//! ClusterResourceSets and cluster-autoscaler release (Deployment, its
//! ServiceAccount, Role and RoleBinding, Helm's record) get the cluster's
//! uuid label (so deleting the cluster removes them, as the driver's
//! delete did); the row gets the
//! `capi_adopted_namespace` label (`lifecycle::rows`). From then on
//! operations write the topology (`capi::topology`), as the driver did.
//!
//! Refused (blockers), each because the first operation afterwards would
//! change machines the rows do not ask to change: a topology whose
//! version, control-plane count or worker entries disagree with the rows;
//! a nodegroup whose name is not its key here (a DNS label of up to 19
//! characters: the entry's name must be the nodegroup's); a cluster
//! outside `magnum-system`; a management cluster on CAPI v1beta2 (the
//! driver writes v1beta1 topologies, which this conductor reads as
//! v1beta1 only).

use serde_json::Value;

use super::plan::{Mark, ObjRef, Plan, Subject, idle, name_of, obj_ref};
use crate::capi::render::{
    ADOPTED_ANNOTATION, ADOPTED_TEMPLATE_ANNOTATION, ADOPTED_TWIN_ANNOTATION, CLUSTER_NAME_LABEL,
    CapiLine, ClusterInput, PROJECT_LABEL, UUID_LABEL,
};
use crate::capi::topology::{VEXXHOST_NAMESPACE, same_version};

fn kind_of(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or("?")
}

/// Why an object of the cluster is kept as it is.
fn keep_reason(o: &Value, stack: &str, class: &str) -> String {
    let name = name_of(o);
    match kind_of(o) {
        "KubeadmControlPlane"
        | "MachineDeployment"
        | "OpenStackCluster"
        | "MachineHealthCheck"
        | "OpenStackMachineTemplate"
        | "KubeadmConfigTemplate" => format!(
            "made by CAPI from the topology (ClusterClass {class}): CAPI keeps it in step with \
             the topology this conductor writes"
        ),
        "ClusterResourceSet" => "its driver's addons (CNI, cloud provider, CSI): kept, removed \
                                 with the cluster"
            .into(),
        "Deployment" | "ServiceAccount" | "Role" | "RoleBinding" => {
            "its driver's cluster autoscaler (Helm release in the management cluster): kept, it \
             acts on the annotations this conductor writes into the topology; removed with the \
             cluster"
                .into()
        }
        "Secret" => match name.strip_prefix(stack).unwrap_or("") {
            "-ca" | "-etcd" | "-proxy" | "-sa" => {
                "one of the cluster's certificate authorities (Magnum's, as ours): kept, its \
                 apiserver and every certificate Magnum signed keep working"
                    .into()
            }
            "-kubeconfig" => "written by CAPI from the cluster's CA: kept".into(),
            "-cloud-config" => "the cluster's OpenStack credential: kept, its machines and cloud \
                                provider use it; deleted with the cluster"
                .into(),
            _ => "its driver's: kept, removed with the cluster".into(),
        },
        _ => "not written by this conductor: kept as it is".into(),
    }
}

/// The adoption plan of a topology cluster: `live` is what was found for
/// it (its CAPI Cluster in `found_in`), `rows` what its rows ask for.
pub fn plan(
    subject: &Subject<'_>,
    found_in: &str,
    line: CapiLine,
    live: &[Value],
    rows: Result<&ClusterInput, &str>,
) -> Plan {
    let mut p = Plan {
        uuid: subject.uuid.to_string(),
        driver: subject.driver.to_string(),
        stack_id: subject.stack_id.to_string(),
        namespace: found_in.to_string(),
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
        .find(|o| kind_of(o) == "Cluster" && name_of(o) == stack)
    else {
        p.blockers
            .push(format!("no CAPI Cluster named {stack} in {found_in}"));
        return p;
    };
    let topo = &cluster["spec"]["topology"];
    let class = topo["class"].as_str().unwrap_or("?");
    if found_in != VEXXHOST_NAMESPACE {
        p.blockers.push(format!(
            "its CAPI Cluster is a topology in namespace {found_in}: only vexxhost \
             magnum-cluster-api's ({VEXXHOST_NAMESPACE}) are adopted as topologies"
        ));
    }
    if line != CapiLine::V1beta1 {
        p.blockers.push(
            "the management cluster serves CAPI v1beta2: topologies are adopted on v1beta1 \
             (the API vexxhost magnum-cluster-api writes) only"
                .into(),
        );
    }
    match rows {
        Err(e) => p
            .blockers
            .push(format!("this conductor cannot read its rows: {e}")),
        Ok(input) => rows_agree(&mut p, topo, input),
    }
    p.own.push(obj_ref(cluster));
    for o in live {
        let r = obj_ref(o);
        if r.kind == "Machine" || (r.kind == "Cluster" && r.name == stack) {
            continue;
        }
        p.keep.push((r, keep_reason(o, stack, class)));
    }
    let n = live.iter().filter(|o| kind_of(o) == "Machine").count();
    if n > 0 {
        p.keep.push((
            ObjRef {
                kind: "Machine".into(),
                name: format!("({n})"),
            },
            "the running machines: kept (adoption writes nothing CAPI acts on)".into(),
        ));
    }
    p.keep.sort();
    p
}

/// Blockers where the topology and the rows disagree.
fn rows_agree(p: &mut Plan, topo: &Value, input: &ClusterInput) {
    let version = topo["version"].as_str().unwrap_or("");
    if !same_version(version, &input.master_version) {
        p.blockers.push(format!(
            "its topology runs Kubernetes {version} and its rows say {}: the first operation \
             would upgrade it (every machine replaced)",
            input.master_version
        ));
    }
    let cp = topo
        .pointer("/controlPlane/replicas")
        .and_then(Value::as_i64);
    if cp.is_some_and(|n| n != i64::from(input.master_count)) {
        p.blockers.push(format!(
            "its topology has {} control-plane machine(s) and its rows say {}",
            cp.unwrap_or_default(),
            input.master_count
        ));
    }
    let entries = topo
        .pointer("/workers/machineDeployments")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for g in &input.workers {
        if g.key != g.name {
            p.blockers.push(format!(
                "nodegroup {} is not a DNS label of up to 19 characters: this conductor would \
                 look for its topology entry as {}",
                g.name, g.key
            ));
            continue;
        }
        let Some(e) = entries.iter().find(|e| e["name"].as_str() == Some(&g.name)) else {
            p.blockers.push(format!(
                "nodegroup {} has no entry in its topology: the first operation would create \
                 its machines",
                g.name
            ));
            continue;
        };
        if let Some(n) = e["replicas"].as_i64()
            && g.autoscale.is_none()
            && n != i64::from(g.count)
        {
            p.blockers.push(format!(
                "topology entry {} has {n} machine(s) and its nodegroup says {}: the first \
                 operation would resize it",
                g.name, g.count
            ));
        }
    }
    for e in &entries {
        let n = e["name"].as_str().unwrap_or("?");
        if !input.workers.iter().any(|g| g.name == n) {
            p.blockers.push(format!(
                "topology entry {n} has no nodegroup row: its machines would be nobody's"
            ));
        }
    }
}

/// The marks that hand a topology cluster over (see the module
/// documentation): its driver's Secrets and ClusterResourceSets first,
/// the CAPI Cluster last.
pub fn marks(
    subject: &Subject<'_>,
    project: &str,
    live: &[Value],
    template: &str,
    twin: &str,
) -> Vec<Mark> {
    let base = || {
        let mut labels = serde_json::Map::new();
        labels.insert(UUID_LABEL.into(), Value::from(subject.uuid));
        labels.insert(PROJECT_LABEL.into(), Value::from(project));
        labels
    };
    let mut out: Vec<Mark> = live
        .iter()
        .filter(|o| {
            matches!(
                kind_of(o),
                "Secret"
                    | "ClusterResourceSet"
                    | "Deployment"
                    | "ServiceAccount"
                    | "Role"
                    | "RoleBinding"
            )
        })
        .map(|o| Mark {
            kind: kind_of(o).to_string(),
            name: name_of(o).to_string(),
            labels: base(),
            annotations: serde_json::Map::new(),
        })
        .collect();
    let mut labels = base();
    labels.insert(CLUSTER_NAME_LABEL.into(), Value::from(subject.stack_id));
    let mut annotations = serde_json::Map::new();
    annotations.insert(ADOPTED_ANNOTATION.into(), Value::from(subject.driver));
    annotations.insert(ADOPTED_TEMPLATE_ANNOTATION.into(), Value::from(template));
    annotations.insert(ADOPTED_TWIN_ANNOTATION.into(), Value::from(twin));
    out.push(Mark {
        kind: "Cluster".into(),
        name: subject.stack_id.to_string(),
        labels,
        annotations,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::render::WorkerGroup;
    use serde_json::json;

    const STACK: &str = "kube-ab1cd";

    fn subject() -> Subject<'static> {
        Subject {
            uuid: "u-1",
            status: "CREATE_COMPLETE",
            driver: "k8s_cluster_api",
            stack_id: STACK,
            namespace: "magnum-p1",
        }
    }

    fn live() -> Vec<Value> {
        vec![
            json!({"kind": "Cluster", "metadata": {"name": STACK}, "spec": {"topology": {
                "class": "magnum-v0.38.1", "version": "v1.30.4", "controlPlane": {"replicas": 1},
                "workers": {"machineDeployments": [{"class": "default-worker", "name": "default-worker", "replicas": 2}]}}}}),
            json!({"kind": "KubeadmControlPlane", "metadata": {"name": format!("{STACK}-x7k2p")}}),
            json!({"kind": "MachineDeployment", "metadata": {"name": format!("{STACK}-default-worker-q9z8r")}}),
            json!({"kind": "Secret", "metadata": {"name": format!("{STACK}-cloud-config")}}),
            json!({"kind": "Secret", "metadata": {"name": format!("{STACK}-ca")}}),
            json!({"kind": "ClusterResourceSet", "metadata": {"name": "u-1"}}),
            json!({"kind": "Machine", "metadata": {"name": "m1"}}),
        ]
    }

    fn rows() -> ClusterInput {
        let l: std::collections::BTreeMap<String, String> =
            [("kube_tag".to_string(), "v1.30.4".to_string())].into();
        let (labels, _) = crate::capi::labels::parse(&l, "calico").unwrap();
        ClusterInput {
            line: CapiLine::V1beta1,
            stack_id: STACK.into(),
            namespace: "magnum-system".into(),
            cluster_uuid: "u-1".into(),
            project_id: "p1".into(),
            labels,
            master_version: "v1.30.4".into(),
            master_image: "img-1".into(),
            master_flavor: "m1.medium".into(),
            master_count: 1,
            master_docker_volume_gb: None,
            keypair: None,
            external_network_id: None,
            fixed_network: None,
            fixed_subnet: None,
            dns_nameservers: vec![],
            master_lb_enabled: true,
            api_proxy: false,
            workers: vec![WorkerGroup {
                name: "default-worker".into(),
                key: "default-worker".into(),
                flavor: "m1.small".into(),
                image: "img-1".into(),
                version: "v1.30.4".into(),
                count: 2,
                autoscale: None,
                set_replicas: true,
                rollout: crate::capi::render::Rollout::default(),
                held_template: None,
                adopted_labels: None,
                docker_volume_gb: None,
                node_labels: Default::default(),
                node_taints: vec![],
            }],
            adopted: None,
        }
    }

    #[test]
    fn a_topology_that_says_what_its_rows_say_is_adopted_writing_nothing_capi_acts_on() {
        let p = plan(
            &subject(),
            "magnum-system",
            CapiLine::V1beta1,
            &live(),
            Ok(&rows()),
        );
        assert!(p.adoptable(), "{:?}", p.blockers);
        assert_eq!(
            p.own,
            vec![ObjRef {
                kind: "Cluster".into(),
                name: STACK.into()
            }]
        );
        assert!(p.create.is_empty() && p.rolls.is_empty());
        assert!(
            p.render()
                .contains("adoptable: no machine would be replaced")
        );
        let m = marks(&subject(), "p1", &live(), "t-old", "t-twin");
        let kinds: Vec<&str> = m.iter().map(|m| m.kind.as_str()).collect();
        assert_eq!(kinds, ["Secret", "Secret", "ClusterResourceSet", "Cluster"]);
        let c = m.last().unwrap();
        assert_eq!(c.labels[CLUSTER_NAME_LABEL], STACK);
        assert_eq!(c.annotations[ADOPTED_ANNOTATION], "k8s_cluster_api");
        assert!(m[0].annotations.is_empty());
    }

    #[test]
    fn disagreements_with_the_rows_are_blockers() {
        let mut r = rows();
        r.master_version = "v1.31.1".into();
        r.workers[0].count = 3;
        r.workers.push(WorkerGroup {
            name: "a-very-long-nodegroup-name".into(),
            key: "a-very-long-nodegr-12345678".into(),
            ..r.workers[0].clone()
        });
        let p = plan(
            &subject(),
            "magnum-system",
            CapiLine::V1beta2,
            &live(),
            Ok(&r),
        );
        let all = p.blockers.join("\n");
        assert!(
            all.contains("runs Kubernetes v1.30.4 and its rows say v1.31.1"),
            "{all}"
        );
        assert!(
            all.contains("has 2 machine(s) and its nodegroup says 3"),
            "{all}"
        );
        assert!(all.contains("not a DNS label"), "{all}");
        assert!(all.contains("CAPI v1beta2"), "{all}");
        assert!(!p.adoptable());
        let p = plan(
            &subject(),
            "magnum-p1",
            CapiLine::V1beta1,
            &live(),
            Err("no image"),
        );
        let all = p.blockers.join("\n");
        assert!(
            all.contains("namespace magnum-p1") && all.contains("no image"),
            "{all}"
        );
        let mut s = subject();
        s.status = "UPDATE_IN_PROGRESS";
        assert!(
            plan(&s, "magnum-system", CapiLine::V1beta1, &live(), Ok(&rows())).blockers[0]
                .contains("busy")
        );
    }
}

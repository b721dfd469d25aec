//! The cluster autoscaler of a cluster with `auto_scaling_enabled` (pure).
//!
//! As both existing CAPI drivers do, one cluster-autoscaler per cluster runs
//! in the management cluster, in the cluster's namespace: it reads the
//! workload cluster through the kubeconfig Secret CAPI writes
//! (`<stack_id>-kubeconfig`, key `value`) and scales the MachineDeployments
//! that carry the `cluster-api-autoscaler-node-group-min/max-size`
//! annotations through their `scale` subresource (the clusterapi provider,
//! auto-discovery limited to this cluster). Its RBAC is a namespaced Role:
//! it can touch nothing outside the project's namespace.
//!
//! The image follows the control plane's minor version (the autoscaler is
//! released per Kubernetes minor); `[capi] autoscaler_image` and the
//! `container_infra_prefix` label move it to a mirror.

use serde_json::{Value, json};

use super::labels::KubeVersion;
use super::naming::object_name;
use super::render::{CLUSTER_NAME_LABEL, ClusterInput, PROJECT_LABEL, UUID_LABEL};

/// The upstream image repository.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/autoscaling/cluster-autoscaler";

/// The autoscaler release for a Kubernetes minor: known patch releases, else
/// the minor's first release (published for every minor).
pub fn tag_for(version: &str) -> String {
    let minor = KubeVersion::parse(version).map(|v| v.minor).unwrap_or(30);
    let patch = match minor {
        31 => 3,
        32 => 5,
        33 => 3,
        34 => 2,
        _ => 0,
    };
    format!("v1.{minor}.{patch}")
}

/// The image for this cluster: `repository` (`[capi] autoscaler_image`),
/// with the registry replaced by `container_infra_prefix` when set.
pub fn image(c: &ClusterInput, repository: &str) -> String {
    let repo = match &c.labels.container_infra_prefix {
        Some(p) => format!("{}/cluster-autoscaler", p.trim_end_matches('/')),
        None => repository.to_string(),
    };
    format!("{repo}:{}", tag_for(&c.master_version))
}

/// The autoscaler's objects, or none when autoscaling is off.
pub fn render(c: &ClusterInput, repository: &str) -> Vec<Value> {
    if !c.labels.auto_scaling {
        return Vec::new();
    }
    let name = object_name(&c.stack_id, "autoscaler");
    let labels = json!({UUID_LABEL: c.cluster_uuid, PROJECT_LABEL: c.project_id,
                        CLUSTER_NAME_LABEL: c.stack_id, "app.kubernetes.io/name": "cluster-autoscaler"});
    let meta = json!({"name": name, "namespace": c.namespace, "labels": labels});
    let rules = json!([
        {"apiGroups": ["cluster.x-k8s.io"],
         "resources": ["machinedeployments", "machinedeployments/scale", "machinesets", "machines", "machinepools", "machinepools/scale"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": ["infrastructure.cluster.x-k8s.io"],
         "resources": ["openstackmachinetemplates"],
         "verbs": ["get", "list", "watch"]},
    ]);
    let args = json!([
        "--cloud-provider=clusterapi",
        "--kubeconfig=/etc/kubernetes/workload/value",
        "--clusterapi-cloud-config-authoritative",
        format!(
            "--node-group-auto-discovery=clusterapi:namespace={},clusterName={}",
            c.namespace, c.stack_id
        ),
        "--enforce-node-group-min-size=true",
        "--expander=least-waste,random",
        "--v=2",
    ]);
    let pod_labels =
        json!({"app.kubernetes.io/name": "cluster-autoscaler", "app.kubernetes.io/instance": name});
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": c.namespace}]}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
               "spec": {"replicas": 1, "selector": {"matchLabels": pod_labels},
                        "template": {"metadata": {"labels": pod_labels},
                                     "spec": {"serviceAccountName": name,
                                              "containers": [{"name": "cluster-autoscaler", "image": image(c, repository),
                                                              "args": args,
                                                              "volumeMounts": [{"name": "workload-kubeconfig", "mountPath": "/etc/kubernetes/workload", "readOnly": true}]}],
                                              "volumes": [{"name": "workload-kubeconfig",
                                                           "secret": {"secretName": object_name(&c.stack_id, "kubeconfig")}}]}}}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_minor() {
        assert_eq!(tag_for("v1.32.1"), "v1.32.5");
        assert_eq!(tag_for("v1.29.9"), "v1.29.0");
        assert_eq!(tag_for("garbage"), "v1.30.0");
    }
}

//! `keystone_auth_enabled` (pure): Kubernetes authentication and
//! authorization by Keystone through cloud-provider-openstack's
//! k8s-keystone-auth webhook, as Magnum's Heat driver and vexxhost
//! magnum-cluster-api give it.
//!
//! Two halves:
//! - **on the control-plane hosts** (the KubeadmControlPlane, see
//!   [`api_server`]): the webhook's kubeconfig at [`WEBHOOK_CONFIG`], the
//!   kube-apiserver flags `authentication-token-webhook-config-file`,
//!   `authorization-webhook-config-file` and `authorization-mode`
//!   `Node,RBAC,Webhook` (RBAC first: what RBAC allows never reaches the
//!   webhook), and the file's directory mounted into the static pod;
//! - **in the workload cluster** (a ClusterResourceSet and the ConfigMap it
//!   applies, `super::addons::keystone_auth_set`, of
//!   [`workload_manifests`]): the webhook as a DaemonSet on the control
//!   plane nodes, on the host network at `127.0.0.1:8443` with the API
//!   server's own serving certificate (`/etc/kubernetes/pki`), its policy
//!   and role-mapping ConfigMaps, its RBAC to read them.
//!
//! The policy is vexxhost's default (`magnum_cluster_api/utils.py`
//! `get_keystone_auth_default_policy`): Keystone `member`s of the cluster's
//! project may list pods, services, deployments and PVCs in `default`.
//! The ClusterResourceSet applies once (`ApplyOnce`): a policy edited in
//! the workload cluster (`kube-system/k8s-keystone-auth-policy`, which the
//! webhook watches) is the cluster owner's and is never put back.
//!
//! The webhook's kubeconfig skips TLS verification as vexxhost's
//! (`data/keystone-auth/webhook.yaml`): kubeadm's API server certificate
//! does not name 127.0.0.1, and the traffic never leaves the host.
//!
//! The arguments are k8s-keystone-auth's (cloud-provider-openstack
//! `pkg/identity/keystone/config.go`, `AddFlags`: `--keystone-url`,
//! `--keystone-ca-file`, `--policy-configmap-name`,
//! `--sync-configmap-name`, `--listen`, `--tls-cert-file`,
//! `--tls-private-key-file`).

use serde_json::{Value, json};

/// The webhook's kubeconfig on each control-plane host.
pub const WEBHOOK_DIR: &str = "/etc/kubernetes/webhooks";
pub const WEBHOOK_CONFIG: &str = "/etc/kubernetes/webhooks/webhookconfig.yaml";
/// Where the webhook listens (host network, loopback only).
pub const LISTEN: &str = "127.0.0.1:8443";
/// The image's registry path (`container_infra_prefix` replaces the host).
pub const IMAGE: &str = "provider-os/k8s-keystone-auth";

const NAME: &str = "k8s-keystone-auth";
const NAMESPACE: &str = "kube-system";

/// The webhook kubeconfig kube-apiserver reads for both authentication
/// (TokenReview) and authorization (SubjectAccessReview).
pub fn webhook_kubeconfig() -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: webhook\n  cluster:\n    server: https://{LISTEN}/webhook\n    insecure-skip-tls-verify: true\nusers:\n- name: webhook\ncontexts:\n- name: webhook\n  context:\n    cluster: webhook\n    user: webhook\ncurrent-context: webhook\n"
    )
}

/// The kube-apiserver flags (name, value).
pub fn api_server_args() -> Vec<(&'static str, String)> {
    vec![
        (
            "authentication-token-webhook-config-file",
            WEBHOOK_CONFIG.into(),
        ),
        ("authorization-webhook-config-file", WEBHOOK_CONFIG.into()),
        ("authorization-mode", "Node,RBAC,Webhook".into()),
    ]
}

/// The KubeadmControlPlane's file for the webhook and the static pod's
/// volume for its directory.
pub fn api_server() -> (Value, Value) {
    (
        json!({"path": WEBHOOK_CONFIG, "owner": "root:root", "permissions": "0600",
               "content": webhook_kubeconfig()}),
        json!({"name": "keystone-webhook", "hostPath": WEBHOOK_DIR, "mountPath": WEBHOOK_DIR,
               "readOnly": true, "pathType": "DirectoryOrCreate"}),
    )
}

/// vexxhost's default policy for `project_id`.
pub fn default_policy(project_id: &str) -> Value {
    json!([{
        "resource": {"verbs": ["list"], "resources": ["pods", "services", "deployments", "pvc"],
                     "version": "*", "namespace": "default"},
        "match": [{"type": "role", "values": ["member"]}, {"type": "project", "values": [project_id]}],
    }])
}

/// The Keystone v3 endpoint k8s-keystone-auth validates tokens against.
pub fn keystone_url(auth_url: &str) -> String {
    let u = auth_url.trim_end_matches('/');
    if u.ends_with("/v3") {
        u.to_string()
    } else {
        format!("{u}/v3")
    }
}

/// The objects k8s-keystone-auth runs as in the workload cluster.
pub fn workload_manifests(
    project_id: &str,
    auth_url: &str,
    ca: Option<&str>,
    image: &str,
) -> Vec<Value> {
    let labels = json!({"app.kubernetes.io/name": NAME});
    let meta = |name: &str| json!({"name": name, "namespace": NAMESPACE, "labels": labels});
    let policy_name = format!("{NAME}-policy");
    let sync_name = format!("{NAME}-sync");
    let ca_name = format!("{NAME}-ca");
    let mut args = vec![
        "./bin/k8s-keystone-auth".to_string(),
        "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt".into(),
        "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key".into(),
        format!("--policy-configmap-name={policy_name}"),
        format!("--sync-configmap-name={sync_name}"),
        format!("--keystone-url={}", keystone_url(auth_url)),
        format!("--listen={LISTEN}"),
    ];
    let mut mounts =
        vec![json!({"name": "k8s-certs", "mountPath": "/etc/kubernetes/pki", "readOnly": true})];
    let mut volumes = vec![
        json!({"name": "k8s-certs", "hostPath": {"path": "/etc/kubernetes/pki", "type": "Directory"}}),
    ];
    let mut out = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME)}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": format!("system:{NAME}"), "labels": labels},
               "rules": [{"apiGroups": [""], "resources": ["configmaps", "services", "pods"],
                          "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": format!("system:{NAME}"), "labels": labels},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("system:{NAME}")},
               "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(&policy_name),
               "data": {"policies": default_policy(project_id).to_string()}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(&sync_name),
               "data": {"syncConfig": "role-mappings:\n- keystone-role: member\n  groups: []\n"}}),
    ];
    if let Some(ca) = ca {
        out.push(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(&ca_name),
                        "data": {"ca.crt": ca}}),
        );
        args.push("--keystone-ca-file=/etc/kubernetes/keystone-ca/ca.crt".into());
        mounts.push(
            json!({"name": "keystone-ca", "mountPath": "/etc/kubernetes/keystone-ca", "readOnly": true}),
        );
        volumes.push(json!({"name": "keystone-ca", "configMap": {"name": ca_name}}));
    }
    out.push(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(NAME),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "hostNetwork": true,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                    "tolerations": [
                        {"effect": "NoSchedule", "operator": "Exists"},
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"effect": "NoExecute", "operator": "Exists"},
                    ],
                    "containers": [{
                        "name": NAME, "image": image, "args": args,
                        "volumeMounts": mounts,
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    }],
                    "volumes": volumes,
                },
            },
        },
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keystone_url_always_names_v3() {
        assert_eq!(
            keystone_url("https://keystone.example.com:5000"),
            "https://keystone.example.com:5000/v3"
        );
        assert_eq!(
            keystone_url("https://keystone.example.com:5000/v3/"),
            "https://keystone.example.com:5000/v3"
        );
        assert_eq!(
            keystone_url("https://cloud.example.com/identity/v3"),
            "https://cloud.example.com/identity/v3"
        );
    }

    #[test]
    fn the_webhook_runs_beside_each_api_server_with_its_policy() {
        let m = workload_manifests(
            "p-1",
            "https://ks:5000",
            Some("-----BEGIN CERTIFICATE-----\n"),
            "r/provider-os/k8s-keystone-auth:v1",
        );
        let kinds: Vec<&str> = m.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "ConfigMap",
                "ConfigMap",
                "ConfigMap",
                "DaemonSet"
            ]
        );
        let policy: Value =
            serde_json::from_str(m[3]["data"]["policies"].as_str().unwrap()).unwrap();
        assert_eq!(policy[0]["match"][1]["values"], json!(["p-1"]));
        assert_eq!(policy[0]["match"][0]["values"], json!(["member"]));
        let pod = &m[6]["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], json!(true));
        let args: Vec<&str> = pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            args.contains(&"--keystone-url=https://ks:5000/v3"),
            "{args:?}"
        );
        assert!(args.contains(&"--listen=127.0.0.1:8443"), "{args:?}");
        assert!(
            args.contains(&"--keystone-ca-file=/etc/kubernetes/keystone-ca/ca.crt"),
            "{args:?}"
        );
        // Without a private CA: no CA ConfigMap, no flag.
        let m = workload_manifests("p-1", "https://ks:5000/v3", None, "i");
        assert_eq!(m.len(), 6);
        assert!(!m.iter().any(|o| o.to_string().contains("keystone-ca")));
    }

    #[test]
    fn the_api_server_dials_the_webhook_it_mounts() {
        let (file, volume) = api_server();
        assert_eq!(file["path"], json!(WEBHOOK_CONFIG));
        assert!(
            file["content"]
                .as_str()
                .unwrap()
                .contains("https://127.0.0.1:8443/webhook")
        );
        assert!(WEBHOOK_CONFIG.starts_with(volume["mountPath"].as_str().unwrap()));
        let args = api_server_args();
        assert!(
            args.iter()
                .any(|(k, v)| *k == "authorization-mode" && v == "Node,RBAC,Webhook")
        );
        assert_eq!(args.iter().filter(|(_, v)| v == WEBHOOK_CONFIG).count(), 2);
    }
}

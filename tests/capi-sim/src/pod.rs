//! What a pod would read (pure): a workload's container as the kubelet
//! starts it, for the simulated controllers that run in workload clusters
//! ([`crate::cloud`]'s OCCM and Cinder CSI). They read only this: the
//! container's arguments with `$(VAR)` expanded from its env (kubelet,
//! `pkg/kubelet/kuberuntime/kuberuntime_container.go` ->
//! `third_party/forked/golang/expansion`: an unknown `$(VAR)` stays as
//! written, `$$` is a literal `$`), and the files its volume mounts put at a
//! path: a Secret volume's keys (or its `items`' paths), a `subPath` of one
//! (`pkg/volume/secret/secret.go`, `MakePayload`). Nothing the conductor
//! wrote elsewhere (values, HelmChartProxies) is looked at.

use std::collections::BTreeMap;

use serde_json::Value;

/// Where a file of a container's filesystem comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileSource {
    /// Key `key` of the Secret `name` (in the pod's namespace).
    Secret { name: String, key: String },
    /// A volume capi-sim cannot read into (host path, ConfigMap, ...):
    /// its kind.
    Unreadable(String),
}

/// One container of a workload's pod template.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Container {
    /// The workload (`<Kind>/<namespace>/<name>`), for messages.
    pub owner: String,
    pub namespace: String,
    pub name: String,
    pub image: String,
    /// As the process gets them: `$(VAR)` expanded.
    pub args: Vec<String>,
    /// Literal `value`s only (no `valueFrom`).
    pub env: BTreeMap<String, String>,
    /// (mount path, volume as JSON, subPath).
    mounts: Vec<(String, Value, Option<String>)>,
}

/// `$(VAR)` expanded as the kubelet does (see the module).
pub fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let var = &inner[..end];
            match env.get(var) {
                Some(v) => out.push_str(v),
                None => out.push_str(&rest[i..i + 3 + end]),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

impl Container {
    /// The value of `--flag=v` or `--flag v` (the last one given, as Go's
    /// flag package keeps).
    pub fn flag(&self, flag: &str) -> Option<String> {
        let mut found = None;
        let mut it = self.args.iter();
        while let Some(a) = it.next() {
            if let Some(v) = a.strip_prefix(flag) {
                if let Some(v) = v.strip_prefix('=') {
                    found = Some(v.to_string());
                } else if v.is_empty() {
                    found = it.next().cloned();
                }
            }
        }
        found
    }

    /// Whether a boolean flag is on (`--flag` or `--flag=true`).
    pub fn switch(&self, flag: &str) -> bool {
        self.args
            .iter()
            .any(|a| a == flag || *a == format!("{flag}=true"))
    }

    /// The Secrets its mounts project, by name, each once.
    pub fn secret_volumes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, v, _) in &self.mounts {
            if let Some(n) = v.pointer("/secret/secretName").and_then(Value::as_str)
                && !out.iter().any(|x| x == n)
            {
                out.push(n.to_string());
            }
        }
        out
    }

    /// Where the file at `path` comes from: the mount with the longest
    /// path that holds it; an error when no mount does (the image's own
    /// files are not ones a chart's values could name).
    pub fn file(&self, path: &str) -> Result<FileSource, String> {
        let mut best: Option<&(String, Value, Option<String>)> = None;
        for m in &self.mounts {
            let holds = match &m.2 {
                Some(_) => path == m.0,
                None => path
                    .strip_prefix(m.0.trim_end_matches('/'))
                    .is_some_and(|r| r.starts_with('/') && r.len() > 1),
            };
            if holds && best.is_none_or(|b| m.0.len() > b.0.len()) {
                best = Some(m);
            }
        }
        let Some((mount, volume, sub)) = best else {
            return Err(format!(
                "{path} is on no volume of container {} ({})",
                self.name, self.owner
            ));
        };
        let rel = match sub {
            Some(s) => s.clone(),
            None => path[mount.trim_end_matches('/').len() + 1..].to_string(),
        };
        let Some(secret) = volume.get("secret") else {
            let kind = volume
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_else(|| "unknown".into());
            return Ok(FileSource::Unreadable(kind));
        };
        let name = secret["secretName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = match secret.get("items").and_then(Value::as_array) {
            Some(items) => items
                .iter()
                .find(|i| i["path"].as_str() == Some(rel.as_str()))
                .and_then(|i| i["key"].as_str())
                .map(str::to_string)
                .ok_or_else(|| {
                    format!("{path}: the Secret volume of {name} projects no item at {rel}")
                })?,
            None => rel,
        };
        Ok(FileSource::Secret { name, key })
    }
}

/// The pod template of a workload object (Deployment, DaemonSet,
/// StatefulSet, Job: `spec.template.spec`; a Pod: `spec`).
fn pod_spec(o: &Value) -> Option<&Value> {
    match o["kind"].as_str()? {
        "Pod" => o.get("spec"),
        _ => o.pointer("/spec/template/spec"),
    }
}

/// The containers of `objects` (workloads as the apiserver holds them)
/// whose image's repository ends with `image` (`.../openstack-cloud-
/// controller-manager:v1.31.1` for `openstack-cloud-controller-manager`),
/// of the kinds given, in the order given.
pub fn containers_running(objects: &[Value], image: &str, kinds: &[&str]) -> Vec<Container> {
    let mut out = Vec::new();
    for kind in kinds {
        for o in objects.iter().filter(|o| o["kind"] == *kind) {
            let Some(spec) = pod_spec(o) else { continue };
            let volumes: BTreeMap<&str, &Value> = spec["volumes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| Some((v["name"].as_str()?, v)))
                        .collect()
                })
                .unwrap_or_default();
            for c in spec["containers"].as_array().into_iter().flatten() {
                let img = c["image"].as_str().unwrap_or_default();
                let repo = img.split('@').next().unwrap_or(img);
                let repo = match repo.rsplit_once(':') {
                    Some((r, tag)) if !tag.contains('/') => r,
                    _ => repo,
                };
                if !(repo == image || repo.ends_with(&format!("/{image}"))) {
                    continue;
                }
                let env: BTreeMap<String, String> = c["env"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
                    .collect();
                let ns = o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                let owner = format!(
                    "{kind}/{ns}/{}",
                    o.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                );
                let args = c["args"].as_array().into_iter().flatten();
                out.push(Container {
                    owner,
                    namespace: ns.to_string(),
                    name: c["name"].as_str().unwrap_or_default().to_string(),
                    image: img.to_string(),
                    args: args
                        .filter_map(Value::as_str)
                        .map(|a| expand(a, &env))
                        .collect(),
                    mounts: c["volumeMounts"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|m| {
                            let v = volumes.get(m["name"].as_str()?)?;
                            Some((
                                m["mountPath"].as_str()?.to_string(),
                                (*v).clone(),
                                m["subPath"].as_str().map(str::to_string),
                            ))
                        })
                        .collect(),
                    env,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn variables_expand_as_the_kubelet_expands_them() {
        let e = env(&[("CLOUD_CONFIG", "/etc/config/cloud.conf"), ("N", "x")]);
        assert_eq!(
            expand("--cloud-config=$(CLOUD_CONFIG)", &e),
            "--cloud-config=/etc/config/cloud.conf"
        );
        assert_eq!(expand("$(MISSING)-$(N)", &e), "$(MISSING)-x");
        assert_eq!(expand("$$(N) $ $(N", &e), "$(N) $ $(N");
    }

    fn daemonset(volume: Value, mount: Value) -> Value {
        json!({"kind": "DaemonSet", "metadata": {"name": "occm", "namespace": "kube-system"},
               "spec": {"template": {"spec": {
                   "volumes": [volume],
                   "containers": [
                       {"name": "other", "image": "registry.k8s.io/pause:3.9"},
                       {"name": "occm", "image": "mirror.example:5000/provider-os/openstack-cloud-controller-manager:v1.31.1",
                        "args": ["--cloud-config=$(CLOUD_CONFIG)", "--cluster-name", "$(CLUSTER_NAME)", "--use-x"],
                        "env": [{"name": "CLOUD_CONFIG", "value": "/etc/config/cloud.conf"},
                                {"name": "CLUSTER_NAME", "value": "uuid-1"},
                                {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "volumeMounts": [mount, {"name": "host", "mountPath": "/etc/config/host"}]}]}}}})
    }

    #[test]
    fn a_container_is_found_by_its_image_and_reads_its_flags_from_its_env() {
        let o = daemonset(
            json!({"name": "cfg", "secret": {"secretName": "s"}}),
            json!({"name": "cfg", "mountPath": "/etc/config"}),
        );
        let found = containers_running(
            &[o],
            "openstack-cloud-controller-manager",
            &["Deployment", "DaemonSet"],
        );
        assert_eq!(found.len(), 1);
        let c = &found[0];
        assert_eq!(c.owner, "DaemonSet/kube-system/occm");
        assert_eq!(
            c.flag("--cloud-config").as_deref(),
            Some("/etc/config/cloud.conf")
        );
        assert_eq!(c.flag("--cluster-name").as_deref(), Some("uuid-1"));
        assert!(c.switch("--use-x") && !c.switch("--use"));
        assert!(!c.env.contains_key("FROM"));
        assert_eq!(
            c.file("/etc/config/cloud.conf"),
            Ok(FileSource::Secret {
                name: "s".into(),
                key: "cloud.conf".into()
            })
        );
        assert!(c.file("/etc/other/cloud.conf").is_err());
        assert!(c.file("/etc/config").is_err(), "a folder is no file");
        assert!(
            containers_running(
                &[daemonset(json!({}), json!({}))],
                "cloud-controller-manager",
                &["DaemonSet"]
            )
            .is_empty(),
            "a repository's last segment must match whole"
        );
    }

    #[test]
    fn items_and_sub_paths_place_a_secrets_keys() {
        let o = daemonset(
            json!({"name": "cfg", "secret": {"secretName": "s", "items": [{"key": "conf", "path": "cloud.conf"}]}}),
            json!({"name": "cfg", "mountPath": "/etc/config"}),
        );
        let c = &containers_running(&[o], "openstack-cloud-controller-manager", &["DaemonSet"])[0];
        assert_eq!(
            c.file("/etc/config/cloud.conf"),
            Ok(FileSource::Secret {
                name: "s".into(),
                key: "conf".into()
            })
        );
        assert!(
            c.file("/etc/config/ca.crt").is_err(),
            "only the items are projected"
        );
        let o = daemonset(
            json!({"name": "cfg", "secret": {"secretName": "s"}}),
            json!({"name": "cfg", "mountPath": "/etc/kubernetes/cloud.conf", "subPath": "conf"}),
        );
        let c = &containers_running(&[o], "openstack-cloud-controller-manager", &["DaemonSet"])[0];
        assert_eq!(
            c.file("/etc/kubernetes/cloud.conf"),
            Ok(FileSource::Secret {
                name: "s".into(),
                key: "conf".into()
            })
        );
        // The longest mount wins; a host path is not readable here.
        let o = daemonset(
            json!({"name": "cfg", "secret": {"secretName": "s"}}),
            json!({"name": "cfg", "mountPath": "/etc/config"}),
        );
        let mut spec = o.clone();
        if let Some(a) = spec["spec"]["template"]["spec"]["volumes"].as_array_mut() {
            a.push(json!({"name": "host", "hostPath": {"path": "/etc/x"}}));
        }
        let c = &containers_running(
            &[spec],
            "openstack-cloud-controller-manager",
            &["DaemonSet"],
        )[0];
        assert_eq!(
            c.file("/etc/config/host/ca.crt"),
            Ok(FileSource::Unreadable("hostPath".into()))
        );
    }
}

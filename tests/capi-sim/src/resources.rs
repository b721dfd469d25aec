//! Which resources the simulated apiserver serves: a few built-in kinds and
//! every CRD of the selected release line, read from the real CRD YAMLs.

use std::path::Path;

use serde_json::Value;

/// One served resource (group + plural), with every version it is served at.
#[derive(Debug, Clone)]
pub struct Resource {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    /// Served versions; the first is the storage version.
    pub versions: Vec<String>,
    pub storage_version: String,
    pub status_subresource: bool,
    /// Custom resources get `metadata.generation`; these built-ins do not.
    pub is_crd: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// openAPIV3Schema per served version (CRDs only).
    pub schemas: Vec<(String, Value)>,
    /// The `scale` subresource: JSON pointers of spec replicas, status
    /// replicas and the label selector (from the CRD's JSONPaths).
    pub scale: Option<ScalePaths>,
}

/// Where a scalable kind keeps what its `scale` subresource shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub selector: Option<String>,
}

/// `.spec.replicas` -> `/spec/replicas`.
fn pointer(json_path: &str) -> String {
    json_path
        .trim_start_matches('.')
        .split('.')
        .fold(String::new(), |mut acc, p| {
            acc.push('/');
            acc.push_str(p);
            acc
        })
}

impl Resource {
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }
    pub fn schema(&self, version: &str) -> Option<&Value> {
        self.schemas
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, s)| s)
    }
}

fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Resource {
    Resource {
        group: group.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        namespaced,
        versions: vec![version.into()],
        storage_version: version.into(),
        status_subresource: kind == "Namespace",
        is_crd: false,
        short_names: match plural {
            "namespaces" => vec!["ns".into()],
            "configmaps" => vec!["cm".into()],
            "events" => vec!["ev".into()],
            _ => vec![],
        },
        categories: vec![],
        schemas: vec![],
        scale: None,
    }
}

/// The built-in kinds the conductor touches.
pub fn builtins() -> Vec<Resource> {
    vec![
        builtin("", "v1", "Namespace", "namespaces", false),
        builtin("", "v1", "Secret", "secrets", true),
        builtin("", "v1", "ConfigMap", "configmaps", true),
        builtin("", "v1", "Event", "events", true),
        builtin("coordination.k8s.io", "v1", "Lease", "leases", true),
        builtin("", "v1", "ServiceAccount", "serviceaccounts", true),
        builtin("apps", "v1", "Deployment", "deployments", true),
        builtin("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
        ),
    ]
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {reason}")]
    Bad { path: String, reason: String },
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// A CRD document into a [`Resource`] (served versions only).
pub fn from_crd(doc: &Value) -> Result<Resource, String> {
    let spec = doc.get("spec").ok_or("no spec")?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let names = spec.get("names").ok_or("no spec.names")?;
    let group = s(spec, "group").ok_or("no spec.group")?;
    let kind = s(names, "kind").ok_or("no names.kind")?;
    let plural = s(names, "plural").ok_or("no names.plural")?;
    let list = |k: &str| -> Vec<String> {
        names
            .get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut versions = Vec::new();
    let mut storage = None;
    let mut status = false;
    let mut scale = None;
    let mut schemas = Vec::new();
    for v in spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("no versions")?
    {
        let name = s(v, "name").ok_or("version without name")?;
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage = Some(name.clone());
            status = v.pointer("/subresources/status").is_some();
            scale = v.pointer("/subresources/scale").and_then(|sc| {
                Some(ScalePaths {
                    spec_replicas: pointer(sc.get("specReplicasPath")?.as_str()?),
                    status_replicas: pointer(sc.get("statusReplicasPath")?.as_str()?),
                    selector: sc
                        .get("labelSelectorPath")
                        .and_then(Value::as_str)
                        .map(pointer),
                })
            });
        }
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            schemas.push((name.clone(), schema.clone()));
        }
        versions.push(name);
    }
    let storage_version = storage.ok_or("no storage version")?;
    versions.sort_by_key(|v| *v != storage_version);
    Ok(Resource {
        group,
        singular: s(names, "singular").unwrap_or_else(|| kind.to_lowercase()),
        list_kind: s(names, "listKind").unwrap_or_else(|| format!("{kind}List")),
        kind,
        plural,
        namespaced: s(spec, "scope").as_deref() != Some("Cluster"),
        versions,
        storage_version,
        status_subresource: status,
        is_crd: true,
        short_names: list("shortNames"),
        categories: list("categories"),
        schemas,
        scale,
    })
}

/// Every `*.yaml` CRD under each directory.
pub fn load_crd_dirs(dirs: &[&Path]) -> Result<Vec<Resource>, LoadError> {
    let mut out = Vec::new();
    for dir in dirs {
        let io = |e| LoadError::Io {
            path: dir.display().to_string(),
            source: e,
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| LoadError::Io {
                path: f.display().to_string(),
                source: e,
            })?;
            let bad = |reason: String| LoadError::Bad {
                path: f.display().to_string(),
                reason,
            };
            let doc: Value = serde_norway::from_str(&text).map_err(|e| bad(e.to_string()))?;
            if doc.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            out.push(from_crd(&doc).map_err(|r| bad(r.to_string()))?);
        }
    }
    Ok(out)
}

/// The CRD folders of a release line under `crds_root` (`../shared/crds`).
pub fn line_dirs(crds_root: &Path, line: Line) -> Vec<std::path::PathBuf> {
    let names: &[&str] = match line {
        Line::V1beta1 => &[
            "cluster-api-v1.10.10",
            "cluster-api-provider-openstack-v0.12.7",
            "cluster-api-addon-provider-helm-v0.4.2",
        ],
        Line::V1beta2 => &[
            "cluster-api-v1.14.0",
            "cluster-api-provider-openstack-v0.14.7",
            "cluster-api-addon-provider-helm-v0.6.4",
        ],
    };
    names.iter().map(|n| crds_root.join(n)).collect()
}

/// The two CAPI release lines (CAPI 1.10 stores v1beta1, 1.14 v1beta2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Line {
    V1beta1,
    V1beta2,
}

//! Clusters run by a ClusterClass topology (pure): vexxhost
//! magnum-cluster-api's, once `adopt` handed one over.
//!
//! CAPI never lets `spec.topology` go from an existing Cluster
//! (cluster-api `internal/webhooks/cluster.go`: "cannot be removed from an
//! existing Cluster"), so such a cluster stays topology-managed: this
//! conductor changes the topology and CAPI's topology controller changes
//! the control plane and MachineDeployments it made from the class. What
//! an operation changes is what vexxhost's driver changes
//! (`magnum_cluster_api/resources.py` `mutate_machine_deployment` and
//! `Cluster.get_object`, `driver.py` `upgrade_cluster`, 0.38.x):
//!
//! - a resize: `controlPlane.replicas`, a group entry's `replicas` (or,
//!   with the autoscaler, its min/max annotations), nothing else (so
//!   nothing rolls);
//! - a new nodegroup: an entry of class `default-worker` named as the
//!   nodegroup, with the role and nodegroup node labels and the `flavor`
//!   and `imageUUID` overrides; a deleted one: its entry removed;
//! - an upgrade: `version`, and the `imageUUID` variable and every
//!   entry's `imageUUID` override, in the same write.
//!
//! The topology's lists are list-maps keyed by name (the Cluster CRD's
//! `x-kubernetes-list-map-keys`), written here by a JSON patch whose
//! every change to an entry is guarded by a `test` of that entry's name,
//! so a patch computed from a stale read fails (422) instead of changing
//! the wrong entry.

use serde_json::{Value, json};

/// On what CAPI's topology controller makes.
pub const OWNED_LABEL: &str = "topology.cluster.x-k8s.io/owned";
/// On a topology MachineDeployment and its Machines: the entry's name.
pub const MD_NAME_LABEL: &str = "topology.cluster.x-k8s.io/deployment-name";
/// The only namespace vexxhost magnum-cluster-api uses (hard-coded there).
pub const VEXXHOST_NAMESPACE: &str = "magnum-system";
/// The worker class of vexxhost's ClusterClass.
pub const WORKER_CLASS: &str = "default-worker";
const IMAGE_VARIABLE: &str = "imageUUID";
const FLAVOR_VARIABLE: &str = "flavor";

/// Whether `s` has the shape of a Glance image id (vexxhost's
/// `imageUUID` variable takes an id; Magnum templates may name an image).
pub fn uuid_like(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Whether this CAPI Cluster is run by a topology.
pub fn is_topology(cluster: &Value) -> bool {
    cluster
        .pointer("/spec/topology")
        .is_some_and(Value::is_object)
}

/// One worker group as the rows want it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The nodegroup name (= the topology entry's name).
    pub name: String,
    pub role: String,
    pub flavor: String,
    pub image: String,
    /// None: the autoscaler owns the count.
    pub replicas: Option<i64>,
    pub autoscale: Option<(u32, u32)>,
}

/// What the rows want of the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub version: String,
    pub image: String,
    pub control_plane_replicas: i64,
    pub groups: Vec<Group>,
    /// Nodegroups being deleted: their entries go.
    pub deleting: Vec<String>,
}

const AUTOSCALER_MIN: &str = super::render::AUTOSCALER_MIN;
const AUTOSCALER_MAX: &str = super::render::AUTOSCALER_MAX;

/// The same Kubernetes version, with or without the `v`.
pub fn same_version(a: &str, b: &str) -> bool {
    a.trim_start_matches('v') == b.trim_start_matches('v')
}

/// `want`'s version written as the topology writes its own (`v1.30.4`).
fn as_topology_version(current: &str, want: &str) -> String {
    let bare = want.trim_start_matches('v');
    if current.starts_with('v') || current.is_empty() {
        format!("v{bare}")
    } else {
        bare.to_string()
    }
}

fn entry_index(entries: &[Value], name: &str) -> Option<usize> {
    entries
        .iter()
        .position(|e| e["name"].as_str() == Some(name))
}

/// The JSON patch (RFC 6902) that brings the topology of `cluster` to
/// `want`; empty when it already says that. `Err` when it cannot be
/// written (no topology).
pub fn patch(cluster: &Value, want: &Want) -> Result<Vec<Value>, String> {
    let topo = cluster
        .pointer("/spec/topology")
        .filter(|t| t.is_object())
        .ok_or("the CAPI Cluster has no spec.topology")?;
    let mut ops = Vec::new();
    let base = "/spec/topology";
    let version = topo["version"].as_str().unwrap_or("");
    let upgrading = !same_version(version, &want.version);
    if upgrading {
        ops.push(json!({"op": "test", "path": format!("{base}/version"), "value": version}));
        ops.push(json!({"op": "replace", "path": format!("{base}/version"),
                        "value": as_topology_version(version, &want.version)}));
        let variables = topo["variables"].as_array().cloned().unwrap_or_default();
        if let Some(i) = entry_index(&variables, IMAGE_VARIABLE)
            && variables[i]["value"].as_str() != Some(want.image.as_str())
        {
            let p = format!("{base}/variables/{i}");
            ops.push(json!({"op": "test", "path": format!("{p}/name"), "value": IMAGE_VARIABLE}));
            ops.push(json!({"op": "replace", "path": format!("{p}/value"), "value": want.image}));
        }
    }
    if topo
        .pointer("/controlPlane/replicas")
        .and_then(Value::as_i64)
        != Some(want.control_plane_replicas)
    {
        let op = if topo.pointer("/controlPlane").is_some() {
            json!({"op": "add", "path": format!("{base}/controlPlane/replicas"),
                   "value": want.control_plane_replicas})
        } else {
            json!({"op": "add", "path": format!("{base}/controlPlane"),
                   "value": {"replicas": want.control_plane_replicas}})
        };
        ops.push(op);
    }
    let entries = topo
        .pointer("/workers/machineDeployments")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let md = |i: usize| format!("{base}/workers/machineDeployments/{i}");
    let class = entries
        .first()
        .and_then(|e| e["class"].as_str())
        .unwrap_or(WORKER_CLASS)
        .to_string();
    let mut added = Vec::new();
    for g in &want.groups {
        let Some(i) = entry_index(&entries, &g.name) else {
            if !want.deleting.contains(&g.name) {
                added.push(new_entry(&class, g));
            }
            continue;
        };
        let e = &entries[i];
        let mut changes = Vec::new();
        if let Some(r) = g.replicas
            && g.autoscale.is_none()
            && e["replicas"].as_i64() != Some(r)
        {
            changes.push(json!({"op": "add", "path": format!("{}/replicas", md(i)), "value": r}));
        }
        if let Some((lo, hi)) = g.autoscale {
            let a = e.pointer("/metadata/annotations");
            let missing: Vec<(&str, String)> = [(AUTOSCALER_MIN, lo), (AUTOSCALER_MAX, hi)]
                .into_iter()
                .map(|(k, v)| (k, v.to_string()))
                .filter(|(k, v)| a.and_then(|a| a.get(*k)).and_then(Value::as_str) != Some(v))
                .collect();
            if !missing.is_empty() {
                match (e.pointer("/metadata"), a) {
                    (_, Some(_)) => {}
                    (Some(_), None) => changes.push(
                        json!({"op": "add", "path": format!("{}/metadata/annotations", md(i)), "value": {}}),
                    ),
                    (None, None) => changes.push(
                        json!({"op": "add", "path": format!("{}/metadata", md(i)), "value": {"annotations": {}}}),
                    ),
                }
            }
            for (k, v) in missing {
                changes.push(json!({"op": "add",
                    "path": format!("{}/metadata/annotations/{}", md(i), escape(k)), "value": v}));
            }
        }
        if upgrading {
            let overrides = e
                .pointer("/variables/overrides")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if let Some(j) = entry_index(&overrides, IMAGE_VARIABLE)
                && overrides[j]["value"].as_str() != Some(g.image.as_str())
            {
                let p = format!("{}/variables/overrides/{j}", md(i));
                changes.push(
                    json!({"op": "test", "path": format!("{p}/name"), "value": IMAGE_VARIABLE}),
                );
                changes
                    .push(json!({"op": "replace", "path": format!("{p}/value"), "value": g.image}));
            }
        }
        if !changes.is_empty() {
            ops.push(json!({"op": "test", "path": format!("{}/name", md(i)), "value": g.name}));
            ops.extend(changes);
        }
    }
    // Removals from the highest index down, so earlier indices hold.
    let mut gone: Vec<(usize, &str)> = want
        .deleting
        .iter()
        .filter_map(|n| entry_index(&entries, n).map(|i| (i, n.as_str())))
        .collect();
    gone.sort_by_key(|g| std::cmp::Reverse(g.0));
    for (i, n) in gone {
        ops.push(json!({"op": "test", "path": format!("{}/name", md(i)), "value": n}));
        ops.push(json!({"op": "remove", "path": md(i)}));
    }
    if !added.is_empty() {
        if topo.pointer("/workers/machineDeployments").is_some() {
            for e in added {
                ops.push(json!({"op": "add", "path": format!("{base}/workers/machineDeployments/-"), "value": e}));
            }
        } else if topo.pointer("/workers").is_some() {
            ops.push(json!({"op": "add", "path": format!("{base}/workers/machineDeployments"), "value": added}));
        } else {
            ops.push(json!({"op": "add", "path": format!("{base}/workers"), "value": {"machineDeployments": added}}));
        }
    }
    Ok(ops)
}

/// A JSON pointer segment (RFC 6901).
fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// A new nodegroup's entry, as vexxhost's `mutate_machine_deployment`
/// makes one (the overrides that need OpenStack lookups there, boot
/// volume and server group, are left to the class's defaults).
fn new_entry(class: &str, g: &Group) -> Value {
    let mut e = json!({
        "class": class,
        "name": g.name,
        "metadata": {"labels": {
            format!("node-role.kubernetes.io/{}", g.role): "",
            "node.cluster.x-k8s.io/nodegroup": g.name,
        }},
        "variables": {"overrides": [
            {"name": FLAVOR_VARIABLE, "value": g.flavor},
        ]},
    });
    // An image named rather than given by id is left to the cluster's own
    // `imageUUID` (the variable takes an id).
    if uuid_like(&g.image)
        && let Some(a) = e["variables"]["overrides"].as_array_mut()
    {
        a.push(json!({"name": IMAGE_VARIABLE, "value": g.image}));
    }
    match (g.autoscale, g.replicas) {
        (Some((lo, hi)), _) => {
            e["metadata"]["annotations"] =
                json!({AUTOSCALER_MIN: lo.to_string(), AUTOSCALER_MAX: hi.to_string()});
        }
        (None, Some(r)) => e["replicas"] = json!(r),
        (None, None) => {}
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Value {
        json!({"spec": {"topology": {
            "class": "magnum-v0.38.1", "version": "v1.30.4",
            "controlPlane": {"replicas": 3, "metadata": {"labels": {"node-role.kubernetes.io/master": ""}}},
            "variables": [{"name": "flavor", "value": "m1.medium"}, {"name": "imageUUID", "value": "img-1"}],
            "workers": {"machineDeployments": [
                {"class": "default-worker", "name": "default-worker", "replicas": 2,
                 "variables": {"overrides": [{"name": "flavor", "value": "m1.medium"}, {"name": "imageUUID", "value": "img-1"}]}},
                {"class": "default-worker", "name": "gpu", "replicas": 1}]}}}})
    }

    fn group(name: &str, replicas: i64) -> Group {
        Group {
            name: name.into(),
            role: "worker".into(),
            flavor: "m1.medium".into(),
            image: "img-1".into(),
            replicas: Some(replicas),
            autoscale: None,
        }
    }

    fn want() -> Want {
        Want {
            version: "v1.30.4".into(),
            image: "img-1".into(),
            control_plane_replicas: 3,
            groups: vec![group("default-worker", 2), group("gpu", 1)],
            deleting: vec![],
        }
    }

    /// Apply a JSON patch the way the apiserver does (enough of RFC 6902
    /// for the ops [`patch`] writes): a failed `test` fails the patch.
    fn apply(doc: &Value, ops: &[Value]) -> Result<Value, String> {
        let mut d = doc.clone();
        for op in ops {
            let path = op["path"].as_str().unwrap_or("");
            let (parent, last) = path.rsplit_once('/').unwrap_or(("", path));
            let last = last.replace("~1", "/").replace("~0", "~");
            match op["op"].as_str() {
                Some("test") => {
                    if d.pointer(path) != Some(&op["value"]) {
                        return Err(format!("test {path} failed"));
                    }
                }
                Some("replace") | Some("add") => {
                    let p = d.pointer_mut(parent).ok_or(format!("no {parent}"))?;
                    match p {
                        Value::Array(a) if last == "-" => a.push(op["value"].clone()),
                        Value::Object(o) => {
                            o.insert(last, op["value"].clone());
                        }
                        _ => return Err(format!("bad {path}")),
                    }
                }
                Some("remove") => {
                    let p = d.pointer_mut(parent).ok_or(format!("no {parent}"))?;
                    match p {
                        Value::Array(a) => {
                            a.remove(last.parse::<usize>().map_err(|e| e.to_string())?);
                        }
                        _ => return Err(format!("bad {path}")),
                    }
                }
                _ => return Err("op".into()),
            }
        }
        Ok(d)
    }

    #[test]
    fn nothing_to_write_when_the_topology_says_what_the_rows_say() {
        assert!(patch(&cluster(), &want()).unwrap().is_empty());
        // The topology's "v" prefix or not is the same version.
        let mut w = want();
        w.version = "1.30.4".into();
        assert!(patch(&cluster(), &w).unwrap().is_empty());
    }

    #[test]
    fn a_resize_changes_counts_only() {
        let mut w = want();
        w.control_plane_replicas = 5;
        w.groups[1].replicas = Some(4);
        let ops = patch(&cluster(), &w).unwrap();
        let after = apply(&cluster(), &ops).unwrap();
        let mut expected = cluster();
        expected["spec"]["topology"]["controlPlane"]["replicas"] = json!(5);
        expected["spec"]["topology"]["workers"]["machineDeployments"][1]["replicas"] = json!(4);
        assert_eq!(after, expected);
    }

    #[test]
    fn a_patch_from_a_stale_read_fails_rather_than_change_another_entry() {
        let mut w = want();
        w.groups[1].replicas = Some(4);
        let ops = patch(&cluster(), &w).unwrap();
        // Meanwhile someone removed default-worker: gpu moved to index 0.
        let mut now = cluster();
        now["spec"]["topology"]["workers"]["machineDeployments"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert!(apply(&now, &ops).is_err());
    }

    #[test]
    fn a_nodegroup_is_added_and_removed_as_an_entry() {
        let mut w = want();
        let mut ng = group("big", 2);
        ng.flavor = "m1.large".into();
        w.groups.push(ng);
        w.deleting = vec!["gpu".into()];
        let after = apply(&cluster(), &patch(&cluster(), &w).unwrap()).unwrap();
        let mds = after
            .pointer("/spec/topology/workers/machineDeployments")
            .unwrap();
        let names: Vec<&str> = mds
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["default-worker", "big"]);
        assert_eq!(mds[1]["class"], "default-worker");
        assert_eq!(mds[1]["replicas"], 2);
        assert_eq!(
            mds[1]["metadata"]["labels"]["node.cluster.x-k8s.io/nodegroup"],
            "big"
        );
        assert_eq!(mds[1]["variables"]["overrides"][0]["value"], "m1.large");
        // A group being deleted is not added back once its entry is gone.
        let mut w2 = want();
        w2.deleting = vec!["gpu".into()];
        assert!(patch(&after, &w2).unwrap().is_empty());
    }

    #[test]
    fn an_upgrade_changes_version_and_images_in_one_write() {
        let mut w = want();
        w.version = "v1.31.1".into();
        w.image = "img-2".into();
        for g in &mut w.groups {
            g.image = "img-2".into();
        }
        let after = apply(&cluster(), &patch(&cluster(), &w).unwrap()).unwrap();
        let t = &after["spec"]["topology"];
        assert_eq!(t["version"], "v1.31.1");
        assert_eq!(t["variables"][1]["value"], "img-2");
        assert_eq!(
            t["workers"]["machineDeployments"][0]["variables"]["overrides"][1]["value"],
            "img-2"
        );
        // Counts untouched.
        assert_eq!(t["workers"]["machineDeployments"][0]["replicas"], 2);
        // Once the version is there, the images are not rewritten (a
        // later resize does not roll anything back or forth).
        let mut later = w.clone();
        later.image = "img-3".into();
        assert!(patch(&after, &later).unwrap().is_empty());
    }

    #[test]
    fn autoscaled_groups_get_bounds_not_counts() {
        let mut w = want();
        w.groups[0].autoscale = Some((1, 5));
        w.groups[0].replicas = None;
        let after = apply(&cluster(), &patch(&cluster(), &w).unwrap()).unwrap();
        let e = &after["spec"]["topology"]["workers"]["machineDeployments"][0];
        assert_eq!(e["metadata"]["annotations"][AUTOSCALER_MIN], "1");
        assert_eq!(e["metadata"]["annotations"][AUTOSCALER_MAX], "5");
        assert_eq!(e["replicas"], 2);
        assert!(patch(&after, &w).unwrap().is_empty());
    }

    #[test]
    fn image_ids() {
        assert!(uuid_like("3a1b2c3d-0000-4000-8000-000000000001"));
        assert!(!uuid_like("ubuntu-2204-kube-v1.30.4"));
        assert!(!uuid_like("3a1b2c3d-0000-4000-8000-00000000000g"));
        let mut g = group("x", 1);
        assert_eq!(
            new_entry("default-worker", &g)["variables"]["overrides"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        g.image = "3a1b2c3d-0000-4000-8000-000000000001".into();
        assert_eq!(
            new_entry("default-worker", &g)["variables"]["overrides"][1]["value"],
            g.image.as_str()
        );
    }

    #[test]
    fn no_topology_is_an_error() {
        assert!(patch(&json!({"spec": {}}), &want()).is_err());
        assert!(!is_topology(&json!({"spec": {}})));
        assert!(is_topology(&cluster()));
    }
}

//! CAPI's ClusterResourceSet controller, the part that reaches into the
//! workload cluster (`exp/addons/internal/controllers`): what a set's
//! ConfigMaps and Secrets hold is created in the workload cluster's real
//! apiserver (I/O, for every workload apiserver capi-sim runs:
//! [`crate::workload`], once a second).
//! The binding bookkeeping in the management cluster is
//! [`crate::controllers::addons::reconcile_resource_set`]'s.
//!
//! - What a resource holds (`clusterresourceset_helpers.go`,
//!   `normalizeData`, `objsFromYamlData`): every data value, keys in
//!   order, Secret values decoded, each a YAML stream of objects;
//! - when (`clusterresourceset_scope.go`): `ApplyOnce` once per cluster and
//!   resource (`reconcileApplyOnceScope.needsApply`); `Reconcile` again
//!   whenever the resource's hash changes (`reconcileStrategyScope.
//!   needsApply`: `computeHash` of the normalized data);
//! - how: `ApplyOnce` creates, an existing object is left as it is
//!   (`createUnstructured`, AlreadyExists is no error); `Reconcile`
//!   creates a missing object, else patches it with a JSON merge patch
//!   from the live object to the wanted one (`client.MergeFrom`): fields
//!   the wanted object no longer has are removed. Simplified: `metadata`
//!   is patched with the wanted object's labels and annotations only (the
//!   apiserver puts the system fields the upstream patch clears back).
//!   The objects' own namespaces are used (ours all name one).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Map, Value};

use crate::kinds::{Kind, Line};
use crate::shared::lock;

/// The objects a resource's data holds (pure): each value, in key order,
/// as a stream of YAML (or JSON) documents.
pub fn objects_of(data: &BTreeMap<String, Vec<u8>>) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (key, bytes) in data {
        let text = std::str::from_utf8(bytes).map_err(|e| format!("{key}: not UTF-8: {e}"))?;
        for doc in serde_norway::Deserializer::from_str(text) {
            let v: Value =
                serde::Deserialize::deserialize(doc).map_err(|e| format!("{key}: {e}"))?;
            if !v.is_null() {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// A digest of a resource's data (pure), for `Reconcile`'s "changed".
pub fn hash_of(data: &BTreeMap<String, Vec<u8>>) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The merge patch from `live` to `want` (pure): `want`'s fields, `null`
/// for those only `live` has, recursively; `metadata` as the module says.
pub fn merge_patch(live: &Value, want: &Value) -> Value {
    fn diff(live: &Value, want: &Value) -> Value {
        match (live.as_object(), want.as_object()) {
            (Some(l), Some(w)) => {
                let mut out = Map::new();
                for (k, wv) in w {
                    out.insert(k.clone(), diff(l.get(k).unwrap_or(&Value::Null), wv));
                }
                for k in l.keys().filter(|k| !w.contains_key(*k)) {
                    out.insert(k.clone(), Value::Null);
                }
                Value::Object(out)
            }
            _ => want.clone(),
        }
    }
    let mut patch = Map::new();
    if let (Some(l), Some(w)) = (live.as_object(), want.as_object()) {
        for (k, wv) in w {
            if k == "metadata" {
                let mut m = Map::new();
                for f in ["labels", "annotations"] {
                    if let Some(v) = wv.get(f) {
                        let lv = l.get(k).and_then(|m| m.get(f)).unwrap_or(&Value::Null);
                        m.insert(f.into(), diff(lv, v));
                    }
                }
                patch.insert(k.clone(), Value::Object(m));
            } else {
                patch.insert(k.clone(), diff(l.get(k).unwrap_or(&Value::Null), wv));
            }
        }
        for k in l.keys().filter(|k| !w.contains_key(*k) && *k != "status") {
            patch.insert(k.clone(), Value::Null);
        }
    }
    Value::Object(patch)
}

/// The data of a set's resource (`kind` ConfigMap or Secret) in the
/// management cluster; None when it does not exist (yet).
pub async fn resource_data(
    mgmt: &kube::Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    match kind {
        "Secret" => Ok(Api::<Secret>::namespaced(mgmt.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| format!("Secret {namespace}/{name}: {e}"))?
            .map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            })),
        "ConfigMap" => Ok(Api::<ConfigMap>::namespaced(mgmt.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| format!("ConfigMap {namespace}/{name}: {e}"))?
            .map(|c| {
                c.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect()
            })),
        other => Err(format!("a ClusterResourceSet resource of kind {other}")),
    }
}

/// Put `obj` in the workload cluster as the set's `strategy` does.
pub async fn apply(workload: &kube::Client, obj: &Value, strategy: &str) -> Result<(), String> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => Api::namespaced_with(workload.clone(), ns, &ar),
        None => Api::all_with(workload.clone(), &ar),
    };
    let what = format!("{kind} {name}");
    let live = api
        .get_opt(name)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    match live {
        None => {
            let o: DynamicObject =
                serde_json::from_value(obj.clone()).map_err(|e| format!("{what}: {e}"))?;
            match api.create(&PostParams::default(), &o).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && strategy == "ApplyOnce" => Ok(()),
                Err(e) => Err(format!("{what}: {e}")),
            }
        }
        Some(_) if strategy == "ApplyOnce" => Ok(()),
        Some(live) => {
            let live = serde_json::to_value(&live).map_err(|e| format!("{what}: {e}"))?;
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(merge_patch(&live, obj)),
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("{what}: {e}"))
        }
    }
}

/// What each cluster's sets applied: (cluster, set, resource) -> the
/// resource's hash then.
pub type Applied = HashMap<((String, String), String, String), String>;

/// CAPI's ClusterResourceSets, in the workload cluster
/// ([`crate::resource_sets`]): every set of the cluster's namespace
/// selecting it, each resource applied when its strategy says.
pub async fn sync_cluster(
    mgmt: &kube::Client,
    line: Line,
    key: &(String, String),
    workload: &kube::Client,
    applied: &Mutex<Applied>,
) -> Vec<String> {
    let mut errors = Vec::new();
    let cluster = match Api::<DynamicObject>::namespaced_with(
        mgmt.clone(),
        &key.0,
        &Kind::Cluster.api_resource(line),
    )
    .get_opt(&key.1)
    .await
    {
        Ok(Some(c)) => serde_json::to_value(c).unwrap_or_default(),
        Ok(None) => return errors,
        Err(e) => {
            errors.push(format!("{}/{}: Cluster: {e}", key.0, key.1));
            return errors;
        }
    };
    let sets = match Api::<DynamicObject>::namespaced_with(
        mgmt.clone(),
        &key.0,
        &Kind::ClusterResourceSet.api_resource(line),
    )
    .list(&ListParams::default())
    .await
    {
        Ok(l) => l.items,
        Err(e) => {
            errors.push(format!("{}: ClusterResourceSets: {e}", key.0));
            return errors;
        }
    };
    for set in sets {
        let set = serde_json::to_value(set).unwrap_or_default();
        if !crate::obj::selector_matches(set.pointer("/spec/clusterSelector"), &cluster) {
            continue;
        }
        let set_name = set["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let strategy = set["spec"]["strategy"]
            .as_str()
            .unwrap_or("ApplyOnce")
            .to_string();
        let resources = set["spec"]["resources"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for r in resources {
            let (kind, name) = (
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
            );
            let memo = (key.clone(), set_name.clone(), format!("{kind}/{name}"));
            let data = match resource_data(mgmt, &key.0, kind, name).await {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(e) => {
                    errors.push(format!("ClusterResourceSet {}/{set_name}: {e}", key.0));
                    continue;
                }
            };
            let hash = hash_of(&data);
            let done = lock(applied).get(&memo).cloned();
            if done.is_some_and(|h| strategy == "ApplyOnce" || h == hash) {
                continue;
            }
            let outcome = async {
                for o in objects_of(&data)? {
                    apply(workload, &o, &strategy).await?;
                }
                Ok::<(), String>(())
            }
            .await;
            match outcome {
                Ok(()) => {
                    lock(applied).insert(memo, hash);
                }
                Err(e) => errors.push(format!(
                    "ClusterResourceSet {}/{set_name} in cluster {}: {e}",
                    key.0, key.1
                )),
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn j(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn every_value_is_a_stream_of_objects_in_key_order() {
        let mut data = BTreeMap::new();
        data.insert(
            "b.yaml".to_string(),
            b"{\"kind\":\"Secret\",\"metadata\":{\"name\":\"x\"}}\n---\n{\"kind\":\"Secret\",\"metadata\":{\"name\":\"y\"}}".to_vec(),
        );
        data.insert(
            "a.yaml".to_string(),
            b"kind: ConfigMap\nmetadata:\n  name: z\n---\n".to_vec(),
        );
        let objs = objects_of(&data).unwrap();
        let names: Vec<&str> = objs
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["z", "x", "y"]);
        let mut other = data.clone();
        other.insert(
            "a.yaml".into(),
            b"kind: ConfigMap\nmetadata:\n  name: w\n".to_vec(),
        );
        assert_ne!(hash_of(&data), hash_of(&other));
        assert_eq!(hash_of(&data), hash_of(&data.clone()));
        data.insert("c".into(), vec![0xff]);
        assert!(objects_of(&data).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn reconcile_removes_what_the_wanted_object_no_longer_has() {
        let live = j(r#"{"apiVersion":"v1","kind":"Secret","type":"Opaque",
            "metadata":{"name":"s","uid":"u","labels":{"old":"1"}},
            "data":{"cloud.conf":"YQ==","ca.crt":"Yg=="}}"#);
        let want = j(r#"{"apiVersion":"v1","kind":"Secret","type":"Opaque",
            "metadata":{"name":"s","namespace":"kube-system","labels":{"new":"1"}},
            "stringData":{"cloud.conf":"c"}}"#);
        let p = merge_patch(&live, &want);
        assert_eq!(p["data"], Value::Null);
        assert_eq!(p["stringData"], json!({"cloud.conf": "c"}));
        assert_eq!(p["metadata"], json!({"labels": {"new": "1", "old": null}}));
    }
}

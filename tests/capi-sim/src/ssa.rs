//! Server-side apply and field ownership (`metadata.managedFields`), pure.
//!
//! Fields are tracked as leaf paths: object members recurse, lists are
//! atomic (one leaf, replaced whole: the apiserver merges `list-type: map`
//! lists by key, which is not modelled yet), labels and annotations are one
//! leaf per key, `finalizers` and `ownerReferences` are atomic.
//!
//! - apply: the applied leaves become the manager's Apply set; a leaf owned
//!   by another manager with a different value is a conflict (409) unless
//!   `force`, which takes it over; leaves the manager applied before and
//!   omits now are removed when nobody else owns them.
//! - update (PUT/PATCH): every leaf whose value changed moves to the
//!   request's manager (operation Update).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

pub type Path = Vec<String>;

const SKIP_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(k.clone());
                walk(child, path, out);
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The leaf paths of an object (apiVersion, kind and server-owned metadata left out).
pub fn leaves(obj: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(m) = obj.as_object() else { return out };
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if let Some(meta) = v.as_object() {
                    for (mk, mv) in meta {
                        if SKIP_META.contains(&mk.as_str()) {
                            continue;
                        }
                        match (mk.as_str(), mv) {
                            ("labels" | "annotations", Value::Object(kv)) => {
                                for key in kv.keys() {
                                    out.insert(vec!["metadata".into(), mk.clone(), key.clone()]);
                                }
                            }
                            _ => {
                                out.insert(vec!["metadata".into(), mk.clone()]);
                            }
                        }
                    }
                }
            }
            _ => walk(v, &mut vec![k.clone()], &mut out),
        }
    }
    out
}

pub fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn set(obj: &mut Value, path: &[String], value: Value) {
    let mut cur = obj;
    for k in &path[..path.len().saturating_sub(1)] {
        if !cur.get(k).is_some_and(Value::is_object) {
            cur[k.as_str()] = json!({});
        }
        cur = &mut cur[k.as_str()];
    }
    if let Some(last) = path.last() {
        cur[last.as_str()] = value;
    }
}

fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for k in parents {
        match cur.get_mut(k) {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: BTreeSet<Path>,
}

pub fn to_fields_v1(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in fields {
        let mut cur = &mut root;
        for k in p {
            cur = cur
                .entry(format!("f:{k}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
    }
    Value::Object(root)
}

pub fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn go(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let m = match v.as_object() {
            Some(m) if !m.is_empty() => m,
            _ => {
                if !path.is_empty() {
                    out.insert(path.clone());
                }
                return;
            }
        };
        for (k, child) in m {
            if let Some(name) = k.strip_prefix("f:") {
                path.push(name.to_string());
                go(child, path, out);
                path.pop();
            }
        }
    }
    let mut out = BTreeSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

pub fn read_managed(obj: &Value) -> Vec<Entry> {
    let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: s(e, "manager"),
                    operation: s(e, "operation"),
                    api_version: s(e, "apiVersion"),
                    time: s(e, "time"),
                    subresource: s(e, "subresource"),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn write_managed(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                               "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.fields)});
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// A conflict: (field path, the manager that owns it).
pub type Conflict = (String, String);

pub fn dotted(p: &Path) -> String {
    format!(".{}", p.join("."))
}

/// Server-side apply of `applied` by `manager` onto `current` (None: the
/// object does not exist yet). `scope` limits what is applied: `Some("status")`
/// for the status subresource, else everything but status when the resource
/// has a status subresource. Returns the merged object with managedFields.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
    subresource: &str,
    in_scope: impl Fn(&Path) -> bool,
) -> Result<Value, Vec<Conflict>> {
    let applied_leaves: BTreeSet<Path> = leaves(applied)
        .into_iter()
        .filter(|p| in_scope(p))
        .collect();
    let mut obj = current.cloned().unwrap_or_else(|| json!({"metadata": {}}));
    let mut entries = current.map(read_managed).unwrap_or_default();
    let mut conflicts = Vec::new();
    for p in &applied_leaves {
        let new = get(applied, p);
        let old = get(&obj, p);
        if old.is_none() || old == new {
            continue;
        }
        for e in entries
            .iter()
            .filter(|e| e.manager != manager && e.fields.contains(p))
        {
            conflicts.push((dotted(p), e.manager.clone()));
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    // Force (or no conflict): others lose what this apply sets differently.
    for e in entries.iter_mut().filter(|e| e.manager != manager) {
        e.fields
            .retain(|p| !(applied_leaves.contains(p) && get(applied, p) != get(&obj, p)));
    }
    // Fields this manager applied before and dropped now go, unless owned elsewhere.
    let before: BTreeSet<Path> = entries
        .iter()
        .filter(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    for p in before.difference(&applied_leaves) {
        let owned_elsewhere = entries
            .iter()
            .any(|e| !(e.manager == manager && e.operation == "Apply") && e.fields.contains(p));
        if !owned_elsewhere {
            remove(&mut obj, p);
        }
    }
    for p in &applied_leaves {
        if let Some(v) = get(applied, p) {
            set(&mut obj, p, v.clone());
        }
    }
    // An apply that owns the same fields as before keeps its timestamp, so a
    // no-op apply leaves the object (and its resourceVersion) untouched.
    let previous_time = entries
        .iter()
        .find(|e| {
            e.manager == manager
                && e.operation == "Apply"
                && e.subresource == subresource
                && e.fields == applied_leaves
        })
        .map(|e| e.time.clone());
    entries.retain(|e| {
        !(e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
    });
    entries.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.to_string(),
        time: previous_time.unwrap_or_else(|| now.to_string()),
        subresource: subresource.to_string(),
        fields: applied_leaves,
    });
    write_managed(&mut obj, &entries);
    Ok(obj)
}

/// Ownership after a non-apply write: changed leaves go to `manager`.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    now: &str,
    subresource: &str,
) {
    let mut entries = old.map(read_managed).unwrap_or_default();
    let new_leaves = leaves(new);
    let changed: BTreeSet<Path> = match old {
        None => new_leaves.clone(),
        Some(o) => {
            let old_leaves = leaves(o);
            new_leaves
                .iter()
                .filter(|p| get(o, p) != get(new, p))
                .chain(old_leaves.difference(&new_leaves))
                .cloned()
                .collect()
        }
    };
    for e in entries.iter_mut() {
        e.fields
            .retain(|p| !changed.contains(p) && new_leaves.contains(p));
    }
    let mine: BTreeSet<Path> = changed.intersection(&new_leaves).cloned().collect();
    if !mine.is_empty() {
        match entries.iter_mut().find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(e) => {
                e.fields.extend(mine);
                e.time = now.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: now.to_string(),
                subresource: subresource.to_string(),
                fields: mine,
            }),
        }
    }
    write_managed(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: &Path) -> bool {
        true
    }

    #[test]
    fn apply_conflict_force_and_removal() {
        let a1 = json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {"replicas": 3, "image": "i"}});
        let o1 = apply(None, &a1, "conductor", false, "v1", "t", "", all).unwrap();
        assert_eq!(o1["spec"]["replicas"], 3);
        assert_eq!(read_managed(&o1)[0].fields.len(), 3);

        // Another manager changes replicas with a plain update: it owns it now.
        let mut o2 = o1.clone();
        o2["spec"]["replicas"] = json!(5);
        record_update(Some(&o1), &mut o2, "autoscaler", "v1", "t", "");
        let e = read_managed(&o2);
        assert!(e.iter().any(|e| {
            e.manager == "autoscaler"
                && e.fields
                    .contains(&vec!["spec".to_string(), "replicas".to_string()])
        }));

        // Re-applying a different value conflicts; the same value does not.
        let err = apply(Some(&o2), &a1, "conductor", false, "v1", "t", "", all).unwrap_err();
        assert_eq!(
            err,
            vec![(".spec.replicas".to_string(), "autoscaler".to_string())]
        );
        let mut same = a1.clone();
        same["spec"]["replicas"] = json!(5);
        assert!(apply(Some(&o2), &same, "conductor", false, "v1", "t", "", all).is_ok());
        // Force takes it back.
        let o3 = apply(Some(&o2), &a1, "conductor", true, "v1", "t", "", all).unwrap();
        assert_eq!(o3["spec"]["replicas"], 3);
        assert!(read_managed(&o3).iter().all(|e| e.manager != "autoscaler"));

        // Dropping a field from the applied config removes it.
        let a2 = json!({"metadata": {"name": "x"}, "spec": {"replicas": 3}});
        let o4 = apply(Some(&o3), &a2, "conductor", false, "v1", "t", "", all).unwrap();
        assert!(o4["spec"].get("image").is_none());
        assert!(
            o4["metadata"]
                .get("labels")
                .and_then(|l| l.get("a"))
                .is_none()
        );
    }

    #[test]
    fn a_repeated_apply_keeps_its_timestamp() {
        let a = json!({"metadata": {"name": "x"}, "spec": {"replicas": 3}});
        let o1 = apply(None, &a, "m", false, "v1", "t1", "", all).unwrap();
        let o2 = apply(Some(&o1), &a, "m", false, "v1", "t2", "", all).unwrap();
        assert_eq!(o1, o2, "no-op apply changes nothing");
        let mut b = a.clone();
        b["spec"]["paused"] = json!(true);
        let o3 = apply(Some(&o2), &b, "m", false, "v1", "t3", "", all).unwrap();
        assert_eq!(read_managed(&o3)[0].time, "t3");
    }

    #[test]
    fn fields_v1_round_trip() {
        let set: BTreeSet<Path> = [
            vec!["spec".to_string(), "replicas".to_string()],
            vec!["metadata".into(), "labels".into(), "a/b".into()],
        ]
        .into_iter()
        .collect();
        let v = to_fields_v1(&set);
        assert_eq!(v["f:spec"]["f:replicas"], json!({}));
        assert_eq!(from_fields_v1(&v), set);
    }
}

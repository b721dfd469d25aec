//! Reading and comparing Kubernetes objects as JSON (pure): metadata
//! accessors, owner references as CAPI and controller-runtime set them,
//! conditions, and the two patch formats the controllers send (a JSON merge
//! patch, as CAPI's `util/patch` helper sends; a JSON patch, as admission
//! webhooks answer).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

pub const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const CP_LABEL: &str = "cluster.x-k8s.io/control-plane";
pub const CP_NAME_LABEL: &str = "cluster.x-k8s.io/control-plane-name";
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const SET_LABEL: &str = "cluster.x-k8s.io/set-name";
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
pub const HCP_LABEL: &str = "helmchartproxy.addons.cluster.x-k8s.io/name";
/// Fault: an OpenStackCluster (or its Namespace) fails with this message.
pub const FAIL: &str = "capi-sim/fail-reason";
/// Fault: Machines (of an object, or of a Namespace) never become ready.
pub const NEVER_READY: &str = "capi-sim/never-ready";
/// Fault: a MachineHealthCheck finds this Machine unhealthy.
pub const UNHEALTHY: &str = "capi-sim/unhealthy";

pub fn meta<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.get("metadata")
        .and_then(|m| m.get(k))
        .and_then(Value::as_str)
}
pub fn name(o: &Value) -> &str {
    meta(o, "name").unwrap_or("")
}
pub fn namespace(o: &Value) -> &str {
    meta(o, "namespace").unwrap_or("")
}
pub fn label<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.pointer("/metadata/labels")
        .and_then(|l| l.get(k))
        .and_then(Value::as_str)
}
pub fn annotation<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")
        .and_then(|l| l.get(k))
        .and_then(Value::as_str)
}
pub fn deleting(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp").is_some()
}
/// `metadata.resourceVersion` as a number (etcd revisions are): used only
/// to keep a cache from going back in time; None if not a number.
pub fn resource_version(o: &Value) -> Option<u64> {
    meta(o, "resourceVersion").and_then(|v| v.parse().ok())
}

/// An owner reference to `o` (`metav1.NewControllerRef` when `controller`).
pub fn owner_ref(o: &Value, controller: bool) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": name(o), "uid": meta(o, "uid"),
           "controller": controller, "blockOwnerDeletion": true})
}

/// A plain owner reference to `o` (controller-runtime's
/// `controllerutil.SetOwnerReference`: no controller flag, no
/// blockOwnerDeletion).
pub fn plain_owner_ref(o: &Value) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": name(o), "uid": meta(o, "uid")})
}

pub fn owner_refs(o: &Value) -> Vec<Value> {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn owned_by(o: &Value, owner_uid: &str) -> bool {
    !owner_uid.is_empty()
        && owner_refs(o)
            .iter()
            .any(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
}

fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn same_owner(a: &Value, b: &Value) -> bool {
    api_group(a["apiVersion"].as_str().unwrap_or(""))
        == api_group(b["apiVersion"].as_str().unwrap_or(""))
        && a["kind"] == b["kind"]
        && a["name"] == b["name"]
}

/// CAPI's `util.EnsureOwnerRef`: replace the reference to the same owner
/// (group, kind, name) or add it.
pub fn ensure_owner_ref(refs: &mut Vec<Value>, r: Value) {
    match refs.iter_mut().find(|x| same_owner(x, &r)) {
        Some(x) => *x = r,
        None => refs.push(r),
    }
}

/// Whether `refs` already holds exactly `r` (CAPI's `util.HasExactOwnerRef`
/// compares apiVersion, kind, name, uid and the controller flag).
pub fn has_exact_owner_ref(refs: &[Value], r: &Value) -> bool {
    refs.iter().any(|x| {
        x["apiVersion"] == r["apiVersion"]
            && x["kind"] == r["kind"]
            && x["name"] == r["name"]
            && x["uid"] == r["uid"]
            && x.get("controller")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                == r.get("controller")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
    })
}

/// A stable 10-hex-digit hash of a JSON value (template hashes, fake ids).
pub fn short_hash(v: &Value) -> String {
    let mut h = DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016x}", h.finish())[..10].to_string()
}

/// `names.SimpleNameGenerator`: `base` + 5 random characters from the
/// alphabet Kubernetes uses for generated names.
pub fn generate_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    format!("{base}{suffix}")
}

/// `v1.MINOR.PATCH` as a sortable key.
pub fn version_key(v: &str) -> (u64, u64, u64) {
    let mut it = v
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

/// Keep a condition's `lastTransitionTime` while its status is unchanged
/// (as CAPI's `conditions.Set` does), so a pass that changes nothing writes
/// nothing.
pub fn keep_transition_times(cur: &Value, next: &mut Value) {
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

/// The JSON merge patch (RFC 7386) that turns `from` into `to`: changed
/// members, `null` for removed ones, arrays replaced whole. This is what
/// controller-runtime's `client.MergeFrom` computes for CAPI's patch helper.
/// None when they are equal.
pub fn merge_patch(from: &Value, to: &Value) -> Option<Value> {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Map::new();
            for (k, bv) in b {
                match a.get(k) {
                    Some(av) => {
                        if let Some(p) = merge_patch(av, bv) {
                            out.insert(k.clone(), p);
                        }
                    }
                    None => {
                        out.insert(k.clone(), bv.clone());
                    }
                }
            }
            for k in a.keys() {
                if !b.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ if from == to => None,
        _ => Some(to.clone()),
    }
}

fn pointer_token(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// A JSON patch (RFC 6902) from `from` to `to`, as an admission webhook
/// answers a mutation: objects compared member by member, anything else
/// replaced whole.
pub fn json_patch(from: &Value, to: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    diff_into("", from, to, &mut ops);
    ops
}

fn diff_into(path: &str, from: &Value, to: &Value, ops: &mut Vec<Value>) {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys() {
                if !b.contains_key(k) {
                    ops.push(
                        json!({"op": "remove", "path": format!("{path}/{}", pointer_token(k))}),
                    );
                }
            }
            for (k, bv) in b {
                let p = format!("{path}/{}", pointer_token(k));
                match a.get(k) {
                    Some(av) => diff_into(&p, av, bv, ops),
                    None => ops.push(json!({"op": "add", "path": p, "value": bv})),
                }
            }
        }
        _ if from == to => {}
        _ => ops.push(json!({"op": "replace", "path": path, "value": to})),
    }
}

/// A condition in the line's shape: v1beta2 (metav1.Condition: reason
/// always) or v1beta1 (CAPI's own: reason and severity when not True).
pub fn condition(v2: bool, now: &str, ty: &str, ok: bool, reason: &str, message: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    if v2 {
        json!({"type": ty, "status": status, "reason": reason, "message": message, "lastTransitionTime": now})
    } else {
        let mut c = json!({"type": ty, "status": status, "lastTransitionTime": now});
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

/// A v1beta1 condition with an explicit severity (v1beta2 has none).
pub fn condition_with(
    v2: bool,
    now: &str,
    ty: &str,
    ok: bool,
    reason: &str,
    severity: &str,
    message: &str,
) -> Value {
    let mut c = condition(v2, now, ty, ok, reason, message);
    if !v2 && !ok {
        c["severity"] = json!(severity);
    }
    c
}

/// `matchLabels` of a LabelSelector (matchExpressions are not simulated).
pub fn selector_matches(selector: Option<&Value>, o: &Value) -> bool {
    let Some(ml) = selector
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
    else {
        return selector.is_some_and(|s| s.as_object().is_some_and(|m| m.is_empty()));
    };
    ml.iter().all(|(k, v)| label(o, k) == v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7386's own examples, applied with a small reference applier.
    fn apply_merge(target: &Value, patch: &Value) -> Value {
        match patch {
            Value::Object(p) => {
                let mut t = target.as_object().cloned().unwrap_or_default();
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        let cur = t.get(k).cloned().unwrap_or(Value::Null);
                        t.insert(k.clone(), apply_merge(&cur, v));
                    }
                }
                Value::Object(t)
            }
            other => other.clone(),
        }
    }

    #[test]
    fn merge_patches_round_trip() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"})),
            (json!({"a": "b", "b": "c"}), json!({"a": "b"})),
            (json!({"a": ["b"]}), json!({"a": ["c", "d"]})),
            (
                json!({"metadata": {"labels": {"x": "1", "y": "2"}, "finalizers": ["f"]}, "spec": {"r": 1}}),
                json!({"metadata": {"labels": {"x": "1"}, "finalizers": []}, "spec": {"r": 2, "n": {"k": true}}}),
            ),
        ];
        for (a, b) in cases {
            let p = merge_patch(&a, &b).unwrap();
            assert_eq!(apply_merge(&a, &p), b, "{p}");
        }
        assert_eq!(merge_patch(&json!({"a": [1]}), &json!({"a": [1]})), None);
        assert_eq!(
            merge_patch(
                &json!({"s": {"a": 1, "b": 2}}),
                &json!({"s": {"a": 1, "b": 3}})
            ),
            Some(json!({"s": {"b": 3}}))
        );
    }

    #[test]
    fn json_patches_escape_label_keys() {
        let a = json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "a"}}, "spec": {"x": 1, "gone": 2}});
        let b = json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "b"}}, "spec": {"x": 1, "new": {"y": 1}}});
        assert_eq!(
            json_patch(&a, &b),
            vec![
                json!({"op": "replace", "path": "/metadata/labels/cluster.x-k8s.io~1cluster-name", "value": "b"}),
                json!({"op": "remove", "path": "/spec/gone"}),
                json!({"op": "add", "path": "/spec/new", "value": {"y": 1}}),
            ]
        );
        assert!(json_patch(&a, &a).is_empty());
    }

    #[test]
    fn owner_refs_are_upserted_by_owner() {
        let cl = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                        "metadata": {"name": "c", "uid": "u1"}});
        // What the conductor applied: a plain reference to the same Cluster.
        let mut refs = vec![
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "c", "uid": "u1"}),
        ];
        assert!(!has_exact_owner_ref(&refs, &owner_ref(&cl, true)));
        ensure_owner_ref(&mut refs, owner_ref(&cl, true));
        assert_eq!(refs.len(), 1, "the same owner is replaced, not added");
        assert!(has_exact_owner_ref(&refs, &owner_ref(&cl, true)));
        let other = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet",
                           "metadata": {"name": "c", "uid": "u2"}});
        ensure_owner_ref(&mut refs, owner_ref(&other, false));
        assert_eq!(refs.len(), 2);
    }

    #[test]
    fn generated_names_follow_kubernetes() {
        let n = generate_name("md-");
        assert_eq!(n.len(), 8);
        assert!(
            n[3..]
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }
}

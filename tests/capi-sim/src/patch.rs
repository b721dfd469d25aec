//! PATCH bodies: JSON merge patch (RFC 7386; also what the apiserver does
//! for `strategic-merge-patch` on custom resources, which it refuses) and
//! JSON patch (RFC 6902).

use serde_json::Value;

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn parent_and_key<'a>(doc: &'a mut Value, path: &str) -> Result<(&'a mut Value, String), String> {
    if path.is_empty() {
        return Err("the root cannot be the target here".into());
    }
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    let p = if parent.is_empty() {
        doc
    } else {
        doc.pointer_mut(parent)
            .ok_or_else(|| format!("path {parent:?} does not exist"))?
    };
    Ok((p, unescape(last)))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, key) = parent_and_key(doc, path)?;
    match parent {
        Value::Object(m) => {
            m.insert(key, value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if key == "-" {
                a.len()
            } else {
                key.parse::<usize>()
                    .map_err(|_| format!("bad array index {key:?}"))?
            };
            if idx > a.len() {
                return Err(format!("index {idx} out of bounds"));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(format!("cannot add to a scalar at {path:?}")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, key) = parent_and_key(doc, path)?;
    match parent {
        Value::Object(m) => m
            .remove(&key)
            .ok_or_else(|| format!("path {path:?} does not exist")),
        Value::Array(a) => {
            let idx: usize = key
                .parse()
                .map_err(|_| format!("bad array index {key:?}"))?;
            if idx >= a.len() {
                return Err(format!("index {idx} out of bounds"));
            }
            Ok(a.remove(idx))
        }
        _ => Err(format!("cannot remove from a scalar at {path:?}")),
    }
}

/// RFC 6902, all six operations; the whole patch applies or nothing does.
pub fn json_patch(doc: &Value, ops: &Value) -> Result<Value, String> {
    let ops = ops.as_array().ok_or("a JSON patch must be an array")?;
    let mut out = doc.clone();
    for op in ops {
        let kind = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or("operation without op")?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or("operation without path")?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("{kind} without value"))
        };
        match kind {
            "add" => add(&mut out, path, value()?)?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "replace" => {
                remove(&mut out, path)?;
                add(&mut out, path, value()?)?;
            }
            "move" | "copy" => {
                let from = op
                    .get("from")
                    .and_then(Value::as_str)
                    .ok_or("move/copy without from")?;
                let v = if kind == "move" {
                    remove(&mut out, from)?
                } else {
                    out.pointer(from)
                        .cloned()
                        .ok_or_else(|| format!("path {from:?} does not exist"))?
                };
                add(&mut out, path, v)?;
            }
            "test" => {
                if out.pointer(path) != Some(&value()?) {
                    return Err(format!("test operation failed at {path:?}"));
                }
            }
            other => return Err(format!("unknown operation {other:?}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "d": [1, 2]});
        merge(&mut t, &json!({"a": {"b": null, "e": 3}, "d": [3]}));
        assert_eq!(t, json!({"a": {"c": 2, "e": 3}, "d": [3]}));
    }

    #[test]
    fn json_patch_ops() {
        let d = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"x": 1}});
        let out = json_patch(
            &d,
            &json!([
                {"op": "test", "path": "/spec/x", "value": 1},
                {"op": "remove", "path": "/metadata/finalizers/0"},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
                {"op": "replace", "path": "/spec/x", "value": 2},
                {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
                {"op": "move", "from": "/spec/y", "path": "/spec/z"},
                {"op": "add", "path": "/metadata/labels", "value": {"a~b/c": "1"}}
            ]),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));
        assert_eq!(out["spec"], json!({"x": 2, "z": 2}));
        assert!(json_patch(&d, &json!([{"op": "test", "path": "/spec/x", "value": 9}])).is_err());
        assert!(json_patch(&d, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(json_patch(&d, &json!({"op": "add"})).is_err());
    }
}

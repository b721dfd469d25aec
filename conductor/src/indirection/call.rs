//! The pure half of the indirection API: binding the `args`/`kwargs` of a
//! remotable method as Python would, Magnum's list filters as SQL
//! conditions, oslo.db's sort checks, the target version of a reply, and
//! `object_action`'s update dict.

use common::db::model::{self, SqlValue, Table};
use common::db::repo::{Cond, Page};
use rpc_schema::RemoteFailure;
use rpc_schema::ovo::{self, MagnumObject};
use serde_json::{Map, Value, json};

/// A parameter after `context`: its name and default (`None` = required).
pub type Param = (&'static str, Option<Value>);

/// Bind `args`/`kwargs` to `params` as a Python call `qualname(context,
/// *args, **kwargs)` would, with Python's `TypeError` messages.
pub fn bind(
    qualname: &str,
    params: &[Param],
    args: &[Value],
    kwargs: &Map<String, Value>,
) -> Result<Vec<Value>, RemoteFailure> {
    let type_error = |m: String| RemoteFailure::builtin("TypeError", &m);
    if args.len() > params.len() {
        // `context` is the first positional parameter Python counts.
        return Err(type_error(format!(
            "{qualname}() takes from {} to {} positional arguments but {} were given",
            1 + params.iter().filter(|p| p.1.is_none()).count() + 1,
            params.len() + 2,
            args.len() + 2
        )));
    }
    let mut out: Vec<Option<Value>> = vec![None; params.len()];
    for (i, a) in args.iter().enumerate() {
        out[i] = Some(a.clone());
    }
    for (k, v) in kwargs {
        let Some(i) = params.iter().position(|p| p.0 == k) else {
            return Err(type_error(format!(
                "{qualname}() got an unexpected keyword argument '{k}'"
            )));
        };
        if out[i].is_some() {
            return Err(type_error(format!(
                "{qualname}() got multiple values for argument '{k}'"
            )));
        }
        out[i] = Some(v.clone());
    }
    let missing: Vec<&str> = params
        .iter()
        .zip(&out)
        .filter(|(p, v)| v.is_none() && p.1.is_none())
        .map(|(p, _)| p.0)
        .collect();
    if !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|m| format!("'{m}'")).collect();
        let list = match names.len() {
            1 => names[0].clone(),
            2 => format!("{} and {}", names[0], names[1]),
            _ => format!(
                "{}, and {}",
                names[..names.len() - 1].join(", "),
                names[names.len() - 1]
            ),
        };
        return Err(type_error(format!(
            "{qualname}() missing {} required positional argument{}: {list}",
            missing.len(),
            if missing.len() == 1 { "" } else { "s" }
        )));
    }
    Ok(out
        .into_iter()
        .zip(params)
        .map(|(v, p)| v.or_else(|| p.1.clone()).unwrap_or(Value::Null))
        .collect())
}

/// `strutils.is_int_like`.
pub fn is_int_like(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|_| !s.trim().starts_with('+')),
        _ => None,
    }
}

/// `uuidutils.is_uuid_like`.
pub fn is_uuid_like(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| uuid::Uuid::try_parse(s.trim()).is_ok())
}

/// `exception.InvalidIdentity(identity=...)`.
pub fn invalid_identity(v: &Value) -> RemoteFailure {
    let mut kw = Map::new();
    kw.insert(
        "identity".into(),
        json!(
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        ),
    );
    RemoteFailure::magnum("InvalidIdentity", kw)
}

/// A Magnum exception with kwargs.
pub fn magnum(class: &str, kw: &[(&str, Value)]) -> RemoteFailure {
    let mut m = Map::new();
    for (k, v) in kw {
        m.insert((*k).into(), v.clone());
    }
    RemoteFailure::magnum(class, m)
}

/// `AttributeError`, as Python words a missing method.
pub fn no_attribute(owner: &str, name: &str, on_class: bool) -> RemoteFailure {
    let m = if on_class {
        format!("type object '{owner}' has no attribute '{name}'")
    } else {
        format!("'{owner}' object has no attribute '{name}'")
    };
    RemoteFailure::builtin("AttributeError", &m)
}

/// The version of `class` the caller asked for in `object_versions`:
/// `Err(IncompatibleObjectVersion)` when newer than ours.
pub fn target_minor(
    class: &'static ovo::ClassSpec,
    versions: &Map<String, Value>,
) -> Result<u32, RemoteFailure> {
    let Some(v) = versions.get(class.name).and_then(Value::as_str) else {
        return Ok(class.minor);
    };
    let parsed = v.split_once('.').and_then(|(a, b)| {
        Some((
            a.parse::<u32>().ok()?,
            b.split('.').next()?.parse::<u32>().ok()?,
        ))
    });
    match parsed {
        Some((major, minor)) if major == class.major && minor <= class.minor => Ok(minor),
        _ => Err(ovo::ObjectError::IncompatibleVersion {
            name: class.name.into(),
            version: v.into(),
            supported: class.version(),
        }
        .to_failure()),
    }
}

/// An object as the caller can read it (`object_versions`).
pub fn encode(obj: &MagnumObject, versions: &Map<String, Value>) -> Result<Value, RemoteFailure> {
    Ok(obj.to_primitive_at(target_minor(obj.class, versions)?))
}

/// oslo.db's check of a sort direction (`ValueError`).
pub fn check_sort_dir(dir: &Value) -> Result<Option<String>, RemoteFailure> {
    let Some(d) = dir.as_str() else {
        return if dir.is_null() {
            Ok(None)
        } else {
            Err(RemoteFailure::builtin(
                "AttributeError",
                &format!("'{}' object has no attribute 'partition'", py_type(dir)),
            ))
        };
    };
    let (main, nulls) = d.split_once('-').unwrap_or((d, ""));
    if matches!(main, "asc" | "desc") && matches!(nulls, "" | "nullsfirst" | "nullslast") {
        Ok(Some(d.to_string()))
    } else {
        Err(RemoteFailure::builtin(
            "ValueError",
            "Unknown sort direction, must be one of: asc-nullsfirst, asc-nullslast, desc-nullsfirst, desc-nullslast",
        ))
    }
}

fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// The page of a `list(limit, marker, sort_key, sort_dir)` call.
pub fn page(
    limit: &Value,
    marker: &Value,
    sort_key: &Value,
    sort_dir: &Value,
) -> Result<Page, RemoteFailure> {
    let marker = if marker.is_null() {
        None
    } else if ovo::is_primitive(marker) {
        let m = MagnumObject::from_primitive(marker).map_err(|e| e.to_failure())?;
        Some(m.data)
    } else {
        return Err(RemoteFailure::builtin(
            "AttributeError",
            &format!("'{}' object has no attribute 'id'", py_type(marker)),
        ));
    };
    Ok(Page {
        limit: is_int_like(limit),
        sort_key: sort_key.as_str().map(str::to_string),
        sort_dir: check_sort_dir(sort_dir)?,
        marker,
    })
}

/// A filter value for a column's equality (JSON columns compare as
/// Magnum's encoded text).
fn filter_value(
    table: &Table,
    schema: &common::db::SchemaInfo,
    col: &str,
    v: &Value,
) -> Option<SqlValue> {
    let c = table.column(schema, col)?;
    model::bind_value(table, &c, v).ok()
}

/// Magnum's `_add_<table>_filters` for the tables that have them.
pub fn filters(
    table: &'static Table,
    schema: &common::db::SchemaInfo,
    filters: &Value,
) -> Result<Vec<Cond>, RemoteFailure> {
    let Some(f) = filters.as_object() else {
        return if filters.is_null() {
            Ok(Vec::new())
        } else {
            Err(RemoteFailure::builtin(
                "TypeError",
                &format!("'{}' object is not iterable", py_type(filters)),
            ))
        };
    };
    let (equal, status): (&[&str], bool) = match table.name {
        "cluster" => (
            &[
                "cluster_template_id",
                "name",
                "stack_id",
                "api_address",
                "node_addresses",
                "project_id",
                "user_id",
            ],
            true,
        ),
        "cluster_template" => (
            &[
                "name",
                "image_id",
                "flavor_id",
                "master_flavor_id",
                "keypair_id",
                "external_network_id",
                "dns_nameserver",
                "project_id",
                "user_id",
                "labels",
            ],
            false,
        ),
        "nodegroup" => (
            &["name", "node_count", "node_addresses", "role", "is_default"],
            true,
        ),
        "x509keypair" => (&["project_id", "user_id"], false),
        "quotas" => (&["resource", "project_id"], false),
        "federation" => (
            &[
                "name",
                "project_id",
                "hostcluster_id",
                "member_ids",
                "properties",
            ],
            true,
        ),
        _ => (&[], false),
    };
    let mut out = Vec::new();
    for name in equal {
        if let Some(v) = f.get(*name) {
            match filter_value(table, schema, name, v) {
                Some(sv) => out.push(Cond::Eq((*name).into(), sv)),
                // A value the column cannot hold matches nothing.
                None => out.push(Cond::In((*name).into(), Vec::new())),
            }
        }
    }
    if status && let Some(s) = f.get("status") {
        let values = match s {
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    SqlValue::Str(
                        x.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| x.to_string()),
                    )
                })
                .collect(),
            // `status IN ('ABC')` iterates a string's characters in Python.
            Value::String(s) => s.chars().map(|c| SqlValue::Str(c.to_string())).collect(),
            _ => Vec::new(),
        };
        out.push(Cond::In("status".into(), values));
    }
    if table.name == "cluster" {
        for (key, master) in [("node_count", false), ("master_count", true)] {
            if let Some(n) = f.get(key) {
                out.push(Cond::NodeCount {
                    master,
                    count: is_int_like(n).unwrap_or(-1),
                });
            }
        }
    }
    Ok(out)
}

/// `object_action`'s update dict: each field now set that was unset or
/// differs from `before`, as its primitive, plus `obj_what_changed`.
pub fn updates(before: &MagnumObject, after: &MagnumObject, changed: &[String]) -> Value {
    let mut out = Map::new();
    for f in after.class.fields {
        let Some(now) = after.get(f.name) else {
            continue;
        };
        if before.get(f.name) != Some(now) {
            out.insert(f.name.into(), now.clone());
        }
    }
    let mut what: Vec<String> = changed.to_vec();
    what.sort();
    what.dedup();
    out.insert("obj_what_changed".into(), json!(what));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(names: &[(&'static str, bool)]) -> Vec<Param> {
        names
            .iter()
            .map(|(n, required)| (*n, if *required { None } else { Some(Value::Null) }))
            .collect()
    }

    #[test]
    fn python_call_binding() {
        let list = p(&[
            ("limit", false),
            ("marker", false),
            ("sort_key", false),
            ("sort_dir", false),
            ("filters", false),
        ]);
        let mut kw = Map::new();
        kw.insert("sort_key".into(), json!("name"));
        let b = bind("Cluster.list", &list, &[json!(5)], &kw).unwrap();
        assert_eq!(
            b,
            vec![
                json!(5),
                Value::Null,
                json!("name"),
                Value::Null,
                Value::Null
            ]
        );
        let mut bad = Map::new();
        bad.insert("colour".into(), json!(1));
        assert_eq!(
            bind("Cluster.list", &list, &[], &bad).unwrap_err().message,
            "Cluster.list() got an unexpected keyword argument 'colour'"
        );
        let get = p(&[("cluster", true), ("uuid", true)]);
        let e = bind("NodeGroup.get_by_uuid", &get, &[], &Map::new()).unwrap_err();
        assert_eq!(e.class, "TypeError");
        assert_eq!(
            e.message,
            "NodeGroup.get_by_uuid() missing 2 required positional arguments: 'cluster' and 'uuid'"
        );
        let mut dup = Map::new();
        dup.insert("cluster".into(), json!("x"));
        assert!(
            bind(
                "NodeGroup.get_by_uuid",
                &get,
                &[json!("a"), json!("b")],
                &dup
            )
            .unwrap_err()
            .message
            .contains("multiple values for argument 'cluster'")
        );
    }

    #[test]
    fn versions_and_sorting() {
        let mut v = Map::new();
        v.insert("Cluster".into(), json!("1.23"));
        assert_eq!(target_minor(&ovo::CLUSTER, &v).unwrap(), 23);
        v.insert("Cluster".into(), json!("1.99"));
        let e = target_minor(&ovo::CLUSTER, &v).unwrap_err();
        assert_eq!(e.class, "IncompatibleObjectVersion");
        assert_eq!(
            check_sort_dir(&json!("desc")).unwrap().as_deref(),
            Some("desc")
        );
        assert!(check_sort_dir(&json!("asc-nullslast")).is_ok());
        let e = check_sort_dir(&json!("up")).unwrap_err();
        assert_eq!(
            (e.class.as_str(), e.module.as_str()),
            ("ValueError", "builtins")
        );
        assert_eq!(is_int_like(&json!("42")), Some(42));
        assert_eq!(is_int_like(&json!("4a")), None);
        assert!(is_uuid_like(&json!("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e")));
    }

    #[test]
    fn update_dicts() {
        let mut before = MagnumObject::new(&ovo::CLUSTER);
        before.set("name", json!("a")).unwrap();
        let mut after = before.clone();
        after.set("id", json!(7)).unwrap();
        after.set("name", json!("a")).unwrap();
        after.set("status", json!("CREATE_IN_PROGRESS")).unwrap();
        let u = updates(&before, &after, &[]);
        assert_eq!(
            u,
            json!({"id": 7, "status": "CREATE_IN_PROGRESS", "obj_what_changed": []})
        );
    }
}

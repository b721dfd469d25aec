//! Structural validation of custom resources against their CRD's
//! openAPIV3Schema, the way the apiserver does it before storing:
//!
//! - unknown fields are pruned (reported as warnings), or refused with 400
//!   under `fieldValidation=Strict`; `x-kubernetes-preserve-unknown-fields`
//!   and `additionalProperties` keep them;
//! - `null` in a non-nullable field is dropped; missing fields with a
//!   `default` get it (before `required` is checked);
//! - type, `x-kubernetes-int-or-string`, enum, required, min/max (length,
//!   items, value) violations answer 422 with one cause per field.
//!
//! - `pattern` and the formats the CRDs use (date-time, uuid, ipv4, byte,
//!   int32) are checked.
//!
//! Not checked (said so in README): CEL rules (`x-kubernetes-validations`),
//! list-type/map-type uniqueness.

use serde_json::{Value, json};

/// `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> Result<FieldValidation, String> {
        match s {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(format!(
                "fieldValidation must be Ignore, Warn or Strict, not {other:?}"
            )),
        }
    }
}

/// One 422 cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub causes: Vec<Cause>,
    /// Paths of unknown fields (pruned unless Strict).
    pub unknown: Vec<String>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..57])
    } else {
        s
    }
}

/// The string formats the CAPI/CAPO/CAAPH CRDs use (unknown formats pass,
/// as in the apiserver).
fn string_format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        "uuid" => s.len() == 36 && uuid::Uuid::try_parse(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "byte" => {
            let t = s.trim_end_matches('=');
            s.len().is_multiple_of(4)
                && s.len() - t.len() <= 2
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        }
        _ => true,
    }
}

/// `pattern` (ECMA/RE2 syntax; compiled once per pattern). A pattern the
/// regex engine cannot compile is not enforced.
fn pattern_matches(pattern: &str, s: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut c = match cache.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let re = c
        .entry(pattern.to_string())
        .or_insert_with(|| regex::Regex::new(pattern).ok());
    re.as_ref().is_none_or(|re| re.is_match(s))
}

fn walk(schema: &Value, v: &mut Value, path: &str, r: &mut Report) {
    let ty = schema.get("type").and_then(Value::as_str);
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let actual = type_name(v);
    let type_ok = if int_or_string {
        matches!(actual, "integer" | "string")
    } else {
        match ty {
            None => true,
            Some("number") => matches!(actual, "integer" | "number"),
            Some(t) => t == actual,
        }
    };
    if !type_ok {
        let want = if int_or_string {
            "integer or string"
        } else {
            ty.unwrap_or("?")
        };
        r.causes.push(Cause {
            reason: "FieldValueInvalid",
            field: path.to_string(),
            message: format!(
                "Invalid value: \"{actual}\": {path} in body must be of type {want}: {}",
                short(v)
            ),
        });
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        let list = options
            .iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        r.causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_string(),
            message: format!("Unsupported value: {}: supported values: {list}", short(v)),
        });
    }
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    let mut bound = |ok: bool, what: String| {
        if !ok {
            r.causes.push(Cause {
                reason: "FieldValueInvalid",
                field: path.to_string(),
                message: format!("Invalid value: {}: {path} in body {what}", short(v)),
            });
        }
    };
    match &*v {
        Value::String(s) => {
            let n = s.chars().count() as f64;
            if let Some(m) = num("maxLength") {
                bound(n <= m, format!("should be at most {m} chars long"));
            }
            if let Some(m) = num("minLength") {
                bound(n >= m, format!("should be at least {m} chars long"));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                bound(pattern_matches(p, s), format!("should match '{p}'"));
            }
            if let Some(f) = schema.get("format").and_then(Value::as_str) {
                bound(string_format_ok(f, s), format!("must be of type {f}"));
            }
        }
        Value::Number(x) => {
            if schema.get("format").and_then(Value::as_str) == Some("int32") {
                let ok = x.as_i64().is_some_and(|i| i32::try_from(i).is_ok());
                bound(ok, "must be of type int32".into());
            }
            let x = x.as_f64().unwrap_or(0.0);
            if let Some(m) = num("maximum") {
                bound(x <= m, format!("should be less than or equal to {m}"));
            }
            if let Some(m) = num("minimum") {
                bound(x >= m, format!("should be greater than or equal to {m}"));
            }
        }
        Value::Array(a) => {
            let n = a.len() as f64;
            if let Some(m) = num("maxItems") {
                bound(n <= m, format!("must have at most {m} items"));
            }
            if let Some(m) = num("minItems") {
                bound(n >= m, format!("should have at least {m} items"));
            }
        }
        _ => {}
    }
    match v {
        Value::Object(map) => {
            let preserve = schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                == Some(true);
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            // Structural defaulting happens before validation.
            if let Some(props) = props {
                for (k, ps) in props {
                    if let Some(d) = ps.get("default")
                        && !map.contains_key(k)
                    {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                for k in req.iter().filter_map(Value::as_str) {
                    if map.get(k).is_none_or(Value::is_null) {
                        r.causes.push(Cause {
                            reason: "FieldValueRequired",
                            field: format!("{path}.{k}"),
                            message: "Required value".into(),
                        });
                    }
                }
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = format!("{path}.{k}");
                let child_schema = props.and_then(|p| p.get(&k)).or(match additional {
                    Some(s @ Value::Object(_)) => Some(s),
                    _ => None,
                });
                let Some(cs) = child_schema else {
                    let allowed = preserve || additional == Some(&Value::Bool(true));
                    if !allowed {
                        r.unknown.push(child_path);
                        map.remove(&k);
                    }
                    continue;
                };
                let nullable = cs.get("nullable").and_then(Value::as_bool) == Some(true);
                if map.get(&k).is_some_and(Value::is_null) && !nullable {
                    map.remove(&k);
                    continue;
                }
                if let Some(child) = map.get_mut(&k)
                    && !child.is_null()
                {
                    walk(cs, child, &child_path, r);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(is, item, &format!("{path}[{i}]"), r);
                }
            }
        }
        _ => {}
    }
}

/// Validate (and prune) a whole object. `metadata`, `apiVersion` and
/// `kind` are the apiserver's business, not the schema's.
pub fn validate(schema: &Value, obj: &mut Value) -> Report {
    let mut r = Report::default();
    let Some(map) = obj.as_object_mut() else {
        r.causes.push(Cause {
            reason: "FieldValueInvalid",
            field: "<root>".into(),
            message: "the object is not a JSON object".into(),
        });
        return r;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&k)) {
            Some(cs) => {
                if map.get(&k).is_some_and(Value::is_null) {
                    map.remove(&k);
                } else if let Some(child) = map.get_mut(&k) {
                    walk(cs, child, &k, &mut r);
                }
            }
            None => {
                if schema
                    .get("x-kubernetes-preserve-unknown-fields")
                    .and_then(Value::as_bool)
                    != Some(true)
                {
                    r.unknown.push(k.clone());
                    map.remove(&k);
                }
            }
        }
    }
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for k in req.iter().filter_map(Value::as_str) {
            if !matches!(k, "apiVersion" | "kind" | "metadata") && !map.contains_key(k) {
                r.causes.push(Cause {
                    reason: "FieldValueRequired",
                    field: k.to_string(),
                    message: "Required value".into(),
                });
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["replicas"], "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "port": {"x-kubernetes-int-or-string": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "items": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
            "opt": {"type": "string"},
            "kind": {"type": "string", "default": "Secret"},
            "when": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "small": {"type": "integer", "format": "int32"}
        }}}})
    }

    #[test]
    fn prunes_and_reports() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "anything": 1},
            "spec": {"replicas": 1, "typo": true, "labels": {"a": "b"}, "free": {"x": {"y": 1}},
                     "items": [{"n": "a", "bad": 1}], "opt": null, "port": "http"}, "extra": 1});
        let r = validate(&schema(), &mut o);
        assert!(r.causes.is_empty(), "{:?}", r.causes);
        assert_eq!(r.unknown, ["spec.typo", "spec.items[0].bad", "extra"]);
        assert!(
            o["spec"].get("typo").is_none()
                && o.get("extra").is_none()
                && o["spec"].get("opt").is_none()
        );
        assert_eq!(o["spec"]["free"]["x"]["y"], 1);
        assert_eq!(o["spec"]["kind"], "Secret", "defaulted");
        assert_eq!(o["metadata"]["anything"], 1);
    }

    #[test]
    fn invalid_values() {
        let mut o =
            json!({"spec": {"replicas": "three", "mode": "c", "port": 1.5, "items": [{}, {}, {}]}});
        let r = validate(&schema(), &mut o);
        let fields: Vec<(&str, &str)> = r
            .causes
            .iter()
            .map(|c| (c.reason, c.field.as_str()))
            .collect();
        assert!(
            fields.contains(&("FieldValueInvalid", "spec.replicas")),
            "{fields:?}"
        );
        assert!(fields.contains(&("FieldValueNotSupported", "spec.mode")));
        assert!(fields.contains(&("FieldValueInvalid", "spec.port")));
        assert!(fields.contains(&("FieldValueInvalid", "spec.items")));
        let mut missing = json!({"spec": {}});
        let r = validate(&schema(), &mut missing);
        assert_eq!(r.causes[0].field, "spec.replicas");
        assert_eq!(r.causes[0].reason, "FieldValueRequired");
        let mut formats = json!({"spec": {"replicas": 1, "when": "yesterday", "id": "nope", "name": "Bad_Name", "small": 4294967296u64}});
        let bad: Vec<String> = validate(&schema(), &mut formats)
            .causes
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(bad, ["spec.when", "spec.id", "spec.name", "spec.small"]);
        let mut good = json!({"spec": {"replicas": 1, "when": "2026-11-22T06:00:00Z", "id": "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", "name": "ok-name", "small": 7}});
        assert!(validate(&schema(), &mut good).causes.is_empty());
        let mut neg = json!({"spec": {"replicas": -1}});
        assert_eq!(validate(&schema(), &mut neg).causes.len(), 1);
    }
}

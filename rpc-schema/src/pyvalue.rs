//! How Python renders JSON-decoded values with `str()` and `%` formatting.
//!
//! OVO string fields coerce any value with `str()` (a boolean label becomes
//! `"True"`), and Magnum exception messages are `template % kwargs`. Both must
//! produce what Python produces, or the API shows different text.

use serde_json::{Map, Value};

/// Python's `str(value)` for a value decoded from JSON.
pub fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

/// Python's `repr(value)` for a value decoded from JSON.
pub fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".to_string(),
        Value::Bool(true) => "True".to_string(),
        Value::Bool(false) => "False".to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => repr_str(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", repr_str(k), py_repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

fn repr_str(s: &str) -> String {
    // Python prefers single quotes unless the string contains one and no double quote.
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `template % kwargs` for `%(name)s`, `%(name)d`, `%(name)r` and `%%`.
/// Returns `None` when Python would raise (missing key, unknown conversion),
/// in which case Magnum keeps the template unformatted.
pub fn percent_format(template: &str, kwargs: &Map<String, Value>) -> Option<String> {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(pos) = rest.find('%') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('%') {
            out.push('%');
            rest = stripped;
            continue;
        }
        let key_part = after.strip_prefix('(')?;
        let close = key_part.find(')')?;
        let key = &key_part[..close];
        let mut spec = key_part[close + 1..].chars();
        let conv = spec.next()?;
        let value = kwargs.get(key)?;
        match conv {
            's' => out.push_str(&py_str(value)),
            'r' => out.push_str(&py_repr(value)),
            'd' | 'i' => match value {
                Value::Number(n) if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
                Value::Number(n) => out.push_str(&format!("{}", n.as_f64()?.trunc() as i64)),
                Value::Bool(b) => out.push_str(if *b { "1" } else { "0" }),
                _ => return None,
            },
            _ => return None,
        }
        rest = spec.as_str();
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn str_and_repr_like_python() {
        assert_eq!(py_str(&json!(true)), "True");
        assert_eq!(py_str(&json!(20)), "20");
        assert_eq!(py_str(&json!(null)), "None");
        assert_eq!(
            py_str(&json!(["a", 1, {"k": false}])),
            "['a', 1, {'k': False}]"
        );
        assert_eq!(py_repr(&json!("it's")), "\"it's\"");
    }

    #[test]
    fn percent_format_like_python() {
        let kw = json!({"operation": "Scaling", "n": 3, "code": 400})
            .as_object()
            .cloned()
            .unwrap();
        assert_eq!(
            percent_format("%(operation)s is not supported.", &kw).unwrap(),
            "Scaling is not supported."
        );
        assert_eq!(percent_format("%(n)d%% done", &kw).unwrap(), "3% done");
        assert_eq!(percent_format("%(missing)s", &kw), None);
        assert_eq!(percent_format("on %{action}s", &kw), None);
        assert_eq!(percent_format("no params", &kw).unwrap(), "no params");
    }
}

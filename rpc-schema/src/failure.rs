//! Exceptions as they cross the wire: the `failure` string of a reply.
//!
//! oslo.messaging serializes a server-side exception as a JSON *string* of
//! `{class, module, message, tb, args, kwargs}`; the Python client re-raises
//! it as that class when the module is `builtins` or one it allows (Magnum
//! allows only `magnum.common.exception`), else as `RemoteError`. Magnum
//! exceptions carry one positional arg (the final message) and their format
//! parameters plus `code` in kwargs.

use serde_json::{Map, Value, json};

use crate::magnum_exceptions::MAGNUM_EXCEPTIONS;
use crate::pyjson;
use crate::pyvalue::percent_format;

/// The module Magnum's exceptions live in (the only one magnum-api allows).
pub const MAGNUM_MODULE: &str = "magnum.common.exception";
/// The module of oslo.messaging's dispatcher errors (magnum-api sees RemoteError).
pub const DISPATCHER_MODULE: &str = "oslo_messaging.rpc.dispatcher";
/// The module of oslo.versionedobjects errors.
pub const OVO_MODULE: &str = "oslo_versionedobjects.exception";
/// Python built-in exceptions.
pub const BUILTINS: &str = "builtins";

/// An exception to be serialized into a reply's `failure` field.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteFailure {
    pub class: String,
    pub module: String,
    pub message: String,
    pub args: Vec<Value>,
    /// Boxed to keep `Result<_, RemoteFailure>` small.
    pub kwargs: Box<Map<String, Value>>,
}

/// Look up a Magnum exception class: (code, template).
pub fn magnum_exception(class: &str) -> Option<(u16, &'static str)> {
    MAGNUM_EXCEPTIONS
        .binary_search_by(|(name, _, _)| (*name).cmp(class))
        .ok()
        .map(|i| (MAGNUM_EXCEPTIONS[i].1, MAGNUM_EXCEPTIONS[i].2))
}

impl RemoteFailure {
    /// A `magnum.common.exception.<class>` built like `Class(**kwargs)`:
    /// the message is the class template formatted with kwargs, `code` is
    /// added to kwargs. An unknown class becomes `MagnumException` (500).
    pub fn magnum(class: &str, kwargs: Map<String, Value>) -> RemoteFailure {
        Self::magnum_inner(class, None, kwargs)
    }

    /// Like [`RemoteFailure::magnum`] with an explicit message, as in
    /// `Class(message, **kwargs)`.
    pub fn magnum_with_message(
        class: &str,
        message: &str,
        kwargs: Map<String, Value>,
    ) -> RemoteFailure {
        Self::magnum_inner(class, Some(message), kwargs)
    }

    fn magnum_inner(
        class: &str,
        message: Option<&str>,
        mut kwargs: Map<String, Value>,
    ) -> RemoteFailure {
        let (class, code, template) = match magnum_exception(class) {
            Some((code, template)) => (class, code, template),
            None => ("MagnumException", 500, "An unknown exception occurred."),
        };
        if !kwargs.contains_key("code") {
            kwargs.insert("code".to_string(), json!(code));
        }
        let raw = message.unwrap_or(template);
        let message = percent_format(raw, &kwargs).unwrap_or_else(|| raw.to_string());
        RemoteFailure {
            class: class.to_string(),
            module: MAGNUM_MODULE.to_string(),
            args: vec![Value::String(message.clone())],
            message,
            kwargs: Box::new(kwargs),
        }
    }

    /// `NotSupported(operation=...)`: "<operation> is not supported." (400).
    pub fn not_supported(operation: &str) -> RemoteFailure {
        let mut kw = Map::new();
        kw.insert("operation".into(), json!(operation));
        Self::magnum("NotSupported", kw)
    }

    /// `InvalidParameterValue(err=...)` (400).
    pub fn invalid_parameter(err: &str) -> RemoteFailure {
        let mut kw = Map::new();
        kw.insert("err".into(), json!(err));
        Self::magnum("InvalidParameterValue", kw)
    }

    /// A Python built-in exception such as `TypeError` or `NotImplementedError`.
    pub fn builtin(class: &str, message: &str) -> RemoteFailure {
        RemoteFailure {
            class: class.to_string(),
            module: BUILTINS.to_string(),
            message: message.to_string(),
            args: vec![Value::String(message.to_string())],
            kwargs: Box::default(),
        }
    }

    /// oslo's `NoSuchMethod(method)`.
    pub fn no_such_method(method: &str) -> RemoteFailure {
        let message = format!("Endpoint does not support RPC method {method}");
        RemoteFailure {
            class: "NoSuchMethod".into(),
            module: DISPATCHER_MODULE.into(),
            args: vec![Value::String(message.clone())],
            message,
            kwargs: Box::default(),
        }
    }

    /// oslo's `UnsupportedVersion(version, method=method)`.
    pub fn unsupported_version(version: &str, method: Option<&str>) -> RemoteFailure {
        let mut message = format!("Endpoint does not support RPC version {version}");
        if let Some(m) = method.filter(|m| !m.is_empty()) {
            message.push_str(&format!(". Attempted method: {m}"));
        }
        RemoteFailure {
            class: "UnsupportedVersion".into(),
            module: DISPATCHER_MODULE.into(),
            args: vec![Value::String(message.clone())],
            message,
            kwargs: Box::default(),
        }
    }

    /// An oslo.versionedobjects exception (`UnsupportedObjectError`,
    /// `IncompatibleObjectVersion`, ...), which the client sees as RemoteError.
    pub fn ovo(class: &str, message: String, kwargs: Map<String, Value>) -> RemoteFailure {
        RemoteFailure {
            class: class.into(),
            module: OVO_MODULE.into(),
            args: vec![Value::String(message.clone())],
            message,
            kwargs: Box::new(kwargs),
        }
    }

    /// The HTTP code magnum-api would answer with for this failure.
    pub fn http_code(&self) -> u16 {
        if self.module == MAGNUM_MODULE {
            return self
                .kwargs
                .get("code")
                .and_then(Value::as_u64)
                .map(|c| c as u16)
                .unwrap_or(500);
        }
        500
    }

    /// The traceback lines sent as `tb`. There is no Python traceback; the
    /// first line keeps magnum-api's `NoExceptionTracebackHook` cutting the
    /// faultstring where it would cut a Python one.
    fn traceback(&self) -> Vec<Value> {
        let qualified = if self.module == BUILTINS {
            self.class.clone()
        } else {
            format!("{}.{}", self.module, self.class)
        };
        vec![
            json!("Traceback (most recent call last):\n"),
            json!("  (raised by the Rust magnum-conductor)\n"),
            json!(format!("{}: {}\n", qualified, self.message)),
        ]
    }

    /// The JSON string that goes into a reply's `failure` field, with keys in
    /// the order `serialize_remote_exception` writes them.
    pub fn to_failure_string(&self) -> String {
        let mut m = Map::new();
        m.insert("class".into(), json!(self.class));
        m.insert("module".into(), json!(self.module));
        m.insert("message".into(), json!(self.message));
        m.insert("tb".into(), Value::Array(self.traceback()));
        m.insert("args".into(), Value::Array(self.args.clone()));
        m.insert("kwargs".into(), Value::Object((*self.kwargs).clone()));
        pyjson::to_string(&m)
    }

    /// Parse a failure string back (used by tests and the replay tooling).
    pub fn from_failure_string(s: &str) -> Option<RemoteFailure> {
        let v: Value = serde_json::from_str(s).ok()?;
        let o = v.as_object()?;
        Some(RemoteFailure {
            class: o.get("class")?.as_str()?.to_string(),
            module: o.get("module")?.as_str()?.to_string(),
            message: o
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            args: o
                .get("args")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            kwargs: Box::new(
                o.get("kwargs")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            ),
        })
    }

    /// A fixed, low-cardinality label for metrics.
    pub fn metric_label(&self) -> String {
        self.class.clone()
    }
}

impl std::fmt::Display for RemoteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}: {}", self.module, self.class, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_binary_search() {
        assert!(MAGNUM_EXCEPTIONS.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(
            magnum_exception("ClusterNotFound"),
            Some((404, "Cluster %(cluster)s could not be found."))
        );
    }

    #[test]
    fn magnum_failure_shape() {
        let f = RemoteFailure::not_supported("Scaling");
        assert_eq!(f.message, "Scaling is not supported.");
        assert_eq!(f.kwargs["code"], 400);
        assert_eq!(f.args, vec![json!("Scaling is not supported.")]);
        let s = f.to_failure_string();
        assert!(s.starts_with(r#"{"class": "NotSupported", "module": "magnum.common.exception", "message": "Scaling is not supported.", "tb": ["#));
        assert!(s.ends_with(r#""args": ["Scaling is not supported."], "kwargs": {"operation": "Scaling", "code": 400}}"#));
        assert_eq!(RemoteFailure::from_failure_string(&s).unwrap(), f);
        assert_eq!(f.http_code(), 400);
    }

    #[test]
    fn unknown_class_degrades_to_magnum_exception() {
        let f = RemoteFailure::magnum("NoSuchClass", Map::new());
        assert_eq!(f.class, "MagnumException");
        assert_eq!(f.http_code(), 500);
    }

    #[test]
    fn dispatcher_errors_match_oslo_text() {
        assert_eq!(
            RemoteFailure::no_such_method("foo").message,
            "Endpoint does not support RPC method foo"
        );
        assert_eq!(
            RemoteFailure::unsupported_version("1.1", Some("ping_conductor")).message,
            "Endpoint does not support RPC version 1.1. Attempted method: ping_conductor"
        );
    }
}

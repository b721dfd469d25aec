//! oslo.versionedobjects primitives of Magnum objects (`magnum_object.*`).
//!
//! A primitive is `{"magnum_object.name", ".namespace", ".version", ".data",
//! ".changes"}`. Decoding checks the name and version against Magnum's
//! registry (any minor up to ours is accepted, as OVO does), coerces every
//! known field the way its OVO field type does (`str()` for strings and
//! label values, `int()` for integers, `bool()` for booleans, ISO 8601 for
//! datetimes), keeps unknown fields aside (a Magnum 21/22 Cluster 1.23 still
//! carries `trust_id`), and drops unknown names from `changes`. Encoding
//! writes only the fields that are set, and omits `changes` when empty.

use serde_json::{Map, Value, json};

use crate::envelope::type_name;
use crate::failure::RemoteFailure;
use crate::pyvalue::py_str;

pub const NAME_KEY: &str = "magnum_object.name";
pub const NAMESPACE_KEY: &str = "magnum_object.namespace";
pub const VERSION_KEY: &str = "magnum_object.version";
pub const DATA_KEY: &str = "magnum_object.data";
pub const CHANGES_KEY: &str = "magnum_object.changes";
/// The OVO project namespace Magnum uses.
pub const NAMESPACE: &str = "magnum";

/// Magnum's `ClusterStatus` enum values.
pub const CLUSTER_STATUS: &[&str] = &[
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "CREATE_COMPLETE",
    "UPDATE_IN_PROGRESS",
    "UPDATE_FAILED",
    "UPDATE_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "DELETE_COMPLETE",
    "RESUME_COMPLETE",
    "RESUME_FAILED",
    "RESTORE_COMPLETE",
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE",
    "SNAPSHOT_COMPLETE",
    "CHECK_COMPLETE",
    "ADOPT_COMPLETE",
];
/// Magnum's `ClusterHealthStatus` enum values.
pub const HEALTH_STATUS: &[&str] = &["HEALTHY", "UNHEALTHY", "UNKNOWN"];
/// Magnum's `FederationStatus` enum values (the first nine cluster statuses).
pub const FEDERATION_STATUS: &[&str] = &[
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "CREATE_COMPLETE",
    "UPDATE_IN_PROGRESS",
    "UPDATE_FAILED",
    "UPDATE_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "DELETE_COMPLETE",
];
/// Magnum's `ClusterType` enum values (template `coe`).
pub const CLUSTER_TYPE: &[&str] = &["kubernetes"];

/// An OVO field type, as far as the wire encoding is concerned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldType {
    Integer,
    Str,
    /// `UUIDField`: any string (OVO only warns on non-UUIDs).
    Uuid,
    Boolean,
    DateTime,
    DictOfStrings,
    ListOfStrings,
    /// Magnum's `ListOfDictsField`: a list of dicts of anything.
    ListOfDicts,
    Enum(&'static [&'static str]),
    Object(&'static str),
}

/// One field of a class.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    pub name: &'static str,
    pub ty: FieldType,
    pub nullable: bool,
    /// The minor version of the class that introduced the field.
    pub since: u32,
}

const fn f(name: &'static str, ty: FieldType, nullable: bool) -> FieldSpec {
    FieldSpec {
        name,
        ty,
        nullable,
        since: 0,
    }
}
const fn fs(name: &'static str, ty: FieldType, nullable: bool, since: u32) -> FieldSpec {
    FieldSpec {
        name,
        ty,
        nullable,
        since,
    }
}

use FieldType::*;

/// A registered object class: its current version and fields.
#[derive(Debug)]
pub struct ClassSpec {
    pub name: &'static str,
    pub major: u32,
    pub minor: u32,
    pub fields: &'static [FieldSpec],
    /// Fields of older versions that this version removed (still accepted).
    pub removed: &'static [&'static str],
}

impl ClassSpec {
    pub fn version(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }
}

const TS: [FieldSpec; 2] = [
    f("created_at", DateTime, true),
    f("updated_at", DateTime, true),
];

/// Cluster 1.24 (Magnum 23); 1.23 (Magnum 21/22) is accepted too.
pub static CLUSTER: ClassSpec = ClassSpec {
    name: "Cluster",
    major: 1,
    minor: 24,
    fields: &[
        f("id", Integer, false),
        f("uuid", Uuid, true),
        f("name", Str, true),
        f("project_id", Str, true),
        f("user_id", Str, true),
        f("cluster_template_id", Str, true),
        fs("keypair", Str, true, 10),
        fs("docker_volume_size", Integer, true, 14),
        fs("labels", DictOfStrings, true, 15),
        fs("master_flavor_id", Str, true, 16),
        fs("flavor_id", Str, true, 17),
        f("stack_id", Str, true),
        f("status", Enum(CLUSTER_STATUS), true),
        f("status_reason", Str, true),
        fs("health_status", Enum(HEALTH_STATUS), true, 18),
        fs("health_status_reason", DictOfStrings, true, 18),
        f("create_timeout", Integer, true),
        f("api_address", Str, true),
        f("discovery_url", Str, true),
        f("ca_cert_ref", Str, true),
        f("magnum_cert_ref", Str, true),
        fs("etcd_ca_cert_ref", Str, true, 23),
        fs("front_proxy_ca_cert_ref", Str, true, 23),
        fs("cluster_template", Object("ClusterTemplate"), false, 8),
        fs("coe_version", Str, true, 7),
        fs("container_version", Str, true, 7),
        fs("fixed_network", Str, true, 21),
        fs("fixed_subnet", Str, true, 21),
        fs("floating_ip_enabled", Boolean, false, 21),
        fs("master_lb_enabled", Boolean, false, 22),
        TS[0],
        TS[1],
    ],
    removed: &[
        "trust_id",
        "trustee_username",
        "trustee_password",
        "trustee_user_id",
    ],
};

pub static CLUSTER_TEMPLATE: ClassSpec = ClassSpec {
    name: "ClusterTemplate",
    major: 1,
    minor: 21,
    fields: &[
        f("id", Integer, false),
        f("uuid", Str, true),
        f("project_id", Str, true),
        f("user_id", Str, true),
        f("name", Str, true),
        f("image_id", Str, true),
        f("flavor_id", Str, true),
        f("master_flavor_id", Str, true),
        f("keypair_id", Str, true),
        f("dns_nameserver", Str, true),
        f("external_network_id", Str, true),
        f("fixed_network", Str, true),
        fs("fixed_subnet", Str, true, 14),
        fs("network_driver", Str, true, 2),
        fs("volume_driver", Str, true, 9),
        f("apiserver_port", Integer, true),
        f("docker_volume_size", Integer, true),
        fs("docker_storage_driver", Str, true, 12),
        f("cluster_distro", Str, true),
        f("coe", Enum(CLUSTER_TYPE), true),
        f("http_proxy", Str, true),
        f("https_proxy", Str, true),
        f("no_proxy", Str, true),
        fs("registry_enabled", Boolean, false, 1),
        fs("labels", DictOfStrings, true, 3),
        fs("tls_disabled", Boolean, false, 6),
        fs("public", Boolean, false, 7),
        fs("server_type", Str, true, 8),
        fs("insecure_registry", Str, true, 11),
        fs("master_lb_enabled", Boolean, false, 13),
        fs("floating_ip_enabled", Boolean, false, 15),
        fs("hidden", Boolean, false, 19),
        fs("tags", Str, true, 20),
        fs("driver", Str, true, 21),
        TS[0],
        TS[1],
    ],
    removed: &[],
};

/// NodeGroup 1.2 (Magnum 23, node_labels/node_taints); 1.1 from 20-22.
pub static NODE_GROUP: ClassSpec = ClassSpec {
    name: "NodeGroup",
    major: 1,
    minor: 2,
    fields: &[
        f("id", Integer, false),
        f("uuid", Uuid, false),
        f("name", Str, false),
        f("cluster_id", Str, false),
        f("project_id", Str, false),
        f("docker_volume_size", Integer, true),
        f("labels", DictOfStrings, true),
        f("flavor_id", Str, true),
        f("image_id", Str, true),
        f("node_addresses", ListOfStrings, true),
        f("node_count", Integer, false),
        f("role", Str, false),
        f("max_node_count", Integer, true),
        f("min_node_count", Integer, false),
        f("is_default", Boolean, false),
        f("stack_id", Str, true),
        f("status", Enum(CLUSTER_STATUS), true),
        f("status_reason", Str, true),
        f("version", Str, true),
        fs("node_labels", DictOfStrings, true, 2),
        fs("node_taints", ListOfDicts, true, 2),
        TS[0],
        TS[1],
    ],
    removed: &[],
};

pub static CERTIFICATE: ClassSpec = ClassSpec {
    name: "Certificate",
    major: 1,
    minor: 2,
    fields: &[
        f("project_id", Str, true),
        f("user_id", Str, true),
        f("cluster_uuid", Str, true),
        f("csr", Str, true),
        f("pem", Str, true),
        fs("ca_cert_type", Str, true, 2),
        TS[0],
        TS[1],
    ],
    removed: &["bay_uuid"],
};

pub static X509_KEY_PAIR: ClassSpec = ClassSpec {
    name: "X509KeyPair",
    major: 1,
    minor: 2,
    fields: &[
        f("id", Integer, false),
        f("uuid", Uuid, true),
        f("certificate", Str, true),
        f("private_key", Str, true),
        fs("intermediates", Str, true, 2),
        f("private_key_passphrase", Str, true),
        f("project_id", Str, true),
        f("user_id", Str, true),
        TS[0],
        TS[1],
    ],
    removed: &["bay_uuid", "name", "ca_cert"],
};

pub static MAGNUM_SERVICE: ClassSpec = ClassSpec {
    name: "MagnumService",
    major: 1,
    minor: 0,
    fields: &[
        f("id", Integer, false),
        f("host", Str, true),
        f("binary", Str, true),
        f("disabled", Boolean, false),
        f("disabled_reason", Str, true),
        f("last_seen_up", DateTime, true),
        f("forced_down", Boolean, false),
        f("report_count", Integer, false),
        TS[0],
        TS[1],
    ],
    removed: &[],
};

pub static FEDERATION: ClassSpec = ClassSpec {
    name: "Federation",
    major: 1,
    minor: 0,
    fields: &[
        f("id", Integer, false),
        f("uuid", Uuid, true),
        f("name", Str, true),
        f("project_id", Str, true),
        f("hostcluster_id", Str, true),
        f("member_ids", ListOfStrings, true),
        f("status", Enum(FEDERATION_STATUS), true),
        f("status_reason", Str, true),
        f("properties", DictOfStrings, true),
        TS[0],
        TS[1],
    ],
    removed: &[],
};

pub static QUOTA: ClassSpec = ClassSpec {
    name: "Quota",
    major: 1,
    minor: 0,
    fields: &[
        f("id", Integer, false),
        f("project_id", Str, false),
        f("resource", Str, false),
        f("hard_limit", Integer, false),
        TS[0],
        TS[1],
    ],
    removed: &[],
};

pub static STATS: ClassSpec = ClassSpec {
    name: "Stats",
    major: 1,
    minor: 0,
    fields: &[f("clusters", Integer, false), f("nodes", Integer, true)],
    removed: &[],
};

/// Every class Magnum registers in its OVO registry.
pub static REGISTRY: &[&ClassSpec] = &[
    &CLUSTER,
    &CLUSTER_TEMPLATE,
    &NODE_GROUP,
    &CERTIFICATE,
    &X509_KEY_PAIR,
    &MAGNUM_SERVICE,
    &FEDERATION,
    &QUOTA,
    &STATS,
];

/// Find a class by its OVO name.
pub fn class(name: &str) -> Option<&'static ClassSpec> {
    REGISTRY.iter().copied().find(|c| c.name == name)
}

/// Is this JSON value an object primitive (the serializer's own test)?
pub fn is_primitive(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.contains_key(NAME_KEY))
}

/// A decoded Magnum object.
#[derive(Debug, Clone, PartialEq)]
pub struct MagnumObject {
    pub class: &'static ClassSpec,
    /// The version it was sent with (`x.y`).
    pub version: (u32, u32),
    /// Set fields, coerced to their canonical JSON form.
    pub data: Map<String, Value>,
    /// Fields not in our class (kept, never re-emitted at our version).
    pub extra: Map<String, Value>,
    /// `changes`, filtered to known fields, in the order received.
    pub changes: Vec<String>,
}

impl PartialEq for ClassSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// Why an object primitive was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObjectError {
    #[error("not an object primitive: {0}")]
    NotAPrimitive(String),
    #[error("Unsupported object type {0}")]
    UnsupportedObject(String),
    #[error("Version {version} of {name} is not supported, supported version is {supported}")]
    IncompatibleVersion {
        name: String,
        version: String,
        supported: String,
    },
    #[error("{class}.{field}: {reason}")]
    BadField {
        class: &'static str,
        field: String,
        reason: String,
    },
    #[error("expected a {expected} object, got {got}")]
    WrongClass {
        expected: &'static str,
        got: &'static str,
    },
}

impl ObjectError {
    /// The failure Python would send back for this decoding error.
    pub fn to_failure(&self) -> RemoteFailure {
        match self {
            ObjectError::UnsupportedObject(name) => {
                let mut kw = Map::new();
                kw.insert("objtype".into(), json!(name));
                RemoteFailure::ovo("UnsupportedObjectError", self.to_string(), kw)
            }
            ObjectError::IncompatibleVersion {
                name,
                version,
                supported,
            } => {
                let mut kw = Map::new();
                kw.insert("objname".into(), json!(name));
                kw.insert("objver".into(), json!(version));
                kw.insert("supported".into(), json!(supported));
                RemoteFailure::ovo("IncompatibleObjectVersion", self.to_string(), kw)
            }
            other => RemoteFailure::invalid_parameter(&other.to_string()),
        }
    }
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    // A third part (`x.y.z`) is truncated, as OVO does.
    if let Some(rev) = it.next() {
        rev.parse::<u32>().ok()?;
    }
    if it.next().is_some() {
        return None;
    }
    Some((major, minor))
}

impl MagnumObject {
    /// A fresh object of `class` at our version, with nothing set.
    pub fn new(class: &'static ClassSpec) -> MagnumObject {
        MagnumObject {
            class,
            version: (class.major, class.minor),
            data: Map::new(),
            extra: Map::new(),
            changes: vec![],
        }
    }

    /// Decode a primitive.
    pub fn from_primitive(v: &Value) -> Result<MagnumObject, ObjectError> {
        let o = v
            .as_object()
            .ok_or_else(|| ObjectError::NotAPrimitive(format!("a {}", type_name(v))))?;
        let name = o.get(NAME_KEY).and_then(Value::as_str).ok_or_else(|| {
            ObjectError::NotAPrimitive(format!("{NAME_KEY} missing or not a string"))
        })?;
        match o.get(NAMESPACE_KEY).and_then(Value::as_str) {
            Some(NAMESPACE) => {}
            _ => return Err(ObjectError::UnsupportedObject(name.to_string())),
        }
        let class = class(name).ok_or_else(|| ObjectError::UnsupportedObject(name.to_string()))?;
        let version_str = o
            .get(VERSION_KEY)
            .and_then(Value::as_str)
            .unwrap_or_default();
        let incompatible = || ObjectError::IncompatibleVersion {
            name: name.to_string(),
            version: version_str.to_string(),
            supported: class.version(),
        };
        let version = parse_version(version_str).ok_or_else(incompatible)?;
        if version.0 != class.major || version.1 > class.minor {
            return Err(incompatible());
        }
        let data_in = match o.get(DATA_KEY) {
            Some(Value::Object(d)) => d,
            _ => {
                return Err(ObjectError::NotAPrimitive(format!(
                    "{DATA_KEY} missing or not an object"
                )));
            }
        };
        let mut obj = MagnumObject {
            class,
            version,
            data: Map::new(),
            extra: Map::new(),
            changes: vec![],
        };
        for (k, val) in data_in {
            match class.field(k) {
                Some(spec) => {
                    let coerced = coerce(class.name, spec, val)?;
                    obj.data.insert(k.clone(), coerced);
                }
                None => {
                    obj.extra.insert(k.clone(), val.clone());
                }
            }
        }
        match o.get(CHANGES_KEY) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for item in items {
                    if let Some(s) = item.as_str()
                        && class.field(s).is_some()
                        && !obj.changes.iter().any(|c| c == s)
                    {
                        obj.changes.push(s.to_string());
                    }
                }
            }
            Some(other) => {
                return Err(ObjectError::NotAPrimitive(format!(
                    "{CHANGES_KEY} is a {}",
                    type_name(other)
                )));
            }
        }
        Ok(obj)
    }

    /// Decode a primitive that must be of class `expected`.
    pub fn from_primitive_of(
        v: &Value,
        expected: &'static ClassSpec,
    ) -> Result<MagnumObject, ObjectError> {
        let obj = Self::from_primitive(v)?;
        if obj.class.name != expected.name {
            return Err(ObjectError::WrongClass {
                expected: expected.name,
                got: obj.class.name,
            });
        }
        Ok(obj)
    }

    /// Encode at our current version.
    pub fn to_primitive(&self) -> Value {
        self.to_primitive_at(self.class.minor)
    }

    /// Encode for a peer that knows `minor` of this class at most: fields
    /// introduced later are left out, as `obj_make_compatible` would.
    pub fn to_primitive_at(&self, minor: u32) -> Value {
        let minor = minor.min(self.class.minor);
        let mut data = Map::new();
        for (k, v) in &self.data {
            let Some(spec) = self.class.field(k) else {
                continue;
            };
            if spec.since > minor {
                continue;
            }
            let v = match (spec.ty, v) {
                (Object(_), inner) if is_primitive(inner) => inner.clone(),
                _ => v.clone(),
            };
            data.insert(k.clone(), v);
        }
        let mut o = Map::new();
        o.insert(NAME_KEY.into(), json!(self.class.name));
        o.insert(NAMESPACE_KEY.into(), json!(NAMESPACE));
        o.insert(
            VERSION_KEY.into(),
            json!(format!("{}.{}", self.class.major, minor)),
        );
        o.insert(DATA_KEY.into(), Value::Object(data));
        let changes: Vec<Value> = self
            .changes
            .iter()
            .filter(|c| self.class.field(c).is_some_and(|s| s.since <= minor))
            .map(|c| json!(c))
            .collect();
        if !changes.is_empty() {
            o.insert(CHANGES_KEY.into(), Value::Array(changes));
        }
        Value::Object(o)
    }

    /// The version of this object's class and of every object nested in it,
    /// by class name (the first seen wins), into `out`.
    pub fn versions_into(&self, out: &mut std::collections::BTreeMap<&'static str, (u32, u32)>) {
        out.entry(self.class.name).or_insert(self.version);
        for v in self.data.values() {
            if is_primitive(v)
                && let Ok(sub) = MagnumObject::from_primitive(v)
            {
                sub.versions_into(out);
            }
        }
    }

    /// Set a field (coerced like OVO's setattr) and mark it changed.
    pub fn set(&mut self, field: &str, value: Value) -> Result<(), ObjectError> {
        let spec = self
            .class
            .field(field)
            .ok_or_else(|| ObjectError::BadField {
                class: self.class.name,
                field: field.to_string(),
                reason: "no such field".into(),
            })?;
        let v = coerce(self.class.name, spec, &value)?;
        self.data.insert(field.to_string(), v);
        if !self.changes.iter().any(|c| c == field) {
            self.changes.push(field.to_string());
        }
        Ok(())
    }

    pub fn is_set(&self, field: &str) -> bool {
        self.data.contains_key(field)
    }
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.data.get(field)
    }
    pub fn get_str(&self, field: &str) -> Option<&str> {
        self.data.get(field).and_then(Value::as_str)
    }
    pub fn get_i64(&self, field: &str) -> Option<i64> {
        self.data.get(field).and_then(Value::as_i64)
    }
    pub fn get_bool(&self, field: &str) -> Option<bool> {
        self.data.get(field).and_then(Value::as_bool)
    }
    /// A nested object field (e.g. a Cluster's loaded `cluster_template`).
    pub fn get_object(&self, field: &str) -> Option<MagnumObject> {
        self.data
            .get(field)
            .and_then(|v| MagnumObject::from_primitive(v).ok())
    }
}

/// Coerce one field value the way its OVO field type would.
pub fn coerce(class: &'static str, spec: &FieldSpec, v: &Value) -> Result<Value, ObjectError> {
    let bad = |reason: String| ObjectError::BadField {
        class,
        field: spec.name.to_string(),
        reason,
    };
    if v.is_null() {
        return if spec.nullable {
            Ok(Value::Null)
        } else {
            Err(bad("cannot be None".into()))
        };
    }
    match spec.ty {
        Integer => coerce_int(v)
            .map(Value::from)
            .ok_or_else(|| bad(format!("not an integer: {v}"))),
        Str | Uuid => match v {
            Value::Object(_) | Value::Array(_) if spec.ty == Uuid => {
                Err(bad(format!("not a UUID: {v}")))
            }
            _ => Ok(Value::String(py_str(v))),
        },
        Boolean => Ok(Value::Bool(match v {
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Null => false,
        })),
        DateTime => match v {
            Value::String(s) => crate::time::normalize_isotime(s)
                .map(Value::String)
                .ok_or_else(|| bad(format!("not an ISO 8601 datetime: {s:?}"))),
            other => Err(bad(format!("not a datetime string: {other}"))),
        },
        DictOfStrings => match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, item) in m {
                    if item.is_null() {
                        return Err(bad(format!("value of key {k:?} cannot be None")));
                    }
                    out.insert(k.clone(), Value::String(py_str(item)));
                }
                Ok(Value::Object(out))
            }
            other => Err(bad(format!(
                "a dict is required, not a {}",
                type_name(other)
            ))),
        },
        ListOfStrings => match v {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    if item.is_null() {
                        return Err(bad("list element cannot be None".into()));
                    }
                    out.push(Value::String(py_str(item)));
                }
                Ok(Value::Array(out))
            }
            other => Err(bad(format!(
                "a list is required, not a {}",
                type_name(other)
            ))),
        },
        ListOfDicts => match v {
            Value::Array(items) if items.iter().all(Value::is_object) => Ok(v.clone()),
            other => Err(bad(format!("a list of dicts is required, got {other}"))),
        },
        Enum(values) => match v {
            Value::String(s) if values.contains(&s.as_str()) => Ok(v.clone()),
            other => Err(bad(format!(
                "value {} is not one of {:?}",
                py_str(other),
                values
            ))),
        },
        Object(expected) => {
            let inner = MagnumObject::from_primitive(v).map_err(|e| bad(e.to_string()))?;
            if inner.class.name != expected {
                return Err(bad(format!(
                    "expected a {expected}, got a {}",
                    inner.class.name
                )));
            }
            Ok(inner.to_primitive_at(inner.version.1))
        }
    }
}

/// Python's `int(value)` for JSON values.
pub fn coerce_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite())
                .map(|f| f.trunc() as i64)
        }),
        Value::Bool(b) => Some(i64::from(*b)),
        Value::String(s) => s.trim().replace('_', "").parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

/// A reply for a caller that sent objects at `versions` (class name ->
/// version, see [`MagnumObject::versions_into`]): each object primitive in
/// `reply` (or in a list of them) of a class the caller knows at an older
/// minor is encoded at that minor, as `obj_to_primitive(target_version)`
/// would for it (fields added since are left out); one of a major it does
/// not know is `IncompatibleObjectVersion`, as oslo.versionedobjects says
/// it. Anything else is returned as it is. A caller knows the versions it
/// sends: Magnum 22.0.0 sends Cluster 1.23 and reads only up to 1.23 (its
/// RPC client's `deserialize_entity` refuses 1.24).
pub fn for_caller(
    reply: Value,
    versions: &std::collections::BTreeMap<&'static str, (u32, u32)>,
) -> Result<Value, ObjectError> {
    match reply {
        Value::Array(items) => items
            .into_iter()
            .map(|i| for_caller(i, versions))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        v if is_primitive(&v) => {
            let obj = MagnumObject::from_primitive(&v)?;
            match versions.get(obj.class.name) {
                Some(&(major, minor)) if major != obj.class.major => {
                    Err(ObjectError::IncompatibleVersion {
                        name: obj.class.name.to_string(),
                        version: format!("{major}.{minor}"),
                        supported: obj.class.version(),
                    })
                }
                Some(&(_, minor)) if minor < obj.class.minor => Ok(obj.to_primitive_at(minor)),
                _ => Ok(v),
            }
        }
        v => Ok(v),
    }
}

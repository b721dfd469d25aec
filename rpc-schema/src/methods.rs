//! The conductor's RPC API: every method magnum-api (20-23) can send,
//! with typed arguments.
//!
//! Argument checking follows Python's call semantics for the handler's
//! signature (an unexpected or missing keyword is a `TypeError` with
//! Python's wording), then each value is decoded: objects through the OVO
//! codec, scalars by type. A value of the wrong type, which Python would
//! only trip over deep inside the handler, is refused up front with
//! `InvalidParameterValue` (HTTP 400), naming the argument.

use serde_json::{Map, Value};

use crate::envelope::type_name;
use crate::failure::RemoteFailure;
use crate::ovo::{self, ClassSpec, MagnumObject, coerce_int};

/// Whether magnum-api sends a method as a cast, a call, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Cast,
    Call,
    Both,
}

/// One method of the conductor API.
#[derive(Debug)]
pub struct MethodSpec {
    pub name: &'static str,
    /// Keyword parameters after `context`: (name, required).
    pub params: &'static [(&'static str, bool)],
    pub usage: Usage,
}

macro_rules! m {
    ($name:literal, [$(($p:literal, $r:literal)),*], $usage:ident) => {
        MethodSpec { name: $name, params: &[$(($p, $r)),*], usage: Usage::$usage }
    };
}

/// Every endpoint method of Magnum 23's conductor, in endpoint order,
/// plus oslo's optional `oslo_rpc_server_ping` (see [`PING_METHOD`]), and
/// `object_backport`, which Magnum 20-22's magnum-api sends (23 replaced
/// it with `object_backport_versions` on both sides).
pub static METHODS: &[MethodSpec] = &[
    m!(
        "object_class_action_versions",
        [
            ("objname", true),
            ("objmethod", true),
            ("object_versions", true),
            ("args", true),
            ("kwargs", true)
        ],
        Call
    ),
    m!(
        "object_action",
        [
            ("objinst", true),
            ("objmethod", true),
            ("args", true),
            ("kwargs", true)
        ],
        Call
    ),
    m!(
        "object_backport_versions",
        [("objinst", true), ("object_versions", true)],
        Call
    ),
    // Magnum 20-22's magnum-api: its `MagnumObjectIndirectionAPI` has no
    // `object_backport_versions`, so oslo.versionedobjects falls back to
    // this one, with the caller's class version (a 22.x API reading a
    // newer object from a 23.x conductor).
    m!(
        "object_backport",
        [("objinst", true), ("target_version", true)],
        Call
    ),
    m!(
        "cluster_create",
        [
            ("cluster", true),
            ("master_count", true),
            ("node_count", true),
            ("create_timeout", true)
        ],
        Both
    ),
    m!(
        "cluster_update",
        [
            ("cluster", true),
            ("node_count", true),
            ("health_status", true),
            ("health_status_reason", true),
            ("rollback", false)
        ],
        Both
    ),
    m!("cluster_delete", [("uuid", true)], Both),
    m!(
        "cluster_resize",
        [
            ("cluster", true),
            ("node_count", true),
            ("nodes_to_remove", true),
            ("nodegroup", true)
        ],
        Both
    ),
    m!(
        "cluster_upgrade",
        [
            ("cluster", true),
            ("cluster_template", true),
            ("max_batch_size", true),
            ("nodegroup", true),
            ("rollback", false)
        ],
        Call
    ),
    m!("ping_conductor", [], Call),
    m!("credential_rotate", [("cluster", true)], Both),
    m!(
        "sign_certificate",
        [("cluster", true), ("certificate", true)],
        Call
    ),
    m!(
        "get_ca_certificate",
        [("cluster", true), ("ca_cert_type", false)],
        Call
    ),
    m!("rotate_ca_certificate", [("cluster", true)], Call),
    m!(
        "federation_create",
        [("federation", true), ("create_timeout", true)],
        Both
    ),
    m!(
        "federation_update",
        [("federation", true), ("rollback", false)],
        Both
    ),
    m!("federation_delete", [("uuid", true)], Both),
    m!(
        "nodegroup_create",
        [("cluster", true), ("nodegroup", true)],
        Both
    ),
    m!(
        "nodegroup_update",
        [("cluster", true), ("nodegroup", true)],
        Both
    ),
    m!(
        "nodegroup_delete",
        [("cluster", true), ("nodegroup", true)],
        Both
    ),
];

/// oslo.messaging's ping endpoint method, present when `rpc_ping_enabled`.
pub const PING_METHOD: &str = "oslo_rpc_server_ping";

/// Find a method by name.
pub fn method(name: &str) -> Option<&'static MethodSpec> {
    METHODS.iter().find(|m| m.name == name)
}

/// A decoded conductor request.
#[derive(Debug, Clone, PartialEq)]
pub enum ConductorRequest {
    ClusterCreate {
        cluster: MagnumObject,
        master_count: i64,
        node_count: i64,
        create_timeout: i64,
    },
    ClusterUpdate {
        cluster: MagnumObject,
        node_count: i64,
        health_status: Option<String>,
        health_status_reason: Option<Map<String, Value>>,
        rollback: bool,
    },
    ClusterDelete {
        uuid: String,
    },
    ClusterResize {
        cluster: MagnumObject,
        node_count: i64,
        nodes_to_remove: Vec<String>,
        nodegroup: MagnumObject,
    },
    ClusterUpgrade {
        cluster: MagnumObject,
        cluster_template: MagnumObject,
        max_batch_size: i64,
        nodegroup: MagnumObject,
        rollback: bool,
    },
    NodegroupCreate {
        cluster: MagnumObject,
        nodegroup: MagnumObject,
    },
    NodegroupUpdate {
        cluster: MagnumObject,
        nodegroup: MagnumObject,
    },
    NodegroupDelete {
        cluster: MagnumObject,
        nodegroup: MagnumObject,
    },
    SignCertificate {
        cluster: MagnumObject,
        certificate: MagnumObject,
    },
    GetCaCertificate {
        cluster: MagnumObject,
        ca_cert_type: Option<String>,
    },
    RotateCaCertificate {
        cluster: MagnumObject,
    },
    CredentialRotate {
        cluster: MagnumObject,
    },
    FederationCreate {
        federation: MagnumObject,
        create_timeout: i64,
    },
    FederationUpdate {
        federation: MagnumObject,
        rollback: bool,
    },
    FederationDelete {
        uuid: String,
    },
    PingConductor,
    /// oslo's `oslo_rpc_server_ping` (any kwargs).
    OsloPing,
    ObjectClassActionVersions {
        objname: String,
        objmethod: String,
        object_versions: Map<String, Value>,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
    },
    ObjectAction {
        objinst: MagnumObject,
        objmethod: String,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
    },
    ObjectBackportVersions {
        objinst: MagnumObject,
        object_versions: Map<String, Value>,
    },
    ObjectBackport {
        objinst: MagnumObject,
        target_version: String,
    },
}

impl ConductorRequest {
    /// The versions of the object classes the caller sent (nested objects
    /// included), by class name: what it can read back in the reply.
    pub fn caller_versions(&self) -> std::collections::BTreeMap<&'static str, (u32, u32)> {
        use ConductorRequest::*;
        let objects: Vec<&MagnumObject> = match self {
            ClusterCreate { cluster, .. }
            | ClusterUpdate { cluster, .. }
            | RotateCaCertificate { cluster }
            | CredentialRotate { cluster }
            | GetCaCertificate { cluster, .. } => vec![cluster],
            ClusterResize {
                cluster, nodegroup, ..
            }
            | NodegroupCreate { cluster, nodegroup }
            | NodegroupUpdate { cluster, nodegroup }
            | NodegroupDelete { cluster, nodegroup } => vec![cluster, nodegroup],
            ClusterUpgrade {
                cluster,
                cluster_template,
                nodegroup,
                ..
            } => vec![cluster, cluster_template, nodegroup],
            SignCertificate {
                cluster,
                certificate,
            } => vec![cluster, certificate],
            FederationCreate { federation, .. } | FederationUpdate { federation, .. } => {
                vec![federation]
            }
            ObjectAction { objinst, .. }
            | ObjectBackportVersions { objinst, .. }
            | ObjectBackport { objinst, .. } => vec![objinst],
            ClusterDelete { .. }
            | FederationDelete { .. }
            | PingConductor
            | OsloPing
            | ObjectClassActionVersions { .. } => vec![],
        };
        let mut out = std::collections::BTreeMap::new();
        for o in objects {
            o.versions_into(&mut out);
        }
        out
    }

    /// The wire method name.
    pub fn method(&self) -> &'static str {
        use ConductorRequest::*;
        match self {
            ClusterCreate { .. } => "cluster_create",
            ClusterUpdate { .. } => "cluster_update",
            ClusterDelete { .. } => "cluster_delete",
            ClusterResize { .. } => "cluster_resize",
            ClusterUpgrade { .. } => "cluster_upgrade",
            NodegroupCreate { .. } => "nodegroup_create",
            NodegroupUpdate { .. } => "nodegroup_update",
            NodegroupDelete { .. } => "nodegroup_delete",
            SignCertificate { .. } => "sign_certificate",
            GetCaCertificate { .. } => "get_ca_certificate",
            RotateCaCertificate { .. } => "rotate_ca_certificate",
            CredentialRotate { .. } => "credential_rotate",
            FederationCreate { .. } => "federation_create",
            FederationUpdate { .. } => "federation_update",
            FederationDelete { .. } => "federation_delete",
            PingConductor => "ping_conductor",
            OsloPing => PING_METHOD,
            ObjectClassActionVersions { .. } => "object_class_action_versions",
            ObjectAction { .. } => "object_action",
            ObjectBackportVersions { .. } => "object_backport_versions",
            ObjectBackport { .. } => "object_backport",
        }
    }

    /// Decode the `args` of `method`. `method` must be a known method (or
    /// the ping method); the dispatcher has checked that.
    pub fn decode(
        method_name: &str,
        args: &Map<String, Value>,
    ) -> Result<ConductorRequest, RemoteFailure> {
        if method_name == PING_METHOD {
            return Ok(ConductorRequest::OsloPing);
        }
        let spec = method(method_name).ok_or_else(|| RemoteFailure::no_such_method(method_name))?;
        check_signature(spec, args)?;
        let a = Args {
            method: spec.name,
            args,
        };
        use ConductorRequest::*;
        Ok(match spec.name {
            "cluster_create" => ClusterCreate {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
                master_count: a.int("master_count")?,
                node_count: a.int("node_count")?,
                create_timeout: a.int("create_timeout")?,
            },
            "cluster_update" => ClusterUpdate {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
                node_count: a.int("node_count")?,
                health_status: a.opt_string("health_status")?,
                health_status_reason: a.opt_dict("health_status_reason")?,
                rollback: a.bool_or("rollback", false),
            },
            "cluster_delete" => ClusterDelete {
                uuid: a.string("uuid")?,
            },
            "cluster_resize" => ClusterResize {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
                node_count: a.int("node_count")?,
                nodes_to_remove: a.string_list("nodes_to_remove")?,
                nodegroup: a.object("nodegroup", &ovo::NODE_GROUP)?,
            },
            "cluster_upgrade" => ClusterUpgrade {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
                cluster_template: a.object("cluster_template", &ovo::CLUSTER_TEMPLATE)?,
                max_batch_size: a.int("max_batch_size")?,
                nodegroup: a.object("nodegroup", &ovo::NODE_GROUP)?,
                rollback: a.bool_or("rollback", false),
            },
            "nodegroup_create" | "nodegroup_update" | "nodegroup_delete" => {
                let cluster = a.object("cluster", &ovo::CLUSTER)?;
                let nodegroup = a.object("nodegroup", &ovo::NODE_GROUP)?;
                match spec.name {
                    "nodegroup_create" => NodegroupCreate { cluster, nodegroup },
                    "nodegroup_update" => NodegroupUpdate { cluster, nodegroup },
                    _ => NodegroupDelete { cluster, nodegroup },
                }
            }
            "sign_certificate" => SignCertificate {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
                certificate: a.object("certificate", &ovo::CERTIFICATE)?,
            },
            "get_ca_certificate" => GetCaCertificate {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
                ca_cert_type: a.opt_string("ca_cert_type")?,
            },
            "rotate_ca_certificate" => RotateCaCertificate {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
            },
            "credential_rotate" => CredentialRotate {
                cluster: a.object("cluster", &ovo::CLUSTER)?,
            },
            "federation_create" => FederationCreate {
                federation: a.object("federation", &ovo::FEDERATION)?,
                create_timeout: a.int("create_timeout")?,
            },
            "federation_update" => FederationUpdate {
                federation: a.object("federation", &ovo::FEDERATION)?,
                rollback: a.bool_or("rollback", false),
            },
            "federation_delete" => FederationDelete {
                uuid: a.string("uuid")?,
            },
            "ping_conductor" => PingConductor,
            "object_class_action_versions" => ObjectClassActionVersions {
                objname: a.string("objname")?,
                objmethod: a.string("objmethod")?,
                object_versions: a.dict("object_versions")?,
                args: a.list("args")?,
                kwargs: a.dict("kwargs")?,
            },
            "object_action" => ObjectAction {
                objinst: a.any_object("objinst")?,
                objmethod: a.string("objmethod")?,
                args: a.list("args")?,
                kwargs: a.dict("kwargs")?,
            },
            "object_backport_versions" => ObjectBackportVersions {
                objinst: a.any_object("objinst")?,
                object_versions: a.dict("object_versions")?,
            },
            "object_backport" => ObjectBackport {
                objinst: a.any_object("objinst")?,
                target_version: a.string("target_version")?,
            },
            other => return Err(RemoteFailure::no_such_method(other)),
        })
    }
}

/// Python's checks when calling `Handler.<method>(context, **args)`.
fn check_signature(spec: &MethodSpec, args: &Map<String, Value>) -> Result<(), RemoteFailure> {
    if let Some(extra) = args
        .keys()
        .find(|k| !spec.params.iter().any(|(p, _)| p == k))
    {
        return Err(RemoteFailure::builtin(
            "TypeError",
            &format!(
                "Handler.{}() got an unexpected keyword argument '{}'",
                spec.name, extra
            ),
        ));
    }
    let missing: Vec<String> = spec
        .params
        .iter()
        .filter(|(p, required)| *required && !args.contains_key(*p))
        .map(|(p, _)| format!("'{p}'"))
        .collect();
    if !missing.is_empty() {
        let list = match missing.len() {
            1 => missing[0].clone(),
            2 => format!("{} and {}", missing[0], missing[1]),
            n => format!("{}, and {}", missing[..n - 1].join(", "), missing[n - 1]),
        };
        let plural = if missing.len() == 1 {
            "argument"
        } else {
            "arguments"
        };
        return Err(RemoteFailure::builtin(
            "TypeError",
            &format!(
                "Handler.{}() missing {} required positional {}: {}",
                spec.name,
                missing.len(),
                plural,
                list
            ),
        ));
    }
    Ok(())
}

struct Args<'a> {
    method: &'static str,
    args: &'a Map<String, Value>,
}

impl Args<'_> {
    fn bad(&self, name: &str, what: &str, got: &Value) -> RemoteFailure {
        RemoteFailure::invalid_parameter(&format!(
            "{}: argument {name} must be {what}, got {}",
            self.method,
            type_name(got)
        ))
    }
    fn get(&self, name: &str) -> &Value {
        self.args.get(name).unwrap_or(&Value::Null)
    }
    fn object(&self, name: &str, class: &'static ClassSpec) -> Result<MagnumObject, RemoteFailure> {
        let v = self.get(name);
        if !ovo::is_primitive(v) {
            return Err(self.bad(name, &format!("a {} object", class.name), v));
        }
        MagnumObject::from_primitive_of(v, class).map_err(|e| e.to_failure())
    }
    fn any_object(&self, name: &str) -> Result<MagnumObject, RemoteFailure> {
        let v = self.get(name);
        if !ovo::is_primitive(v) {
            return Err(self.bad(name, "a Magnum object", v));
        }
        MagnumObject::from_primitive(v).map_err(|e| e.to_failure())
    }
    fn int(&self, name: &str) -> Result<i64, RemoteFailure> {
        let v = self.get(name);
        match v {
            Value::Number(_) | Value::Bool(_) => {
                coerce_int(v).ok_or_else(|| self.bad(name, "an integer", v))
            }
            _ => Err(self.bad(name, "an integer", v)),
        }
    }
    fn string(&self, name: &str) -> Result<String, RemoteFailure> {
        match self.get(name) {
            Value::String(s) => Ok(s.clone()),
            other => Err(self.bad(name, "a string", other)),
        }
    }
    fn opt_string(&self, name: &str) -> Result<Option<String>, RemoteFailure> {
        match self.get(name) {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            other => Err(self.bad(name, "a string or null", other)),
        }
    }
    fn opt_dict(&self, name: &str) -> Result<Option<Map<String, Value>>, RemoteFailure> {
        match self.get(name) {
            Value::Null => Ok(None),
            Value::Object(m) => Ok(Some(m.clone())),
            other => Err(self.bad(name, "an object or null", other)),
        }
    }
    fn dict(&self, name: &str) -> Result<Map<String, Value>, RemoteFailure> {
        match self.get(name) {
            Value::Object(m) => Ok(m.clone()),
            other => Err(self.bad(name, "an object", other)),
        }
    }
    fn list(&self, name: &str) -> Result<Vec<Value>, RemoteFailure> {
        match self.get(name) {
            Value::Array(items) => Ok(items.clone()),
            other => Err(self.bad(name, "a list", other)),
        }
    }
    fn string_list(&self, name: &str) -> Result<Vec<String>, RemoteFailure> {
        match self.get(name) {
            Value::Null => Ok(vec![]),
            Value::Array(items) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| self.bad(name, "a list of strings", i))
                })
                .collect(),
            other => Err(self.bad(name, "a list of strings", other)),
        }
    }
    fn bool_or(&self, name: &str, default: bool) -> bool {
        match self.args.get(name) {
            None | Some(Value::Null) => default,
            Some(Value::Bool(b)) => *b,
            // Python uses the value's truthiness.
            Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(o)) => !o.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, version: &str, data: Value) -> Value {
        json!({"magnum_object.name": name, "magnum_object.namespace": "magnum",
               "magnum_object.version": version, "magnum_object.data": data})
    }

    #[test]
    fn twenty_methods_with_ping() {
        // Magnum 23's 19 conductor endpoint methods and oslo's ping are 20;
        // plus `object_backport`, what Magnum 20-22's magnum-api sends.
        assert_eq!(METHODS.len() + 1, 21);
        assert!(METHODS.iter().any(|m| m.name == "object_backport"));
    }

    #[test]
    fn decodes_cluster_create() {
        let args = json!({
            "cluster": obj("Cluster", "1.24", json!({"uuid": "u", "name": "n"})),
            "master_count": 1, "node_count": 2, "create_timeout": 60
        });
        let r = ConductorRequest::decode("cluster_create", args.as_object().unwrap()).unwrap();
        match r {
            ConductorRequest::ClusterCreate {
                cluster,
                master_count,
                node_count,
                create_timeout,
            } => {
                assert_eq!(cluster.get_str("name"), Some("n"));
                assert_eq!((master_count, node_count, create_timeout), (1, 2, 60));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn python_type_errors() {
        let e =
            ConductorRequest::decode("cluster_delete", json!({}).as_object().unwrap()).unwrap_err();
        assert_eq!(e.class, "TypeError");
        assert_eq!(
            e.message,
            "Handler.cluster_delete() missing 1 required positional argument: 'uuid'"
        );
        let e = ConductorRequest::decode(
            "cluster_delete",
            json!({"uuid": "x", "force": true}).as_object().unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Handler.cluster_delete() got an unexpected keyword argument 'force'"
        );
        let e = ConductorRequest::decode(
            "cluster_create",
            json!({"cluster": {}}).as_object().unwrap(),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Handler.cluster_create() missing 3 required positional arguments: 'master_count', 'node_count', and 'create_timeout'"
        );
    }

    #[test]
    fn wrong_types_are_invalid_parameter_values() {
        let args = json!({"cluster": obj("Cluster", "1.24", json!({})), "master_count": "one", "node_count": 1, "create_timeout": 1});
        let e = ConductorRequest::decode("cluster_create", args.as_object().unwrap()).unwrap_err();
        assert_eq!(e.class, "InvalidParameterValue");
        assert!(e.message.contains("master_count"), "{}", e.message);
        let args = json!({"cluster": obj("NodeGroup", "1.2", json!({})), "ca_cert_type": null});
        let e =
            ConductorRequest::decode("get_ca_certificate", args.as_object().unwrap()).unwrap_err();
        assert_eq!(e.class, "InvalidParameterValue");
        let args = json!({"cluster": obj("Cluster", "9.0", json!({}))});
        let e =
            ConductorRequest::decode("credential_rotate", args.as_object().unwrap()).unwrap_err();
        assert_eq!(e.class, "IncompatibleObjectVersion");
        assert_eq!(e.module, "oslo_versionedobjects.exception");
    }

    #[test]
    fn optional_arguments_default() {
        let args = json!({"cluster": obj("Cluster", "1.24", json!({}))});
        let r = ConductorRequest::decode("get_ca_certificate", args.as_object().unwrap()).unwrap();
        assert!(matches!(
            r,
            ConductorRequest::GetCaCertificate {
                ca_cert_type: None,
                ..
            }
        ));
        assert_eq!(
            ConductorRequest::decode(PING_METHOD, &Map::new()).unwrap(),
            ConductorRequest::OsloPing
        );
    }
}

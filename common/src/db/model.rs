//! Rows <-> Magnum objects, as Magnum's SQLAlchemy models and OVO classes do
//! it. Pure: no database here, so every rule is unit-tested.
//!
//! - Columns are the object's fields (minus lazy sub-objects), plus the
//!   legacy trust columns of Magnum <= 22 kept in the object's `extra`.
//! - JSON TEXT columns (`JSONEncodedDict`/`List`): writing None stores `{}` or
//!   `[]`, values are serialized like `jsonutils.dumps` (`", "`/`": "`,
//!   `\uXXXX`); reading NULL gives None, as Python does.
//! - Reading NULL into a non-nullable field gives the OVO default (e.g.
//!   `nodegroup.min_node_count` of the master row), else it is a data error.
//! - Timestamps are naive UTC whole seconds in the row and
//!   `YYYY-MM-DDTHH:MM:SSZ` in the object.

use chrono::{NaiveDateTime, SubsecRound, Utc};
use rpc_schema::ovo::{self, ClassSpec, FieldType, MagnumObject};
use serde_json::{Value, json};

use super::{DbError, SchemaInfo};

/// A value bound to or read from a column.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Str(String),
    Bool(bool),
    Time(NaiveDateTime),
}

/// How a column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    Str,
    Bool,
    Time,
    JsonDict,
    JsonList,
}

/// A model column default (see [`Table::insert_defaults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnDefault {
    Bool(bool),
    Int(i64),
}

impl ColumnDefault {
    pub fn json(self) -> Value {
        match self {
            ColumnDefault::Bool(b) => Value::Bool(b),
            ColumnDefault::Int(i) => Value::from(i),
        }
    }
}

/// One of Magnum's tables and the object class stored in it.
#[derive(Debug)]
pub struct Table {
    pub name: &'static str,
    pub class: &'static ClassSpec,
    /// Object fields that are not columns (lazy-loaded sub-objects).
    pub not_columns: &'static [&'static str],
    /// Columns that exist only in some schema revisions.
    pub optional: &'static [&'static str],
    /// Columns of older schemas with no field in the current object
    /// (strings, kept in `extra` when present).
    pub legacy: &'static [&'static str],
    /// The model's Python-side column defaults (`Column(..., default=)`),
    /// applied when an INSERT omits the column. Every other omitted column
    /// is bound as NULL, as SQLAlchemy's ORM does (its "insert columns as
    /// none" rule), so a database-side DEFAULT such as `server_type`'s
    /// 'vm' never applies to rows Magnum or we create.
    pub insert_defaults: &'static [(&'static str, ColumnDefault)],
    /// The Magnum exception for "no such row" and its kwarg name.
    pub not_found: (&'static str, &'static str),
}

pub static CLUSTER: Table = Table {
    name: "cluster",
    class: &ovo::CLUSTER,
    not_columns: &["cluster_template"],
    optional: &[],
    legacy: &[
        "trust_id",
        "trustee_username",
        "trustee_user_id",
        "trustee_password",
    ],
    insert_defaults: &[
        ("floating_ip_enabled", ColumnDefault::Bool(true)),
        ("master_lb_enabled", ColumnDefault::Bool(false)),
    ],
    not_found: ("ClusterNotFound", "cluster"),
};

pub static NODEGROUP: Table = Table {
    name: "nodegroup",
    class: &ovo::NODE_GROUP,
    not_columns: &[],
    optional: &["node_labels", "node_taints"],
    legacy: &[],
    insert_defaults: &[("is_default", ColumnDefault::Bool(false))],
    not_found: ("NodeGroupNotFound", "nodegroup"),
};

pub static CLUSTER_TEMPLATE: Table = Table {
    name: "cluster_template",
    class: &ovo::CLUSTER_TEMPLATE,
    not_columns: &[],
    optional: &[],
    legacy: &[],
    insert_defaults: &[
        ("registry_enabled", ColumnDefault::Bool(false)),
        ("tls_disabled", ColumnDefault::Bool(false)),
        ("public", ColumnDefault::Bool(false)),
        ("master_lb_enabled", ColumnDefault::Bool(false)),
        ("floating_ip_enabled", ColumnDefault::Bool(true)),
        ("hidden", ColumnDefault::Bool(false)),
    ],
    not_found: ("ClusterTemplateNotFound", "clustertemplate"),
};

pub static X509KEYPAIR: Table = Table {
    name: "x509keypair",
    class: &ovo::X509_KEY_PAIR,
    not_columns: &[],
    optional: &[],
    legacy: &[],
    insert_defaults: &[],
    not_found: ("X509KeyPairNotFound", "x509keypair"),
};

pub static MAGNUM_SERVICE: Table = Table {
    name: "magnum_service",
    class: &ovo::MAGNUM_SERVICE,
    not_columns: &[],
    optional: &[],
    legacy: &[],
    insert_defaults: &[
        ("disabled", ColumnDefault::Bool(false)),
        ("forced_down", ColumnDefault::Bool(false)),
        ("report_count", ColumnDefault::Int(0)),
    ],
    not_found: ("MagnumServiceNotFound", "magnum_service_id"),
};

pub static QUOTA: Table = Table {
    name: "quotas",
    class: &ovo::QUOTA,
    not_columns: &[],
    optional: &[],
    legacy: &[],
    insert_defaults: &[],
    not_found: ("QuotaNotFound", "msg"),
};

pub static FEDERATION: Table = Table {
    name: "federation",
    class: &ovo::FEDERATION,
    not_columns: &[],
    optional: &[],
    legacy: &[],
    insert_defaults: &[],
    not_found: ("FederationNotFound", "federation"),
};

/// A column as present in the connected schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
    /// False for legacy columns (kept in `extra`).
    pub is_field: bool,
}

fn kind_of(ty: FieldType) -> Option<Kind> {
    Some(match ty {
        FieldType::Integer => Kind::Int,
        FieldType::Str | FieldType::Uuid | FieldType::Enum(_) => Kind::Str,
        FieldType::Boolean => Kind::Bool,
        FieldType::DateTime => Kind::Time,
        FieldType::DictOfStrings => Kind::JsonDict,
        FieldType::ListOfStrings | FieldType::ListOfDicts => Kind::JsonList,
        FieldType::Object(_) => return None,
    })
}

impl Table {
    /// The columns this table has in `schema`.
    pub fn columns(&self, schema: &SchemaInfo) -> Vec<Column> {
        let present = |name: &str| match name {
            "node_labels" | "node_taints" => schema.has_node_labels,
            _ => true,
        };
        let mut cols: Vec<Column> = self
            .class
            .fields
            .iter()
            .filter(|f| !self.not_columns.contains(&f.name))
            .filter(|f| !self.optional.contains(&f.name) || present(f.name))
            .filter_map(|f| {
                kind_of(f.ty).map(|kind| Column {
                    name: f.name,
                    kind,
                    is_field: true,
                })
            })
            .collect();
        if self.name == "cluster" && schema.has_trust_columns {
            cols.extend(self.legacy.iter().map(|name| Column {
                name,
                kind: Kind::Str,
                is_field: false,
            }));
        }
        cols
    }

    pub fn column(&self, schema: &SchemaInfo, name: &str) -> Option<Column> {
        self.columns(schema).into_iter().find(|c| c.name == name)
    }

    /// `SELECT` list for this schema.
    pub fn select_list(&self, schema: &SchemaInfo) -> String {
        self.columns(schema)
            .iter()
            .map(|c| format!("`{}`", c.name))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// oslo.versionedobjects fills None in a non-nullable field with its default.
fn ovo_default(class: &str, field: &str) -> Option<Value> {
    Some(match (class, field) {
        ("NodeGroup", "node_count") => json!(1),
        ("NodeGroup", "min_node_count") => json!(0),
        ("NodeGroup", "is_default") => json!(false),
        ("Cluster", "floating_ip_enabled") => json!(true),
        ("Cluster", "master_lb_enabled") => json!(false),
        ("ClusterTemplate", "floating_ip_enabled") => json!(true),
        (
            "ClusterTemplate",
            "registry_enabled" | "tls_disabled" | "public" | "master_lb_enabled" | "hidden",
        ) => json!(false),
        _ => return None,
    })
}

/// `2026-11-22T02:35:37Z`, the object form of a naive-UTC column.
pub fn format_time(t: &NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The object form back to the column (seconds; any offset applied).
pub fn parse_time(s: &str) -> Option<NaiveDateTime> {
    let norm = rpc_schema::time::normalize_isotime(s)?;
    chrono::DateTime::parse_from_rfc3339(&norm)
        .ok()
        .map(|t| t.naive_utc().trunc_subsecs(0))
}

/// `utcnow()` as Magnum stores it: naive UTC, whole seconds.
pub fn utcnow() -> NaiveDateTime {
    Utc::now().naive_utc().trunc_subsecs(0)
}

/// Build the object from a row's values (same order as `cols`).
pub fn object_from_row(
    table: &Table,
    cols: &[Column],
    values: Vec<SqlValue>,
) -> Result<MagnumObject, DbError> {
    let id = values
        .iter()
        .zip(cols)
        .find(|(_, c)| c.name == "id")
        .map(|(v, _)| match v {
            SqlValue::Int(i) => i.to_string(),
            other => format!("{other:?}"),
        })
        .unwrap_or_default();
    let data_err = |column: &'static str, reason: String| DbError::Data {
        table: table.name,
        id: id.clone(),
        column,
        reason,
    };
    let mut obj = MagnumObject::new(table.class);
    for (col, v) in cols.iter().zip(values) {
        let json = match (col.kind, v) {
            (_, SqlValue::Null) => Value::Null,
            (Kind::Int, SqlValue::Int(i)) => json!(i),
            (Kind::Bool, SqlValue::Bool(b)) => json!(b),
            (Kind::Bool, SqlValue::Int(i)) => json!(i != 0),
            (Kind::Str, SqlValue::Str(s)) => Value::String(s),
            (Kind::Time, SqlValue::Time(t)) => Value::String(format_time(&t)),
            (Kind::JsonDict | Kind::JsonList, SqlValue::Str(s)) => {
                let v: Value = serde_json::from_str(&s)
                    .map_err(|e| data_err(col.name, format!("not JSON: {e}")))?;
                let ok = match col.kind {
                    Kind::JsonDict => v.is_object(),
                    _ => v.is_array(),
                };
                if !ok {
                    return Err(data_err(
                        col.name,
                        format!("expected a JSON {:?}", col.kind),
                    ));
                }
                v
            }
            (kind, other) => {
                return Err(data_err(col.name, format!("{other:?} is not a {kind:?}")));
            }
        };
        if !col.is_field {
            obj.extra.insert(col.name.to_string(), json);
            continue;
        }
        let json = match json {
            Value::Null => {
                let nullable = table.class.field(col.name).is_some_and(|f| f.nullable);
                if nullable {
                    Value::Null
                } else {
                    ovo_default(table.class.name, col.name)
                        .ok_or_else(|| data_err(col.name, "NULL in a non-nullable field".into()))?
                }
            }
            v => v,
        };
        obj.set(col.name, json)
            .map_err(|e| data_err(col.name, e.to_string()))?;
    }
    obj.changes.clear();
    Ok(obj)
}

/// The column value for one object field (what SQLAlchemy would bind).
pub fn bind_value(table: &Table, col: &Column, v: &Value) -> Result<SqlValue, DbError> {
    let bad = |reason: String| {
        DbError::magnum(
            "InvalidParameterValue",
            &[(
                "err",
                &format!("{}.{}: {reason}", table.class.name, col.name),
            )],
        )
    };
    Ok(match (col.kind, v) {
        (Kind::JsonDict, Value::Null) => SqlValue::Str("{}".into()),
        (Kind::JsonList, Value::Null) => SqlValue::Str("[]".into()),
        (_, Value::Null) => SqlValue::Null,
        (Kind::Int, v) => {
            SqlValue::Int(ovo::coerce_int(v).ok_or_else(|| bad(format!("{v} is not an integer")))?)
        }
        (Kind::Str, Value::String(s)) => SqlValue::Str(s.clone()),
        (Kind::Str, other) => SqlValue::Str(other.to_string()),
        (Kind::Bool, Value::Bool(b)) => SqlValue::Bool(*b),
        (Kind::Bool, other) => return Err(bad(format!("{other} is not a boolean"))),
        (Kind::Time, Value::String(s)) => {
            SqlValue::Time(parse_time(s).ok_or_else(|| bad(format!("{s:?} is not a datetime")))?)
        }
        (Kind::Time, other) => return Err(bad(format!("{other} is not a datetime"))),
        (Kind::JsonDict, v @ Value::Object(_)) | (Kind::JsonList, v @ Value::Array(_)) => {
            SqlValue::Str(rpc_schema::pyjson::to_string(v))
        }
        (kind, other) => return Err(bad(format!("{other} cannot be stored as {kind:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s23() -> SchemaInfo {
        SchemaInfo {
            revision: "b3e1cf4a2d5e".into(),
            has_trust_columns: false,
            has_node_labels: true,
        }
    }
    fn s22() -> SchemaInfo {
        SchemaInfo {
            revision: "c0f832afc4fd".into(),
            has_trust_columns: true,
            has_node_labels: false,
        }
    }

    #[test]
    fn columns_follow_the_schema() {
        let c23: Vec<_> = CLUSTER.columns(&s23()).iter().map(|c| c.name).collect();
        assert!(!c23.contains(&"cluster_template") && !c23.contains(&"trust_id"));
        assert_eq!(c23.len(), 31, "{c23:?}");
        let c22 = CLUSTER.columns(&s22());
        assert_eq!(c22.len(), 35);
        assert!(
            c22.iter()
                .any(|c| c.name == "trustee_password" && !c.is_field)
        );
        assert_eq!(NODEGROUP.columns(&s23()).len(), 23);
        assert_eq!(NODEGROUP.columns(&s22()).len(), 21);
        assert_eq!(CLUSTER_TEMPLATE.columns(&s23()).len(), 36);
        assert_eq!(X509KEYPAIR.columns(&s23()).len(), 10);
        assert_eq!(MAGNUM_SERVICE.columns(&s23()).len(), 10);
    }

    #[test]
    fn json_columns_encode_like_jsonutils() {
        let col = CLUSTER.column(&s23(), "labels").unwrap();
        let v = json!({"a": "True", "b": "3", "c": "é"});
        assert_eq!(
            bind_value(&CLUSTER, &col, &v).unwrap(),
            SqlValue::Str(r#"{"a": "True", "b": "3", "c": "\u00e9"}"#.into())
        );
        assert_eq!(
            bind_value(&CLUSTER, &col, &Value::Null).unwrap(),
            SqlValue::Str("{}".into())
        );
        let taints = NODEGROUP.column(&s23(), "node_taints").unwrap();
        assert_eq!(
            bind_value(&NODEGROUP, &taints, &Value::Null).unwrap(),
            SqlValue::Str("[]".into())
        );
        assert!(bind_value(&CLUSTER, &col, &json!([1])).is_err());
    }

    #[test]
    fn rows_become_objects() {
        let cols = NODEGROUP.columns(&s23());
        let values: Vec<SqlValue> = cols
            .iter()
            .map(|c| match c.name {
                "id" => SqlValue::Int(7),
                "uuid" => SqlValue::Str("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e".into()),
                "name" => SqlValue::Str("default-master".into()),
                "cluster_id" | "project_id" => SqlValue::Str("x".into()),
                "labels" => SqlValue::Str(r#"{"k": "\u00e9"}"#.into()),
                "node_addresses" => SqlValue::Str("[]".into()),
                "node_count" => SqlValue::Int(3),
                "role" => SqlValue::Str("master".into()),
                "is_default" => SqlValue::Int(1),
                "created_at" => SqlValue::Time(
                    NaiveDateTime::parse_from_str("2026-11-22 02:35:37", "%Y-%m-%d %H:%M:%S")
                        .unwrap(),
                ),
                _ => SqlValue::Null, // min_node_count NULL, node_labels NULL...
            })
            .collect();
        let ng = object_from_row(&NODEGROUP, &cols, values).unwrap();
        assert_eq!(ng.get_i64("min_node_count"), Some(0));
        assert_eq!(ng.get_bool("is_default"), Some(true));
        assert_eq!(ng.get("labels").unwrap(), &json!({"k": "é"}));
        assert_eq!(ng.get("node_labels"), Some(&Value::Null));
        assert_eq!(ng.get_str("created_at"), Some("2026-11-22T02:35:37Z"));
        assert!(ng.changes.is_empty());
    }

    #[test]
    fn bad_rows_are_data_errors() {
        let cols = X509KEYPAIR.columns(&s23());
        let mut values = vec![SqlValue::Null; cols.len()];
        values[0] = SqlValue::Int(1); // id
        object_from_row(&X509KEYPAIR, &cols, values.clone()).unwrap();
        let cols = NODEGROUP.columns(&s23());
        let mut values = vec![SqlValue::Null; cols.len()];
        values[0] = SqlValue::Int(1);
        let e = object_from_row(&NODEGROUP, &cols, values.clone())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column uuid: NULL in a non-nullable field"),
            "{e}"
        );
        for v in &mut values[1..5] {
            *v = SqlValue::Str("x".into()); // uuid, name, cluster_id, project_id
        }
        let labels = cols.iter().position(|c| c.name == "labels").unwrap();
        values[labels] = SqlValue::Str("{not json".into());
        let e = object_from_row(&NODEGROUP, &cols, values)
            .unwrap_err()
            .to_string();
        assert!(e.contains("labels"), "{e}");
    }

    #[test]
    fn times_round_trip() {
        let t = parse_time("2026-11-22T02:35:37.123456+00:00").unwrap();
        assert_eq!(format_time(&t), "2026-11-22T02:35:37Z");
        assert_eq!(
            parse_time("2026-11-22T04:35:37+02:00")
                .map(|t| format_time(&t))
                .as_deref(),
            Some("2026-11-22T02:35:37Z")
        );
    }
}

//! The object-indirection API (`object_class_action_versions`,
//! `object_action`, `object_backport_versions`, and Magnum 20-22's
//! `object_backport`).
//!
//! magnum-api run as its console script (`magnum/cmd/api.py`) sets
//! `MagnumObject.indirection_api`: every remotable method of Magnum's
//! objects it calls (each lookup, list, template CRUD, quota, service list)
//! is sent here instead of touching the database. Each method does what
//! Magnum 23's object and `db/sqlalchemy/api.py` do, with the same tenant
//! filters, pagination, exceptions and even the same bugs where callers can
//! see them (`Cluster.get_stats` counts every project; `Federation.get_count_all`
//! and `Quota.quota_get_all_by_project_id` raise `AttributeError`).
//!
//! Results honour the caller's `object_versions`: a single object is
//! backported as oslo.versionedobjects does, and so is every object of a
//! list (Python sends lists at its own version, which a 22.x magnum-api
//! cannot read).

mod actions;
pub mod call;
mod classes;

use common::db::model::{
    CLUSTER, CLUSTER_TEMPLATE, FEDERATION, MAGNUM_SERVICE, NODEGROUP, QUOTA, SqlValue, Table,
    X509KEYPAIR,
};
use common::db::repo::{self, Cond, Page, Scope};
use common::db::{Db, DbError};
use rpc_schema::ovo::{self, MagnumObject};
use rpc_schema::{Outcome, RemoteFailure, RequestContext};
use serde_json::{Map, Value, json};

use call::{Param, magnum};

/// What a class method returns.
enum Ret {
    Obj(MagnumObject),
    Objs(Vec<MagnumObject>),
    Json(Value),
}

fn db_failure(e: DbError) -> RemoteFailure {
    e.to_failure()
}

const PAGE: [Param; 4] = [
    ("limit", Some(Value::Null)),
    ("marker", Some(Value::Null)),
    ("sort_key", Some(Value::Null)),
    ("sort_dir", Some(Value::Null)),
];

fn params(extra_front: &[Param], page: bool, filters: bool) -> Vec<Param> {
    let mut p: Vec<Param> = extra_front.to_vec();
    if page {
        p.extend(PAGE.iter().cloned());
    }
    if filters {
        p.push(("filters", Some(Value::Null)));
    }
    p
}

fn req(name: &'static str) -> Param {
    (name, None)
}

fn opt(name: &'static str) -> Param {
    (name, Some(Value::Null))
}

fn text(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

/// The table an object class lives in.
fn table_of(class: &str) -> Option<&'static Table> {
    Some(match class {
        "Cluster" => &CLUSTER,
        "ClusterTemplate" => &CLUSTER_TEMPLATE,
        "NodeGroup" => &NODEGROUP,
        "X509KeyPair" => &X509KEYPAIR,
        "MagnumService" => &MAGNUM_SERVICE,
        "Quota" => &QUOTA,
        "Federation" => &FEDERATION,
        _ => return None,
    })
}

/// The "multiple rows with that name" message of each `get_<x>_by_name`.
fn conflict_message(table: &Table) -> &'static str {
    match table.name {
        "cluster" => "Multiple clusters exist with same name. Please use the cluster uuid instead.",
        "cluster_template" => {
            "Multiple ClusterTemplates exist with same name. Please use the ClusterTemplate uuid instead."
        }
        "nodegroup" => {
            "Multiple nodegroups exist with same name. Please use the nodegroup uuid instead."
        }
        _ => "Multiple federations exist with same name. Please use the federation uuid instead.",
    }
}

fn not_found(table: &Table, what: &Value) -> RemoteFailure {
    magnum(table.not_found.0, &[(table.not_found.1, json!(text(what)))])
}

/// The indirection handlers (one per process, cloned).
#[derive(Clone)]
pub struct Indirection {
    db: Db,
}

impl std::fmt::Debug for Indirection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Indirection")
    }
}

impl Indirection {
    pub fn new(db: Db) -> Indirection {
        Indirection { db }
    }

    /// `object_class_action_versions`.
    pub async fn class_action(
        &self,
        ctx: &RequestContext,
        objname: &str,
        objmethod: &str,
        versions: &Map<String, Value>,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Outcome {
        let Some(class) = ovo::class(objname) else {
            return Outcome::Failure(
                ovo::ObjectError::UnsupportedObject(objname.into()).to_failure(),
            );
        };
        if let Err(f) = call::target_minor(class, versions) {
            return Outcome::Failure(f);
        }
        let result = self
            .class_method(ctx, class, objmethod, args, kwargs)
            .await
            .and_then(|r| match r {
                Ret::Obj(o) => call::encode(&o, versions),
                Ret::Objs(os) => os
                    .iter()
                    .map(|o| call::encode(o, versions))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Value::Array),
                Ret::Json(v) => Ok(v),
            });
        match result {
            Ok(v) => Outcome::Result(v),
            Err(f) => Outcome::Failure(f),
        }
    }

    /// `object_backport_versions`: the object at the caller's versions.
    pub fn backport(&self, objinst: &MagnumObject, versions: &Map<String, Value>) -> Outcome {
        match call::encode(objinst, versions) {
            Ok(v) => Outcome::Result(v),
            Err(f) => Outcome::Failure(f),
        }
    }

    /// `object_action`: `[updates, result]`.
    pub async fn object_action(
        &self,
        ctx: &RequestContext,
        objinst: &MagnumObject,
        objmethod: &str,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Outcome {
        match self
            .instance_method(ctx, objinst, objmethod, args, kwargs)
            .await
        {
            Ok((after, changed)) => {
                Outcome::Result(json!([call::updates(objinst, &after, &changed), null]))
            }
            Err(f) => Outcome::Failure(f),
        }
    }

    // ------------------------------------------------------------- lookups

    /// One row by a column, tenant-scoped, else the table's NotFound.
    async fn one(
        &self,
        table: &'static Table,
        scope: Option<&Scope>,
        conds: &[Cond],
        what: &Value,
    ) -> Result<MagnumObject, RemoteFailure> {
        let rows = repo::query(&self.db, table, scope, conds, &Page::default())
            .await
            .map_err(db_failure)?;
        match rows.len() {
            0 => Err(not_found(table, what)),
            1 => Ok(rows
                .into_iter()
                .next()
                .unwrap_or_else(|| MagnumObject::new(table.class))),
            _ => Err(RemoteFailure::magnum_with_message(
                "Conflict",
                conflict_message(table),
                Map::new(),
            )),
        }
    }

    fn eq(col: &str, v: &Value) -> Cond {
        let sv = match v {
            Value::Number(n) => SqlValue::Int(n.as_i64().unwrap_or(-1)),
            Value::Bool(b) => SqlValue::Bool(*b),
            Value::Null => SqlValue::Null,
            other => SqlValue::Str(text(other)),
        };
        Cond::Eq(col.into(), sv)
    }

    fn by_id(id: &Value) -> Cond {
        Cond::Eq(
            "id".into(),
            SqlValue::Int(call::is_int_like(id).unwrap_or(-1)),
        )
    }

    /// `get(<id or uuid>)`, with `by_name` for the classes that fall back to it.
    async fn get_identity(
        &self,
        table: &'static Table,
        scope: Option<&Scope>,
        front: &[Cond],
        ident: &Value,
        by_name: bool,
    ) -> Result<MagnumObject, RemoteFailure> {
        let mut conds = front.to_vec();
        if call::is_int_like(ident).is_some() {
            conds.push(Self::by_id(ident));
        } else if call::is_uuid_like(ident) {
            conds.push(Self::eq("uuid", ident));
        } else if by_name {
            conds.push(Self::eq("name", ident));
        } else {
            return Err(call::invalid_identity(ident));
        }
        self.one(table, scope, &conds, ident).await
    }

    async fn list(
        &self,
        table: &'static Table,
        scope: Option<&Scope>,
        mut conds: Vec<Cond>,
        b: &[Value],
        page_at: usize,
        filters_at: Option<usize>,
    ) -> Result<Ret, RemoteFailure> {
        let page = call::page(
            &b[page_at],
            &b[page_at + 1],
            &b[page_at + 2],
            &b[page_at + 3],
        )?;
        if let Some(i) = filters_at {
            conds.extend(call::filters(table, &self.db.schema, &b[i])?);
        }
        repo::query(&self.db, table, scope, &conds, &page)
            .await
            .map(Ret::Objs)
            .map_err(db_failure)
    }
}

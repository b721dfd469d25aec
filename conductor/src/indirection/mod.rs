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

pub mod call;

use common::db::model::{
    self, CLUSTER, CLUSTER_TEMPLATE, FEDERATION, MAGNUM_SERVICE, NODEGROUP, QUOTA, SqlValue, Table,
    X509KEYPAIR,
};
use common::db::repo::{self, Cond, Page, Scope};
use common::db::{Db, DbError};
use rpc_schema::ovo::{self, MagnumObject};
use rpc_schema::{Outcome, RemoteFailure, RequestContext};
use serde_json::{Map, Value, json};

use call::{Param, bind, magnum};

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

    async fn class_method(
        &self,
        ctx: &RequestContext,
        class: &'static ovo::ClassSpec,
        method: &str,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Result<Ret, RemoteFailure> {
        let scope = Scope::from_context(ctx);
        let name = class.name;
        let qual = format!("{name}.{method}");
        let b = |p: &[Param]| bind(&qual, p, args, kwargs);
        let missing = || call::no_attribute(name, method, true);
        let Some(table) = table_of(name) else {
            // Stats and Certificate.
            return match (name, method) {
                ("Stats", "get_cluster_stats") => {
                    let v = b(&[opt("project_id")])?;
                    let project = v[0].as_str().filter(|s| !s.is_empty());
                    let (clusters, nodes) = repo::cluster_stats(&self.db, project)
                        .await
                        .map_err(db_failure)?;
                    let mut s = MagnumObject::new(&ovo::STATS);
                    s.set("clusters", json!(clusters))
                        .map_err(|e| e.to_failure())?;
                    s.set("nodes", json!(nodes)).map_err(|e| e.to_failure())?;
                    // `cls(clusters=..., nodes=...)`: both stay marked changed.
                    Ok(Ret::Obj(s))
                }
                _ => Err(missing()),
            };
        };
        let tenant = match table.name {
            "magnum_service" | "quotas" => None,
            _ => Some(&scope),
        };
        match (name, method) {
            ("Cluster" | "X509KeyPair" | "Federation", "get") => {
                let v = b(&[req(if name == "Cluster" {
                    "cluster_id"
                } else if name == "Federation" {
                    "federation_id"
                } else {
                    "x509keypair_id"
                })])?;
                self.get_identity(table, tenant, &[], &v[0], false)
                    .await
                    .map(Ret::Obj)
            }
            ("ClusterTemplate", "get") => {
                let v = b(&[req("cluster_template_id")])?;
                self.get_identity(table, tenant, &[], &v[0], true)
                    .await
                    .map(Ret::Obj)
            }
            (_, "get_by_id") if name != "NodeGroup" => {
                let arg = match name {
                    "Cluster" => "cluster_id",
                    "ClusterTemplate" => "cluster_template_id",
                    "X509KeyPair" => "x509keypair_id",
                    "Federation" => "federation_id",
                    "Quota" => "quota_id",
                    _ => return Err(missing()),
                };
                let v = b(&[req(arg)])?;
                if name == "Quota" {
                    let rows = repo::query(
                        &self.db,
                        table,
                        None,
                        &[Self::by_id(&v[0])],
                        &Page::default(),
                    )
                    .await
                    .map_err(db_failure)?;
                    return rows.into_iter().next().map(Ret::Obj).ok_or_else(|| {
                        magnum(
                            "QuotaNotFound",
                            &[("msg", json!(format!("quota id {} .", text(&v[0]))))],
                        )
                    });
                }
                self.one(table, tenant, &[Self::by_id(&v[0])], &v[0])
                    .await
                    .map(Ret::Obj)
            }
            ("Cluster" | "ClusterTemplate" | "X509KeyPair" | "Federation", "get_by_uuid") => {
                let v = b(&[req("uuid")])?;
                self.one(table, tenant, &[Self::eq("uuid", &v[0])], &v[0])
                    .await
                    .map(Ret::Obj)
            }
            ("Cluster" | "ClusterTemplate" | "Federation", "get_by_name") => {
                let v = b(&[req("name")])?;
                self.one(table, tenant, &[Self::eq("name", &v[0])], &v[0])
                    .await
                    .map(Ret::Obj)
            }
            ("Cluster", "get_count_all") => {
                let v = b(&[opt("filters")])?;
                let conds = call::filters(table, &self.db.schema, &v[0])?;
                repo::count(&self.db, table, tenant, &conds)
                    .await
                    .map(|n| Ret::Json(json!(n)))
                    .map_err(db_failure)
            }
            ("Federation", "get_count_all") => {
                b(&[opt("filters")])?;
                Err(RemoteFailure::builtin(
                    "AttributeError",
                    "'Connection' object has no attribute 'get_federation_count_all'",
                ))
            }
            ("Cluster" | "X509KeyPair" | "Federation" | "Quota", "list") => {
                let v = b(&params(&[], true, true))?;
                self.list(table, tenant, Vec::new(), &v, 0, Some(4)).await
            }
            ("ClusterTemplate" | "MagnumService", "list") => {
                let v = b(&params(&[], true, false))?;
                self.list(table, tenant, Vec::new(), &v, 0, None).await
            }
            ("Cluster", "get_stats") => {
                b(&[opt("project_id")])?;
                // Magnum passes project_id as the context: every project counts.
                let (c, n) = repo::cluster_stats(&self.db, None)
                    .await
                    .map_err(db_failure)?;
                Ok(Ret::Json(json!([c, n])))
            }
            ("NodeGroup", "get") => {
                let v = b(&[req("cluster_id"), req("nodegroup_id")])?;
                self.get_identity(table, tenant, &[Self::eq("cluster_id", &v[0])], &v[1], true)
                    .await
                    .map(Ret::Obj)
            }
            ("NodeGroup", "get_by_id" | "get_by_uuid" | "get_by_name") => {
                let last = match method {
                    "get_by_id" => "id_",
                    "get_by_uuid" => "uuid",
                    _ => "name",
                };
                let v = b(&[req("cluster"), req(last)])?;
                let cond = match method {
                    "get_by_id" => Self::by_id(&v[1]),
                    "get_by_uuid" => Self::eq("uuid", &v[1]),
                    _ => Self::eq("name", &v[1]),
                };
                self.one(table, tenant, &[Self::eq("cluster_id", &v[0]), cond], &v[1])
                    .await
                    .map(Ret::Obj)
            }
            ("NodeGroup", "get_count_all") => {
                let v = b(&[req("cluster_id")])?;
                repo::count(&self.db, table, tenant, &[Self::eq("cluster_id", &v[0])])
                    .await
                    .map(|n| Ret::Json(json!(n)))
                    .map_err(db_failure)
            }
            ("NodeGroup", "list") => {
                let v = b(&params(&[req("cluster_id")], true, true))?;
                let front = vec![Self::eq("cluster_id", &v[0])];
                self.list(table, tenant, front, &v, 1, Some(5)).await
            }
            ("NodeGroup", "update_nodegroup") => {
                let v = b(&[req("cluster_id"), req("nodegroup_id"), req("values")])?;
                let current = self
                    .get_identity(table, tenant, &[Self::eq("cluster_id", &v[0])], &v[1], true)
                    .await?;
                let values = v[2].as_object().cloned().unwrap_or_default();
                let mut changes = MagnumObject::new(&ovo::NODE_GROUP);
                for (k, val) in &values {
                    changes.set(k, val.clone()).map_err(|e| e.to_failure())?;
                }
                let uuid = current.get_str("uuid").unwrap_or_default().to_string();
                repo::save(&self.db, table, &uuid, &changes)
                    .await
                    .map(Ret::Obj)
                    .map_err(db_failure)
            }
            ("MagnumService", "get_by_host_and_binary") => {
                let v = b(&[req("host"), req("binary")])?;
                let rows = repo::query(
                    &self.db,
                    table,
                    None,
                    &[Self::eq("host", &v[0]), Self::eq("binary", &v[1])],
                    &Page::default(),
                )
                .await
                .map_err(db_failure)?;
                Ok(match rows.into_iter().next() {
                    Some(o) => Ret::Obj(o),
                    None => Ret::Json(Value::Null),
                })
            }
            ("Quota", "get_quota_by_project_id_resource") => {
                let v = b(&[req("project_id"), req("resource")])?;
                self.quota(&v[0], &v[1]).await.map(Ret::Obj)
            }
            ("Quota", "quota_get_all_by_project_id") => {
                b(&[req("project_id")])?;
                Err(RemoteFailure::builtin(
                    "AttributeError",
                    "'Connection' object has no attribute 'get_quota_by_project_id'",
                ))
            }
            ("Quota", "update_quota") => {
                let v = b(&[req("project_id"), req("quota")])?;
                let values = v[1].as_object().cloned().unwrap_or_default();
                let resource = values
                    .get("resource")
                    .cloned()
                    .ok_or_else(|| RemoteFailure::builtin("KeyError", "'resource'"))?;
                let current = self.quota(&v[0], &resource).await?;
                let mut changes = MagnumObject::new(&ovo::QUOTA);
                for (k, val) in &values {
                    changes.set(k, val.clone()).map_err(|e| e.to_failure())?;
                }
                let id = current.get_i64("id").unwrap_or(-1).to_string();
                repo::save(&self.db, table, &id, &changes)
                    .await
                    .map(Ret::Obj)
                    .map_err(db_failure)
            }
            _ => Err(missing()),
        }
    }

    async fn quota(
        &self,
        project_id: &Value,
        resource: &Value,
    ) -> Result<MagnumObject, RemoteFailure> {
        let rows = repo::query(
            &self.db,
            &QUOTA,
            None,
            &[
                Self::eq("project_id", project_id),
                Self::eq("resource", resource),
            ],
            &Page::default(),
        )
        .await
        .map_err(db_failure)?;
        rows.into_iter().next().ok_or_else(|| {
            magnum(
                "QuotaNotFound",
                &[(
                    "msg",
                    json!(format!(
                        "project_id {} resource {}.",
                        text(project_id),
                        text(resource)
                    )),
                )],
            )
        })
    }

    // -------------------------------------------------------------- actions

    /// Run an instance method; returns the object afterwards and its
    /// changed fields.
    async fn instance_method(
        &self,
        ctx: &RequestContext,
        obj: &MagnumObject,
        method: &str,
        args: &[Value],
        kwargs: &Map<String, Value>,
    ) -> Result<(MagnumObject, Vec<String>), RemoteFailure> {
        let name = obj.class.name;
        let qual = format!("{name}.{method}");
        let missing = || call::no_attribute(name, method, false);
        let Some(table) = table_of(name) else {
            return Err(missing());
        };
        let allowed = match name {
            "MagnumService" => matches!(method, "create" | "destroy" | "save" | "report_state_up"),
            "Quota" => matches!(method, "create" | "delete"),
            _ => matches!(method, "create" | "destroy" | "save" | "refresh"),
        };
        if !allowed {
            return Err(missing());
        }
        bind(&qual, &[], args, kwargs)?;
        let uuid = || obj.get("uuid").cloned().unwrap_or(Value::Null);
        match method {
            "create" => {
                let mut values = MagnumObject::new(obj.class);
                for f in &obj.changes {
                    if let Some(v) = obj.get(f) {
                        values.set(f, v.clone()).map_err(|e| e.to_failure())?;
                    }
                }
                if table.column(&self.db.schema, "uuid").is_some() && !values.is_set("uuid") {
                    values
                        .set("uuid", json!(uuid::Uuid::new_v4().to_string()))
                        .map_err(|e| e.to_failure())?;
                }
                let after = match repo::insert(&self.db, table, &values).await {
                    Ok((id, created_at)) => created_in_memory(table, obj, &values, id, created_at),
                    Err(e @ DbError::Magnum { .. }) if table.name == "magnum_service" => {
                        // A duplicate (host, binary): Magnum returns the existing row.
                        let rows = repo::query(
                            &self.db,
                            table,
                            None,
                            &[
                                Self::eq("host", obj.get("host").unwrap_or(&Value::Null)),
                                Self::eq("binary", obj.get("binary").unwrap_or(&Value::Null)),
                            ],
                            &Page::default(),
                        )
                        .await
                        .map_err(db_failure)?;
                        let row = rows.into_iter().next().ok_or_else(|| db_failure(e))?;
                        let mut after = obj.clone();
                        for f in after.class.fields {
                            if let Some(v) = row.get(f.name) {
                                after.data.insert(f.name.into(), v.clone());
                            }
                        }
                        after
                    }
                    Err(e) => return Err(db_failure(e)),
                };
                Ok((after, Vec::new()))
            }
            "save" | "report_state_up" => {
                let mut changes = obj.clone();
                if method == "report_state_up" {
                    let n = obj.get_i64("report_count").unwrap_or(0) + 1;
                    changes
                        .set("report_count", json!(n))
                        .map_err(|e| e.to_failure())?;
                }
                self.save(ctx, table, &mut changes).await?;
                let mut after = obj.clone();
                if method == "report_state_up" {
                    after.data.insert(
                        "report_count".into(),
                        changes.get("report_count").cloned().unwrap_or(Value::Null),
                    );
                }
                Ok((after, Vec::new()))
            }
            "destroy" => {
                self.destroy(table, obj).await?;
                Ok((obj.clone(), Vec::new()))
            }
            "delete" => {
                let pid = obj.get("project_id").cloned().unwrap_or(Value::Null);
                let res = obj.get("resource").cloned().unwrap_or(Value::Null);
                let q = self.quota(&pid, &res).await?;
                repo::destroy(&self.db, table, &q.get_i64("id").unwrap_or(-1).to_string())
                    .await
                    .map_err(db_failure)?;
                Ok((obj.clone(), Vec::new()))
            }
            "refresh" => {
                let scope = Scope::from_context(ctx);
                let mut conds = vec![Self::eq("uuid", &uuid())];
                if name == "NodeGroup" {
                    conds.insert(
                        0,
                        Self::eq("cluster_id", obj.get("cluster_id").unwrap_or(&Value::Null)),
                    );
                }
                let current = self.one(table, Some(&scope), &conds, &uuid()).await?;
                let mut after = obj.clone();
                let mut changed = obj.changes.clone();
                for f in obj.class.fields {
                    if let (Some(mine), Some(theirs)) = (obj.get(f.name), current.get(f.name))
                        && mine != theirs
                    {
                        after.data.insert(f.name.into(), theirs.clone());
                        changed.push(f.name.to_string());
                    }
                }
                Ok((after, changed))
            }
            _ => Err(missing()),
        }
    }

    /// `update_<x>(<identity>, obj_get_changes())` with each table's rules.
    async fn save(
        &self,
        _ctx: &RequestContext,
        table: &'static Table,
        obj: &mut MagnumObject,
    ) -> Result<(), RemoteFailure> {
        let ident = match table.name {
            "magnum_service" | "quotas" => {
                obj.get_i64("id").map(|i| i.to_string()).unwrap_or_default()
            }
            _ => obj.get_str("uuid").unwrap_or_default().to_string(),
        };
        match table.name {
            "cluster_template" => {
                let referenced = repo::count(
                    &self.db,
                    &CLUSTER,
                    None,
                    &[Cond::Eq(
                        "cluster_template_id".into(),
                        SqlValue::Str(ident.clone()),
                    )],
                )
                .await
                .map_err(db_failure)?
                    > 0;
                let values: Vec<&str> = obj.changes.iter().map(String::as_str).collect();
                let publishing = values.len() == 1
                    && ((values[0] == "public" && obj.get_bool("public") == Some(true))
                        || values[0] == "hidden"
                        || (values[0] == "tags" && obj.get("tags").is_some_and(|t| !t.is_null())));
                if referenced && !publishing && values != ["name"] {
                    return Err(magnum(
                        "ClusterTemplateReferenced",
                        &[("clustertemplate", json!(ident))],
                    ));
                }
            }
            "nodegroup" => {
                // The row must belong to this object's cluster.
                let cid = obj.get("cluster_id").cloned().unwrap_or(Value::Null);
                let uuid = json!(ident);
                self.one(
                    table,
                    None,
                    &[Self::eq("cluster_id", &cid), Self::eq("uuid", &uuid)],
                    &uuid,
                )
                .await?;
            }
            "magnum_service" if obj.changes.iter().any(|c| c == "report_count") => {
                let current = self
                    .one(table, None, &[Self::by_id(&json!(ident))], &json!(ident))
                    .await
                    .map_err(|_| {
                        magnum(
                            "MagnumServiceNotFound",
                            &[("magnum_service_id", json!(ident))],
                        )
                    })?;
                if obj.get_i64("report_count").unwrap_or(0)
                    > current.get_i64("report_count").unwrap_or(0)
                {
                    obj.set("last_seen_up", json!(model::format_time(&model::utcnow())))
                        .map_err(|e| e.to_failure())?;
                }
            }
            _ => {}
        }
        repo::save(&self.db, table, &ident, obj)
            .await
            .map_err(|e| match (&e, table.name) {
                (DbError::Magnum { .. }, "magnum_service")
                    if !obj.changes.iter().any(|c| c == "uuid") =>
                {
                    magnum(
                        "MagnumServiceNotFound",
                        &[("magnum_service_id", json!(ident))],
                    )
                }
                _ => db_failure(e),
            })?;
        Ok(())
    }

    /// `destroy_<x>` with each table's rules.
    async fn destroy(
        &self,
        table: &'static Table,
        obj: &MagnumObject,
    ) -> Result<(), RemoteFailure> {
        let uuid = obj.get_str("uuid").unwrap_or_default().to_string();
        match table.name {
            "cluster_template" => {
                let found = self
                    .one(table, None, &[Self::eq("uuid", &json!(uuid))], &json!(uuid))
                    .await?;
                let referenced = repo::count(
                    &self.db,
                    &CLUSTER,
                    None,
                    &[Cond::Eq(
                        "cluster_template_id".into(),
                        SqlValue::Str(uuid.clone()),
                    )],
                )
                .await
                .map_err(db_failure)?;
                if referenced > 0 {
                    return Err(magnum(
                        "ClusterTemplateReferenced",
                        &[("clustertemplate", json!(uuid))],
                    ));
                }
                let _ = found;
            }
            "nodegroup" => {
                let cid = obj.get("cluster_id").cloned().unwrap_or(Value::Null);
                self.one(
                    table,
                    None,
                    &[Self::eq("cluster_id", &cid), Self::eq("uuid", &json!(uuid))],
                    &json!(uuid),
                )
                .await?;
            }
            _ => {}
        }
        let ident = if table.name == "magnum_service" {
            obj.get_i64("id").map(|i| i.to_string()).unwrap_or_default()
        } else {
            uuid.clone()
        };
        match repo::destroy(&self.db, table, &ident).await {
            Ok(()) => Ok(()),
            Err(DbError::Magnum { .. }) => Err(match table.name {
                // `X509KeyPairNotFound(x509keypair_id)`: the id becomes the message.
                "x509keypair" => {
                    RemoteFailure::magnum_with_message("X509KeyPairNotFound", &ident, Map::new())
                }
                "magnum_service" => magnum(
                    "MagnumServiceNotFound",
                    &[("magnum_service_id", json!(ident))],
                ),
                _ => not_found(table, &json!(ident)),
            }),
            Err(e) => Err(db_failure(e)),
        }
    }
}

/// The object as Magnum's `create()` leaves it in memory: `_from_db_object`
/// reads the SQLAlchemy instance just flushed, not the row, so the fields
/// the caller set keep their values, the model's Python defaults and `id`,
/// `created_at` are filled, and every other column reads None (even JSON
/// columns the database now holds as `{}`/`[]`, and `server_type`).
fn created_in_memory(
    table: &Table,
    obj: &MagnumObject,
    values: &MagnumObject,
    id: u64,
    created_at: chrono::NaiveDateTime,
) -> MagnumObject {
    let mut after = obj.clone();
    for f in after.class.fields {
        if table.not_columns.contains(&f.name) {
            continue;
        }
        let v = match f.name {
            "id" => json!(id),
            "created_at" => Value::String(model::format_time(&created_at)),
            name => match values.get(name) {
                Some(v) => v.clone(),
                None => table
                    .insert_defaults
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, d)| d.json())
                    .unwrap_or(Value::Null),
            },
        };
        after.data.insert(f.name.into(), v);
    }
    after
}

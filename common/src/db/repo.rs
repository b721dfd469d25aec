//! Reads and writes of Magnum's tables with Magnum's semantics
//! (magnum/db/sqlalchemy/api.py):
//!
//! - tenant scoping from the request context ([`Scope`]);
//! - identity lookups: an int selects `id`, a UUID selects `uuid`, anything
//!   else is `InvalidIdentity`;
//! - INSERT of the object's set fields plus `created_at`, the model's
//!   column defaults, and `{}`/`[]` in unset JSON columns (as Magnum's
//!   JsonEncodedType binds None); a duplicate key is the table's `*AlreadyExists`;
//! - UPDATE inside one transaction: `SELECT ... FOR UPDATE`, then only the
//!   columns whose value really changes, plus `updated_at` (no UPDATE at all
//!   when nothing changes, like the ORM); retried on deadlock;
//! - real DELETEs (Magnum has no soft delete).

use rpc_schema::context::RequestContext;
use rpc_schema::ovo::MagnumObject;
use serde_json::Value;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, MySql, Row};

use super::model::{self, Column, ColumnDefault, Kind, SqlValue, Table};
use super::{Db, DbError};
use chrono::NaiveDateTime;

/// Whose rows a request may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub is_admin: bool,
    pub all_tenants: bool,
    pub project_id: Option<String>,
    pub user_id: Option<String>,
}

impl Scope {
    pub fn from_context(ctx: &RequestContext) -> Scope {
        Scope {
            is_admin: ctx.is_admin(),
            all_tenants: ctx.all_tenants(),
            project_id: ctx.project_id().map(str::to_string),
            user_id: ctx.user_id().map(str::to_string),
        }
    }
    /// The conductor's own admin, all-tenants view (periodic tasks).
    pub fn admin() -> Scope {
        Scope {
            is_admin: true,
            all_tenants: true,
            project_id: None,
            user_id: None,
        }
    }

    /// `_add_tenant_filters` / the nodegroup and template variants, as SQL.
    fn filter(&self, table: &Table, binds: &mut Vec<SqlValue>) -> Option<String> {
        match table.name {
            "nodegroup" => {
                if self.is_admin {
                    return None;
                }
                binds.push(opt_str(&self.project_id));
                Some("`project_id` = ?".into())
            }
            "cluster" | "cluster_template" | "x509keypair" | "federation" => {
                if self.is_admin && self.all_tenants {
                    return None;
                }
                let own = if self.project_id.is_some() {
                    binds.push(opt_str(&self.project_id));
                    "`project_id` = ?"
                } else {
                    binds.push(opt_str(&self.user_id));
                    "`user_id` = ?"
                };
                if table.name == "cluster_template" {
                    let public = if self.is_admin {
                        "`public` = 1"
                    } else {
                        "(`public` = 1 AND `hidden` = 0)"
                    };
                    Some(format!("({own} OR {public})"))
                } else {
                    Some(own.into())
                }
            }
            _ => None,
        }
    }
}

fn opt_str(s: &Option<String>) -> SqlValue {
    s.clone().map(SqlValue::Str).unwrap_or(SqlValue::Null)
}

/// What an identity string selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ident {
    Id(i64),
    Uuid(String),
}

/// Magnum's `add_identity_filter`: int-like, UUID-like, else InvalidIdentity.
pub fn ident(value: &str) -> Result<Ident, DbError> {
    let v = value.trim();
    if let Ok(i) = v.parse::<i64>() {
        return Ok(Ident::Id(i));
    }
    if uuid::Uuid::try_parse(v).is_ok() {
        return Ok(Ident::Uuid(value.to_string()));
    }
    Err(DbError::magnum("InvalidIdentity", &[("identity", value)]))
}

/// The key column and value an identity selects.
fn key_of(identity: &str) -> Result<(&'static str, SqlValue), DbError> {
    Ok(match ident(identity)? {
        Ident::Id(i) => ("id", SqlValue::Int(i)),
        Ident::Uuid(u) => ("uuid", SqlValue::Str(u)),
    })
}

fn bind<'q>(
    mut q: Query<'q, MySql, MySqlArguments>,
    v: SqlValue,
) -> Query<'q, MySql, MySqlArguments> {
    q = match v {
        SqlValue::Null => q.bind(None::<String>),
        SqlValue::Int(i) => q.bind(i),
        SqlValue::Str(s) => q.bind(s),
        SqlValue::Bool(b) => q.bind(b),
        SqlValue::Time(t) => q.bind(t),
    };
    q
}

fn read_value(row: &MySqlRow, col: &Column) -> Result<SqlValue, sqlx::Error> {
    let name = col.name;
    Ok(match col.kind {
        Kind::Int => row.try_get::<Option<i64>, _>(name)?.map(SqlValue::Int),
        Kind::Bool => row.try_get::<Option<bool>, _>(name)?.map(SqlValue::Bool),
        Kind::Time => row
            .try_get::<Option<chrono::NaiveDateTime>, _>(name)?
            .map(SqlValue::Time),
        Kind::Str | Kind::JsonDict | Kind::JsonList => {
            row.try_get::<Option<String>, _>(name)?.map(SqlValue::Str)
        }
    }
    .unwrap_or(SqlValue::Null))
}

fn decode_row(db: &Db, table: &Table, row: &MySqlRow) -> Result<MagnumObject, DbError> {
    let cols = table.columns(&db.schema);
    let values = cols
        .iter()
        .map(|c| read_value(row, c))
        .collect::<Result<Vec<_>, _>>()?;
    model::object_from_row(table, &cols, values)
}

/// Map a duplicate-key error to the table's Magnum exception.
fn duplicate(table: &Table, obj: &MagnumObject, e: DbError) -> DbError {
    if e.mysql_code() != Some(1062) {
        return e;
    }
    let s = |f: &str| obj.get_str(f).unwrap_or_default().to_string();
    match table.name {
        "cluster" => DbError::magnum("ClusterAlreadyExists", &[("uuid", &s("uuid"))]),
        "nodegroup" => DbError::magnum(
            "NodeGroupAlreadyExists",
            &[("name", &s("name")), ("cluster_id", &s("cluster_id"))],
        ),
        "cluster_template" => {
            DbError::magnum("ClusterTemplateAlreadyExists", &[("uuid", &s("uuid"))])
        }
        "x509keypair" => DbError::magnum("X509KeyPairAlreadyExists", &[("uuid", &s("uuid"))]),
        "magnum_service" => DbError::magnum(
            "MagnumServiceAlreadyExists",
            &[(
                "id",
                &obj.get_i64("id").map(|i| i.to_string()).unwrap_or_default(),
            )],
        ),
        "quotas" => DbError::magnum(
            "QuotaAlreadyExists",
            &[
                ("project_id", &s("project_id")),
                ("resource", &s("resource")),
            ],
        ),
        _ => e,
    }
}

fn not_found(table: &Table, what: &str) -> DbError {
    DbError::magnum(table.not_found.0, &[(table.not_found.1, what)])
}

/// Rows matching `conds` (ANDed `col = ?` / `col IS NULL`), tenant-scoped.
pub async fn select(
    db: &Db,
    table: &Table,
    scope: &Scope,
    conds: &[(&str, SqlValue)],
    order: Option<&str>,
) -> Result<Vec<MagnumObject>, DbError> {
    let mut binds = Vec::new();
    let mut wheres = Vec::new();
    for (c, v) in conds {
        if table.column(&db.schema, c).is_none() {
            return Err(DbError::magnum(
                "InvalidParameterValue",
                &[("err", &format!("unknown filter {c:?} on {}", table.name))],
            ));
        }
        if *v == SqlValue::Null {
            wheres.push(format!("`{c}` IS NULL"));
        } else {
            wheres.push(format!("`{c}` = ?"));
            binds.push(v.clone());
        }
    }
    if let Some(f) = scope.filter(table, &mut binds) {
        wheres.push(f);
    }
    let mut sql = format!(
        "SELECT {} FROM `{}`",
        table.select_list(&db.schema),
        table.name
    );
    if !wheres.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&wheres.join(" AND "));
    }
    sql.push_str(&format!(" ORDER BY {}", order.unwrap_or("`id` ASC")));
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for b in binds {
        q = bind(q, b);
    }
    let rows = q.fetch_all(&db.pool).await?;
    rows.iter().map(|r| decode_row(db, table, r)).collect()
}

/// A condition of [`query`] / [`count`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// `col = value` (or `col IS NULL`).
    Eq(String, SqlValue),
    /// `col IN (values)` (an empty list matches nothing, as SQLAlchemy's `in_([])`).
    In(String, Vec<SqlValue>),
    /// The cluster's worker (or master) nodegroups sum to this `node_count`
    /// (Magnum's `filter_node_count`).
    NodeCount { master: bool, count: i64 },
}

/// `_paginate_query`: `sort_key` then `id`, one direction, after a marker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub limit: Option<i64>,
    pub sort_key: Option<String>,
    /// `asc` (default) or `desc`, optionally `-nullsfirst` / `-nullslast`.
    pub sort_dir: Option<String>,
    /// The marker object's field values (the last row of the previous page).
    pub marker: Option<serde_json::Map<String, Value>>,
}

impl Page {
    /// The sort keys, as Magnum builds them (`[sort_key, 'id']`).
    pub fn sort_keys(&self) -> Vec<String> {
        let mut keys = vec!["id".to_string()];
        if let Some(k) = &self.sort_key
            && k != "id"
        {
            keys.insert(0, k.clone());
        }
        keys
    }
}

fn where_sql(
    db: &Db,
    table: &Table,
    scope: Option<&Scope>,
    conds: &[Cond],
    binds: &mut Vec<SqlValue>,
) -> Result<Vec<String>, DbError> {
    let mut wheres = Vec::new();
    for c in conds {
        let col_ok = |name: &str| -> Result<Column, DbError> {
            table.column(&db.schema, name).ok_or_else(|| {
                DbError::magnum(
                    "InvalidParameterValue",
                    &[("err", &format!("unknown filter {name:?} on {}", table.name))],
                )
            })
        };
        match c {
            Cond::Eq(name, v) => {
                let col = col_ok(name)?;
                if *v == SqlValue::Null {
                    wheres.push(format!("`{}` IS NULL", col.name));
                } else {
                    wheres.push(format!("`{}` = ?", col.name));
                    binds.push(v.clone());
                }
            }
            Cond::In(name, vs) => {
                let col = col_ok(name)?;
                if vs.is_empty() {
                    wheres.push("1 = 0".into());
                } else {
                    wheres.push(format!(
                        "`{}` IN ({})",
                        col.name,
                        vec!["?"; vs.len()].join(", ")
                    ));
                    binds.extend(vs.iter().cloned());
                }
            }
            Cond::NodeCount { master, count } => {
                wheres.push(format!(
                    "`uuid` IN (SELECT `cluster_id` FROM `nodegroup` WHERE `role` {} 'master' \
                     GROUP BY `cluster_id` HAVING SUM(`node_count`) = ?)",
                    if *master { "=" } else { "!=" }
                ));
                binds.push(SqlValue::Int(*count));
            }
        }
    }
    if let Some(scope) = scope
        && let Some(f) = scope.filter(table, binds)
    {
        wheres.push(f);
    }
    Ok(wheres)
}

/// The SQL value of a marker's field for comparison with its column.
fn marker_value(table: &Table, col: &Column, v: Option<&Value>) -> Result<SqlValue, DbError> {
    match v {
        None | Some(Value::Null) => Ok(SqlValue::Null),
        Some(Value::Bool(b)) => Ok(SqlValue::Int(i64::from(*b))),
        Some(v) => model::bind_value(table, col, v),
    }
}

/// Rows matching `conds`, tenant-scoped if `scope`, sorted and paged as
/// Magnum's `_paginate_query` (oslo.db `paginate_query`). The caller has
/// validated `page.sort_dir`; an unknown sort key is Magnum's
/// `InvalidParameterValue`.
pub async fn query(
    db: &Db,
    table: &Table,
    scope: Option<&Scope>,
    conds: &[Cond],
    page: &Page,
) -> Result<Vec<MagnumObject>, DbError> {
    let mut binds = Vec::new();
    let mut wheres = where_sql(db, table, scope, conds, &mut binds)?;
    let keys = page.sort_keys();
    let mut cols = Vec::new();
    for k in &keys {
        cols.push(table.column(&db.schema, k).ok_or_else(|| {
            DbError::magnum(
                "InvalidParameterValue",
                &[(
                    "err",
                    &format!("The sort_key value \"{k}\" is an invalid field for sorting"),
                )],
            )
        })?);
    }
    let dir = page.sort_dir.clone().unwrap_or_else(|| "asc".into());
    let (main, nulls) = dir.split_once('-').unwrap_or((dir.as_str(), ""));
    let desc = main == "desc";
    let mut order = Vec::new();
    for c in &cols {
        match nulls {
            "nullsfirst" => order.push(format!("(`{}` IS NULL) DESC", c.name)),
            "nullslast" => order.push(format!("(`{}` IS NOT NULL) DESC", c.name)),
            _ => {}
        }
        order.push(format!(
            "`{}` {}",
            c.name,
            if desc { "DESC" } else { "ASC" }
        ));
    }
    if let Some(m) = &page.marker {
        let values = cols
            .iter()
            .map(|c| marker_value(table, c, m.get(c.name)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut any = Vec::new();
        for i in 0..cols.len() {
            if values[i] == SqlValue::Null {
                continue;
            }
            let mut all = Vec::new();
            for j in 0..i {
                if values[j] != SqlValue::Null {
                    all.push(format!("`{}` = ?", cols[j].name));
                    binds.push(values[j].clone());
                }
            }
            let cmp = if desc { "<" } else { ">" };
            let mut crit = format!("`{}` {cmp} ?", cols[i].name);
            binds.push(values[i].clone());
            if (desc && nulls == "nullsfirst") || (!desc && nulls == "nullslast") {
                crit = format!("({crit} OR `{}` IS NULL)", cols[i].name);
            }
            all.push(crit);
            any.push(format!("({})", all.join(" AND ")));
        }
        if !any.is_empty() {
            wheres.push(format!("({})", any.join(" OR ")));
        }
    }
    let mut sql = format!(
        "SELECT {} FROM `{}`",
        table.select_list(&db.schema),
        table.name
    );
    if !wheres.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&wheres.join(" AND "));
    }
    sql.push_str(" ORDER BY ");
    sql.push_str(&order.join(", "));
    if let Some(l) = page.limit {
        sql.push_str(&format!(" LIMIT {}", l.max(0)));
    }
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for b in binds {
        q = bind(q, b);
    }
    let rows = q.fetch_all(&db.pool).await?;
    rows.iter().map(|r| decode_row(db, table, r)).collect()
}

/// `SELECT COUNT(*)` of [`query`]'s rows.
pub async fn count(
    db: &Db,
    table: &Table,
    scope: Option<&Scope>,
    conds: &[Cond],
) -> Result<i64, DbError> {
    let mut binds = Vec::new();
    let wheres = where_sql(db, table, scope, conds, &mut binds)?;
    let mut sql = format!("SELECT COUNT(*) FROM `{}`", table.name);
    if !wheres.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&wheres.join(" AND "));
    }
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for b in binds {
        q = bind(q, b);
    }
    Ok(q.fetch_one(&db.pool).await?.try_get::<i64, _>(0)?)
}

/// `get_cluster_stats(context, project_id)`: clusters and the sum of all
/// nodegroups' `node_count` (of one project, or all).
pub async fn cluster_stats(db: &Db, project_id: Option<&str>) -> Result<(i64, i64), DbError> {
    let (cw, nw) = if project_id.is_some() {
        (" WHERE `project_id` = ?", " WHERE `project_id` = ?")
    } else {
        ("", "")
    };
    let mut q = sqlx::query(AssertSqlSafe(format!("SELECT COUNT(*) FROM `cluster`{cw}")));
    let mut n = sqlx::query(AssertSqlSafe(format!(
        "SELECT CAST(COALESCE(SUM(`node_count`), 0) AS SIGNED) FROM `nodegroup`{nw}"
    )));
    if let Some(p) = project_id {
        q = q.bind(p.to_string());
        n = n.bind(p.to_string());
    }
    let clusters: i64 = q.fetch_one(&db.pool).await?.try_get(0)?;
    let nodes: i64 = n.fetch_one(&db.pool).await?.try_get(0)?;
    Ok((clusters, nodes))
}

/// `get_<x>_by_id` / `_by_uuid` via the identity rule.
pub async fn get(
    db: &Db,
    table: &Table,
    scope: &Scope,
    identity: &str,
) -> Result<MagnumObject, DbError> {
    let cond = key_of(identity)?;
    select(db, table, scope, &[cond], None)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| not_found(table, identity))
}

/// `get_<x>_by_name`: exactly one, else NotFound or Conflict.
pub async fn get_by_name(
    db: &Db,
    table: &Table,
    scope: &Scope,
    name: &str,
) -> Result<MagnumObject, DbError> {
    let mut rows = select(
        db,
        table,
        scope,
        &[("name", SqlValue::Str(name.into()))],
        None,
    )
    .await?;
    match rows.len() {
        0 => Err(not_found(table, name)),
        1 => Ok(rows.remove(0)),
        _ => Err(DbError::magnum(
            "Conflict",
            &[(
                "message",
                &format!(
                    "Multiple {}s exist with same name. Please use the uuid instead.",
                    table.class.name.to_lowercase()
                ),
            )],
        )),
    }
}

/// INSERT the object's set fields; returns the stored object (id, created_at).
pub async fn create(db: &Db, table: &Table, obj: &MagnumObject) -> Result<MagnumObject, DbError> {
    let (id, _) = insert(db, table, obj).await?;
    get(db, table, &Scope::admin(), &id.to_string()).await
}

/// INSERT as Magnum's `create_<x>` does: the object's set fields, the
/// model's Python defaults, `created_at`, and NULL for every other column
/// (SQLAlchemy binds them all). Returns the new id and the `created_at`
/// written.
pub async fn insert(
    db: &Db,
    table: &Table,
    obj: &MagnumObject,
) -> Result<(u64, NaiveDateTime), DbError> {
    let now = model::utcnow();
    let mut names = Vec::new();
    let mut values = Vec::new();
    for col in table.columns(&db.schema) {
        let given = if col.is_field {
            obj.get(col.name)
        } else {
            obj.extra.get(col.name)
        };
        let v = if col.name == "created_at" {
            SqlValue::Time(now)
        } else if col.name == "id" {
            continue;
        } else if let Some(v) = given {
            model::bind_value(table, &col, v)?
        } else if let Some((_, d)) = table.insert_defaults.iter().find(|(n, _)| *n == col.name) {
            match d {
                ColumnDefault::Bool(b) => SqlValue::Bool(*b),
                ColumnDefault::Int(i) => SqlValue::Int(*i),
            }
        } else {
            // JSON columns: Magnum's JsonEncodedType stores `{}` / `[]`.
            model::bind_value(table, &col, &Value::Null)?
        };
        names.push(format!("`{}`", col.name));
        values.push(v);
    }
    let sql = format!(
        "INSERT INTO `{}` ({}) VALUES ({})",
        table.name,
        names.join(", "),
        vec!["?"; names.len()].join(", ")
    );
    let id = db
        .retry_on_deadlock(&format!("create {}", table.name), || {
            let sql = sql.clone();
            let values = values.clone();
            async move {
                let mut q = sqlx::query(AssertSqlSafe(sql));
                for v in values {
                    q = bind(q, v);
                }
                Ok(q.execute(&db.pool).await?.last_insert_id())
            }
        })
        .await
        .map_err(|e| duplicate(table, obj, e))?;
    Ok((id, now))
}

/// Save `obj.changes` to the row `identity` (id or uuid), as `update_<x>`.
/// Returns the row as stored afterwards.
pub async fn save(
    db: &Db,
    table: &Table,
    identity: &str,
    obj: &MagnumObject,
) -> Result<MagnumObject, DbError> {
    Ok(save_changed(db, table, identity, obj).await?.0)
}

/// [`save`], also saying which columns this UPDATE really changed (under
/// the row lock: of several writers of one value, only the first sees it).
pub async fn save_changed(
    db: &Db,
    table: &Table,
    identity: &str,
    obj: &MagnumObject,
) -> Result<(MagnumObject, Vec<String>), DbError> {
    save_changed_if(db, table, identity, obj, None)
        .await?
        .ok_or_else(|| not_found(table, identity))
}

/// [`save_changed`] only if the row still holds what `unchanged` holds
/// (every column but `updated_at`, compared under the row lock): a writer
/// that decided from a read does not overwrite what another wrote since.
/// `None`: the row changed, nothing was written. (With `unchanged: None`,
/// [`save_changed`].)
pub async fn save_changed_if(
    db: &Db,
    table: &Table,
    identity: &str,
    obj: &MagnumObject,
    unchanged: Option<&MagnumObject>,
) -> Result<Option<(MagnumObject, Vec<String>)>, DbError> {
    if obj.changes.iter().any(|c| c == "uuid") {
        return Err(DbError::magnum(
            "InvalidParameterValue",
            &[(
                "err",
                &format!(
                    "Cannot overwrite UUID for an existing {}.",
                    table.class.name
                ),
            )],
        ));
    }
    let mut wanted = Vec::new();
    for name in &obj.changes {
        let Some(col) = table.column(&db.schema, name) else {
            continue;
        };
        if matches!(col.name, "id" | "created_at" | "updated_at") {
            continue;
        }
        let v = obj.get(name).cloned().unwrap_or(Value::Null);
        wanted.push((col, model::bind_value(table, &col, &v)?));
    }
    let (key, key_value) = key_of(identity)?;
    let select_sql = format!(
        "SELECT {} FROM `{}` WHERE `{key}` = ? FOR UPDATE",
        table.select_list(&db.schema),
        table.name
    );
    let changed = db
        .retry_on_deadlock(&format!("update {}", table.name), || {
            let wanted = wanted.clone();
            let select_sql = select_sql.clone();
            let key_value = key_value.clone();
            async move {
                let mut tx = db.pool.begin().await?;
                let row = bind(sqlx::query(AssertSqlSafe(select_sql)), key_value.clone())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| not_found(table, identity))?;
                if let Some(before) = unchanged {
                    let now = decode_row(db, table, &row)?;
                    if table
                        .columns(&db.schema)
                        .iter()
                        .filter(|c| c.name != "updated_at")
                        .any(|c| now.get(c.name) != before.get(c.name))
                    {
                        return Ok(None);
                    }
                }
                let mut sets = Vec::new();
                let mut values = Vec::new();
                let mut names = Vec::new();
                for (col, v) in wanted {
                    if read_value(&row, &col)? != v {
                        sets.push(format!("`{}` = ?", col.name));
                        names.push(col.name.to_string());
                        values.push(v);
                    }
                }
                if !sets.is_empty() {
                    sets.push("`updated_at` = ?".into());
                    values.push(SqlValue::Time(model::utcnow()));
                    let sql = format!(
                        "UPDATE `{}` SET {} WHERE `{key}` = ?",
                        table.name,
                        sets.join(", ")
                    );
                    let mut q = sqlx::query(AssertSqlSafe(sql));
                    for v in values {
                        q = bind(q, v);
                    }
                    q = bind(q, key_value);
                    q.execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(Some(names))
            }
        })
        .await?;
    match changed {
        Some(changed) => Ok(Some((
            get(db, table, &Scope::admin(), identity).await?,
            changed,
        ))),
        None => Ok(None),
    }
}

/// DELETE one row by id or uuid (`destroy_<x>`).
pub async fn destroy(db: &Db, table: &Table, identity: &str) -> Result<(), DbError> {
    let (key, v) = key_of(identity)?;
    let sql = format!("DELETE FROM `{}` WHERE `{key}` = ?", table.name);
    let done = db
        .retry_on_deadlock(&format!("delete {}", table.name), || {
            let (sql, v) = (sql.clone(), v.clone());
            async move {
                Ok(bind(sqlx::query(AssertSqlSafe(sql)), v)
                    .execute(&db.pool)
                    .await?)
            }
        })
        .await?;
    if done.rows_affected() == 0 {
        return Err(not_found(table, identity));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities() {
        assert_eq!(ident("42").unwrap(), Ident::Id(42));
        assert_eq!(
            ident("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e").unwrap(),
            Ident::Uuid("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e".into())
        );
        let e = ident("my-cluster").unwrap_err();
        assert!(matches!(
            e,
            DbError::Magnum {
                class: "InvalidIdentity",
                ..
            }
        ));
    }

    #[test]
    fn tenant_filters() {
        let user = Scope {
            is_admin: false,
            all_tenants: false,
            project_id: Some("p".into()),
            user_id: Some("u".into()),
        };
        let mut b = Vec::new();
        assert_eq!(
            user.filter(&model::CLUSTER, &mut b).as_deref(),
            Some("`project_id` = ?")
        );
        assert_eq!(
            user.filter(&model::CLUSTER_TEMPLATE, &mut b).as_deref(),
            Some("(`project_id` = ? OR (`public` = 1 AND `hidden` = 0))")
        );
        let no_project = Scope {
            project_id: None,
            ..user.clone()
        };
        assert_eq!(
            no_project.filter(&model::X509KEYPAIR, &mut b).as_deref(),
            Some("`user_id` = ?")
        );
        let admin_own = Scope {
            is_admin: true,
            ..user.clone()
        };
        assert_eq!(
            admin_own.filter(&model::CLUSTER, &mut b).as_deref(),
            Some("`project_id` = ?")
        );
        assert_eq!(admin_own.filter(&model::NODEGROUP, &mut b), None);
        assert_eq!(Scope::admin().filter(&model::CLUSTER, &mut b), None);
        assert_eq!(user.filter(&model::MAGNUM_SERVICE, &mut b), None);
    }
}

//! The Rust half of the cross-language database tests: reads and writes
//! Magnum rows through `common::db` and prints objects as JSON (the OVO
//! `magnum_object.data` form), so Python's Magnum objects can be compared
//! with ours on the same database.
//!
//! ```text
//! mc-db-tool --config-file F get <table> <id|uuid>
//! mc-db-tool --config-file F list <table> [<column> <value>]
//! mc-db-tool --config-file F list-as <project_id> <table>
//! mc-db-tool --config-file F create <table> '<json fields>'
//! mc-db-tool --config-file F save <table> <id|uuid> '<json changes>'
//! mc-db-tool --config-file F heartbeat <host|->
//! mc-db-tool --config-file F gen-certs <cluster uuid> <project> <user>
//! mc-db-tool --config-file F decrypt-key <x509keypair uuid>
//! mc-db-tool for-caller '<reply json>' '<{"Class": "1.23"} json>'
//! ```
//!
//! `for-caller` (no database): a reply as the conductor sends it to a
//! caller that sent those object versions (`rpc_schema::ovo::for_caller`).

use std::path::PathBuf;
use std::process::ExitCode;

use common::config::Config;
use common::db::model::{self, SqlValue, Table};
use common::db::repo::{self, Scope};
use common::db::{Db, DbError};
use rpc_schema::ovo::MagnumObject;
use serde_json::{Map, Value};

fn table(name: &str) -> Option<&'static Table> {
    Some(match name {
        "cluster" => &model::CLUSTER,
        "nodegroup" => &model::NODEGROUP,
        "cluster_template" => &model::CLUSTER_TEMPLATE,
        "x509keypair" => &model::X509KEYPAIR,
        "magnum_service" => &model::MAGNUM_SERVICE,
        "quotas" => &model::QUOTA,
        "federation" => &model::FEDERATION,
        _ => return None,
    })
}

/// The object's fields plus, on a Magnum <= 22 schema, the legacy trust
/// columns (Magnum 22's Cluster 1.23 has them as fields).
fn data(o: &MagnumObject) -> Value {
    let mut m = o.data.clone();
    m.extend(o.extra.clone());
    Value::Object(m)
}

/// `for-caller REPLY VERSIONS`.
fn for_caller(reply: &str, versions: &str) -> Result<Value, String> {
    let reply: Value = serde_json::from_str(reply).map_err(|e| format!("reply: {e}"))?;
    let given: Map<String, Value> =
        serde_json::from_str(versions).map_err(|e| format!("versions: {e}"))?;
    let mut versions = std::collections::BTreeMap::new();
    for (name, v) in &given {
        let class = rpc_schema::ovo::class(name).ok_or_else(|| format!("unknown class {name}"))?;
        let (major, minor) = v
            .as_str()
            .and_then(|s| s.split_once('.'))
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
            .ok_or_else(|| format!("bad version {v}"))?;
        versions.insert(class.name, (major, minor));
    }
    rpc_schema::ovo::for_caller(reply, &versions).map_err(|e| e.to_string())
}

async fn run(args: &[String]) -> Result<Value, String> {
    if let [cmd, reply, versions] = args
        && cmd == "for-caller"
    {
        return for_caller(reply, versions);
    }
    let [flag, conf, cmd, rest @ ..] = args else {
        return Err("usage: mc-db-tool --config-file F <command> ...".into());
    };
    if flag != "--config-file" {
        return Err("first argument must be --config-file".into());
    }
    let cfg = Config::load(&[PathBuf::from(conf)], &[]).map_err(|e| e.to_string())?;
    let db = Db::connect(&cfg.database)
        .await
        .map_err(|e| e.to_string())?;
    let t = |n: &str| table(n).ok_or_else(|| format!("unknown table {n}"));
    let err = |e: DbError| match &e {
        DbError::Magnum { class, .. } => format!("{class}: {e}"),
        _ => e.to_string(),
    };
    let parse = |s: &str| serde_json::from_str::<Map<String, Value>>(s).map_err(|e| e.to_string());
    match (cmd.as_str(), rest) {
        ("get", [tn, id]) => Ok(data(
            &repo::get(&db, t(tn)?, &Scope::admin(), id)
                .await
                .map_err(err)?,
        )),
        ("list", [tn, filter @ ..]) => {
            let conds: Vec<(&str, SqlValue)> = match filter {
                [c, v] => vec![(c.as_str(), SqlValue::Str(v.clone()))],
                _ => vec![],
            };
            let rows = repo::select(&db, t(tn)?, &Scope::admin(), &conds, None)
                .await
                .map_err(err)?;
            Ok(Value::Array(rows.iter().map(data).collect()))
        }
        ("list-as", [project, tn]) => {
            // A non-admin request context of `project` (tenant scoping).
            let scope = Scope {
                is_admin: false,
                all_tenants: false,
                project_id: Some(project.clone()),
                user_id: Some("some-user".into()),
            };
            let rows = repo::select(&db, t(tn)?, &scope, &[], None)
                .await
                .map_err(err)?;
            Ok(Value::Array(rows.iter().map(data).collect()))
        }
        ("create", [tn, fields]) => {
            let tb = t(tn)?;
            let mut obj = MagnumObject::new(tb.class);
            for (k, v) in parse(fields)? {
                if tb.legacy.contains(&k.as_str()) {
                    obj.extra.insert(k, v);
                } else {
                    obj.set(&k, v).map_err(|e| e.to_string())?;
                }
            }
            Ok(data(&repo::create(&db, tb, &obj).await.map_err(err)?))
        }
        ("save", [tn, id, changes]) => {
            let tb = t(tn)?;
            let mut obj = repo::get(&db, tb, &Scope::admin(), id).await.map_err(err)?;
            for (k, v) in parse(changes)? {
                obj.set(&k, v).map_err(|e| e.to_string())?;
            }
            Ok(data(&repo::save(&db, tb, id, &obj).await.map_err(err)?))
        }
        ("gen-certs", [cluster_uuid, project, user]) => {
            // cluster create's generate_certificates_to_cluster, as `project`/`user`.
            let mut cluster = repo::get(&db, &model::CLUSTER, &Scope::admin(), cluster_uuid)
                .await
                .map_err(err)?;
            let owner = common::certs::store::Owner {
                project_id: Some(project.clone()),
                user_id: Some(user.clone()),
            };
            conductor::ca::generate_certificates_to_cluster(
                &db,
                &cfg.x509,
                &owner,
                &mut cluster,
                None,
            )
            .await
            .map_err(|e| e.to_failure().to_failure_string())?;
            Ok(data(
                &repo::save(&db, &model::CLUSTER, cluster_uuid, &cluster)
                    .await
                    .map_err(err)?,
            ))
        }
        ("decrypt-key", [x509_uuid]) => {
            // The public key of a stored (encrypted) private key, as hex DER.
            let kp = common::certs::store::get_cert(&db, &Scope::admin(), Some(x509_uuid))
                .await
                .map_err(err)?;
            let key = common::certs::store::private_key(&kp).map_err(|e| e.to_string())?;
            let rsa =
                aws_lc_rs::rsa::KeyPair::from_pkcs8(key.pkcs8_der()).map_err(|e| e.to_string())?;
            use aws_lc_rs::signature::KeyPair as _;
            let spki = aws_lc_rs::encoding::AsDer::<aws_lc_rs::encoding::PublicKeyX509Der>::as_der(
                rsa.public_key(),
            )
            .map_err(|e| e.to_string())?;
            Ok(Value::String(
                spki.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
            ))
        }
        ("heartbeat", [host]) => {
            let host = (host != "-").then(|| host.clone());
            let mut hb = common::db::service::Heartbeat::new(host);
            Ok(Value::from(hb.beat(&db).await.map_err(err)?))
        }
        _ => Err(format!("unknown command {cmd} {rest:?}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mc-db-tool: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&args)) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mc-db-tool: {e}");
            ExitCode::FAILURE
        }
    }
}

//! The simulator's own HTTP endpoint (plain HTTP on loopback), for tests,
//! benchmarks and humans. It is not the apiserver: Kubernetes requests go
//! to the real apiserver (or through [`crate::proxy`]).
//!
//! - `GET /_sim/ready`; `POST /_sim/controllers/pause` (returns once no
//!   controller writes), `POST /_sim/controllers/resume`;
//!   `GET /_sim/controller-errors` (writes the apiserver refused);
//!   `GET /_sim/workload-apiservers` (`{"endpoints": {"ns/cluster":
//!   "https://..."}, "nodes": {"ns/cluster": [names]}, "errors": [...]}`,
//!   with `--workload-apiservers`; `kubeconfigs`: an administrator's
//!   kubeconfig file of each);
//! - `GET /_sim/cloud` (with `--openstack`): `{"infra": {"ns/cluster":
//!   state}, "errors": [...]}` ([`crate::cloud`]);
//! - `GET /_sim/releases` (with `--helm-engine`): `{"releases":
//!   {"ns/proxy": {"cluster", "status", "revision", "generation", "error",
//!   "objects", "forgotten"}}, "errors": [...]}` ([`crate::helm`]);
//!   `POST /_sim/releases/forget`: the Helm client forgets every release,
//!   as a restarted CAAPH would, and reads them back from the workload
//!   clusters' release Secrets ([`crate::helm_storage`]);
//! - proxy: `GET|POST|DELETE /_sim/faults` (a [`crate::faults::Rule`]),
//!   `POST /_sim/watches/drop`, `GET|DELETE /_sim/requests`
//!   (`{client: {verb: n}}`);
//! - `POST /_sim/clone` `{"namespace", "cluster", "uuid", "copies":
//!   [[name, uuid], ...], "parallel"}`: copies of a cluster for benchmarks.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::kinds::Line;
use crate::proxy::Proxy;
use crate::runtime::Controllers;

#[derive(Clone)]
pub struct Control {
    pub client: kube::Client,
    pub line: Line,
    pub controllers: Option<Controllers>,
    pub proxy: Option<Arc<Proxy>>,
    pub workloads: Option<crate::workload::Workloads>,
    pub cloud: Option<crate::cloud::Cloud>,
    pub releases: Option<crate::helm::Releases>,
}

type Reply = (StatusCode, Json<Value>);

fn ok(v: Value) -> Reply {
    (StatusCode::OK, Json(v))
}
fn missing(what: &str) -> Reply {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": format!("{what} not running")})),
    )
}

async fn ready(State(c): State<Control>) -> Reply {
    ok(json!({"synced": c.controllers.as_ref().is_none_or(Controllers::synced)}))
}

async fn pause(State(c): State<Control>) -> Reply {
    match &c.controllers {
        Some(k) => {
            k.pause().await;
            ok(json!({"paused": true}))
        }
        None => missing("controllers"),
    }
}

async fn resume(State(c): State<Control>) -> Reply {
    match &c.controllers {
        Some(k) => {
            k.resume();
            ok(json!({"paused": false}))
        }
        None => missing("controllers"),
    }
}

async fn errors(State(c): State<Control>) -> Reply {
    ok(json!(
        c.controllers
            .as_ref()
            .map(Controllers::errors)
            .unwrap_or_default()
    ))
}

async fn faults_get(State(c): State<Control>) -> Reply {
    match &c.proxy {
        Some(p) => ok(serde_json::to_value(p.faults.rules()).unwrap_or(Value::Null)),
        None => missing("proxy"),
    }
}

async fn faults_add(State(c): State<Control>, body: axum::body::Bytes) -> Reply {
    let Some(p) = &c.proxy else {
        return missing("proxy");
    };
    match serde_json::from_slice::<crate::faults::Rule>(&body) {
        Ok(rule) => {
            p.faults.add(rule);
            ok(json!({"status": "added"}))
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": format!("not a fault rule: {e}")})),
        ),
    }
}

async fn faults_clear(State(c): State<Control>) -> Reply {
    match &c.proxy {
        Some(p) => {
            p.faults.clear();
            ok(json!({"status": "cleared"}))
        }
        None => missing("proxy"),
    }
}

async fn drop_watches(State(c): State<Control>) -> Reply {
    match &c.proxy {
        Some(p) => {
            p.drop_watches();
            ok(json!({"status": "dropped"}))
        }
        None => missing("proxy"),
    }
}

async fn requests(State(c): State<Control>) -> Reply {
    match &c.proxy {
        Some(p) => ok(p.request_counts()),
        None => missing("proxy"),
    }
}

async fn requests_reset(State(c): State<Control>) -> Reply {
    match &c.proxy {
        Some(p) => {
            p.reset_counts();
            ok(json!({"status": "reset"}))
        }
        None => missing("proxy"),
    }
}

async fn clone(State(c): State<Control>, Json(req): Json<Value>) -> Reply {
    let text = |k: &str| {
        req.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let copies: Vec<(String, String)> = req
        .get("copies")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let (ns, cluster, uuid) = (text("namespace"), text("cluster"), text("uuid"));
    if ns.is_empty() || cluster.is_empty() || uuid.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "namespace, cluster, uuid and copies are required"})),
        );
    }
    let parallel = req.get("parallel").and_then(Value::as_u64).unwrap_or(8) as usize;
    match crate::clone::clone_cluster(&c.client, c.line, &ns, &cluster, &uuid, &copies, parallel)
        .await
    {
        Ok(n) => ok(json!({"objects": n})),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": e.to_string()})),
        ),
    }
}

async fn workloads(State(c): State<Control>) -> Reply {
    match &c.workloads {
        Some(w) => {
            let endpoints: serde_json::Map<String, Value> = w
                .endpoints()
                .into_iter()
                .map(|((ns, n), (h, p))| (format!("{ns}/{n}"), json!(format!("https://{h}:{p}"))))
                .collect();
            let nodes: serde_json::Map<String, Value> = w
                .nodes()
                .into_iter()
                .map(|((ns, n), nodes)| {
                    let names: Vec<String> = nodes.into_iter().map(|x| x.name).collect();
                    (format!("{ns}/{n}"), json!(names))
                })
                .collect();
            let kubeconfigs: serde_json::Map<String, Value> = w
                .kubeconfigs()
                .into_iter()
                .map(|((ns, n), p)| (format!("{ns}/{n}"), json!(p.display().to_string())))
                .collect();
            ok(
                json!({"endpoints": endpoints, "nodes": nodes, "errors": w.errors(), "kubeconfigs": kubeconfigs}),
            )
        }
        None => missing("workload apiservers"),
    }
}

async fn cloud(State(c): State<Control>) -> Reply {
    match &c.cloud {
        Some(cloud) => {
            let infra: serde_json::Map<String, Value> = cloud
                .infra()
                .into_iter()
                .map(|((ns, n), i)| (format!("{ns}/{n}"), json!(format!("{i:?}"))))
                .collect();
            ok(json!({"infra": infra, "errors": cloud.errors()}))
        }
        None => missing("the cloud (--openstack)"),
    }
}

async fn releases(State(c): State<Control>) -> Reply {
    match &c.releases {
        Some(r) => {
            let all: serde_json::Map<String, Value> = r
                .all()
                .into_iter()
                .map(|((ns, n), ((_, cluster), o, objects, forgotten))| {
                    (
                        format!("{ns}/{n}"),
                        json!({"cluster": cluster, "status": o.status, "revision": o.revision,
                               "generation": o.generation, "error": o.error, "objects": objects,
                               "forgotten": forgotten}),
                    )
                })
                .collect();
            ok(json!({"releases": all, "errors": r.errors()}))
        }
        None => missing("the Helm engine (--helm-engine)"),
    }
}

async fn releases_forget(State(c): State<Control>) -> Reply {
    match &c.releases {
        Some(r) => ok(json!({"forgotten": r.forget()})),
        None => missing("the Helm engine (--helm-engine)"),
    }
}

pub fn router(c: Control) -> axum::Router {
    axum::Router::new()
        .route("/_sim/ready", get(ready))
        .route("/_sim/controllers/pause", post(pause))
        .route("/_sim/controllers/resume", post(resume))
        .route("/_sim/controller-errors", get(errors))
        .route("/_sim/workload-apiservers", get(workloads))
        .route("/_sim/cloud", get(cloud))
        .route("/_sim/releases", get(releases))
        .route("/_sim/releases/forget", post(releases_forget))
        .route(
            "/_sim/faults",
            get(faults_get).post(faults_add).delete(faults_clear),
        )
        .route("/_sim/watches/drop", post(drop_watches))
        .route("/_sim/requests", get(requests).delete(requests_reset))
        .route("/_sim/clone", post(clone))
        .with_state(c)
}

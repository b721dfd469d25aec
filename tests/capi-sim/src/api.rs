//! The HTTP surface: discovery, the REST verbs on `/api/v1/...` and
//! `/apis/<group>/<version>/...`, watch streams, and errors as `Status`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::Sim;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ApiError, Event, ListQuery, PatchKind, Propagation};
use crate::validate::FieldValidation;

pub fn router(sim: Sim) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(sim)
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn error(e: &ApiError) -> Response {
    json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.status(),
    )
}

/// A parsed request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    CoreVersions,
    Groups,
    Group(String),
    ResourceList { group: String, version: String },
    Resource(Target),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub status: bool,
    /// The `scale` subresource.
    pub scale: bool,
}

/// Map a path to a route (pure).
pub fn parse_path(path: &str) -> Option<Route> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match s.as_slice() {
        ["api"] => return Some(Route::CoreVersions),
        ["apis"] => return Some(Route::Groups),
        ["apis", g] => return Some(Route::Group(g.to_string())),
        ["api", v] => {
            return Some(Route::ResourceList {
                group: String::new(),
                version: v.to_string(),
            });
        }
        ["apis", g, v] => {
            return Some(Route::ResourceList {
                group: g.to_string(),
                version: v.to_string(),
            });
        }
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return None,
    };
    let t = |namespace: Option<&str>, plural: &str, name: Option<&str>, status: bool| {
        Some(Route::Resource(Target {
            group: group.into(),
            version: version.into(),
            namespace: namespace.map(str::to_string),
            plural: plural.into(),
            name: name.map(str::to_string),
            status,
            scale: false,
        }))
    };
    match rest {
        [plural] => t(None, plural, None, false),
        ["namespaces", name, "status"] if group.is_empty() => {
            t(None, "namespaces", Some(name), true)
        }
        ["namespaces", ns, plural] => t(Some(ns), plural, None, false),
        ["namespaces", ns, plural, name] => t(Some(ns), plural, Some(name), false),
        ["namespaces", ns, plural, name, "status"] => t(Some(ns), plural, Some(name), true),
        [plural, name] => t(None, plural, Some(name), false),
        [plural, name, "status"] => t(None, plural, Some(name), true),
        ["namespaces", ns, plural, name, "scale"] => {
            let mut r = t(Some(ns), plural, Some(name), false);
            if let Some(Route::Resource(x)) = &mut r {
                x.scale = true;
            }
            r
        }
        _ => None,
    }
}

fn query(uri: &Uri) -> Vec<(String, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let d = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (d(k), d(v))
        })
        .collect()
}

fn discovery(sim: &Sim, route: &Route) -> Option<Value> {
    sim.read(|s| match route {
        Route::CoreVersions => Some(json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})),
        Route::Groups => {
            let mut groups: Vec<(String, Vec<String>, String)> = Vec::new();
            for r in s.resources.iter().filter(|r| !r.group.is_empty()) {
                match groups.iter_mut().find(|g| g.0 == r.group) {
                    Some(g) => {
                        for v in &r.versions {
                            if !g.1.contains(v) {
                                g.1.push(v.clone());
                            }
                        }
                    }
                    None => groups.push((r.group.clone(), r.versions.clone(), r.storage_version.clone())),
                }
            }
            let list: Vec<Value> = groups
                .iter()
                .map(|(g, vs, pref)| {
                    let versions: Vec<Value> = vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
                    json!({"name": g, "versions": versions, "preferredVersion": {"groupVersion": format!("{g}/{pref}"), "version": pref}})
                })
                .collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}))
        }
        Route::Group(g) => {
            let rs: Vec<_> = s.resources.iter().filter(|r| &r.group == g).collect();
            let first = rs.first()?;
            let mut vs: Vec<String> = Vec::new();
            for r in &rs {
                for v in &r.versions {
                    if !vs.contains(v) {
                        vs.push(v.clone());
                    }
                }
            }
            let versions: Vec<Value> = vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
            Some(json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": versions,
                        "preferredVersion": {"groupVersion": format!("{g}/{}", first.storage_version), "version": first.storage_version}}))
        }
        Route::ResourceList { group, version } => {
            let mut out = Vec::new();
            for r in s.resources.iter().filter(|r| &r.group == group && r.serves(version)) {
                out.push(json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                                "shortNames": r.short_names, "categories": r.categories}));
                if r.status_subresource {
                    out.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                                    "kind": r.kind, "verbs": ["get", "patch", "update"]}));
                }
                if r.scale.is_some() {
                    out.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
                }
            }
            if out.is_empty() {
                return None;
            }
            let gv = if group.is_empty() { version.clone() } else { format!("{group}/{version}") };
            Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}))
        }
        Route::Resource(_) => None,
    })
}

/// Present a stored object at the requested version.
fn at_version(mut obj: Value, api_version: &str) -> Value {
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(api_version));
    }
    obj
}

/// `/_sim/...`: faults, compaction, state dumps and request counts (by
/// User-Agent product and verb) for tests, benchmarks and humans.
fn admin(sim: &Sim, method: &Method, path: &str, body: &Bytes) -> Option<Response> {
    let ok = |v: Value| Some(json_response(StatusCode::OK, &v));
    match (method.as_str(), path) {
        ("GET", "/_sim/faults") => {
            ok(serde_json::to_value(sim.faults.rules()).unwrap_or(Value::Null))
        }
        ("POST", "/_sim/faults") => match serde_json::from_slice::<crate::faults::Rule>(body) {
            Ok(rule) => {
                sim.faults.add(rule);
                ok(json!({"status": "added"}))
            }
            Err(e) => Some(error(&ApiError::new(
                400,
                "BadRequest",
                format!("not a fault rule: {e}"),
            ))),
        },
        ("DELETE", "/_sim/faults") => {
            sim.faults.clear();
            ok(json!({"status": "cleared"}))
        }
        ("POST", "/_sim/compact") => {
            sim.with(|s| {
                s.compact();
                ((), vec![])
            });
            ok(json!({"status": "compacted"}))
        }
        ("POST", "/_sim/watches/drop") => {
            sim.drop_watches();
            ok(json!({"status": "dropped"}))
        }
        ("POST", "/_sim/clone") => {
            // {"namespace", "cluster", "uuid", "copies": [[name, uuid], ...]}
            let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let text = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or_default();
            let copies: Vec<(String, String)> = req
                .get("copies")
                .and_then(|c| serde_json::from_value(c.clone()).ok())
                .unwrap_or_default();
            if text("namespace").is_empty() || text("cluster").is_empty() || text("uuid").is_empty()
            {
                return Some(error(&ApiError::new(
                    400,
                    "BadRequest",
                    "namespace, cluster, uuid and copies are required",
                )));
            }
            let r = sim.with(|s| {
                match s.clone_cluster(text("namespace"), text("cluster"), text("uuid"), &copies) {
                    Ok((n, evs)) => (Ok(n), evs),
                    Err(e) => (Err(e), vec![]),
                }
            });
            match r {
                Ok(n) => ok(json!({"objects": n})),
                Err(e) => Some(error(&e)),
            }
        }
        ("GET", "/_sim/dump") => ok(sim.read(|s| s.dump())),
        ("GET", "/_sim/requests") => ok(sim.request_counts()),
        ("POST", "/_sim/controllers/pause" | "/_sim/controllers/resume") => {
            let pause = path.ends_with("pause");
            sim.paused
                .store(pause, std::sync::atomic::Ordering::Relaxed);
            // A barrier: a pass under way holds the store; once this
            // returns, no controller writes until resumed (as a controller
            // scaled to zero, once its pod is gone).
            sim.read(|_| ());
            ok(json!({"paused": pause}))
        }
        _ => None,
    }
}

fn fault_error(code: u16) -> Response {
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        409 => "Conflict",
        _ => "InternalError",
    };
    let mut r = error(&ApiError::new(
        code,
        reason,
        format!("injected fault: {code}"),
    ));
    if code == 429 {
        r.headers_mut().insert(
            header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    r
}

async fn handle(
    State(sim): State<Sim>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path().starts_with("/_sim/")
        && let Some(r) = admin(&sim, &method, uri.path(), &body)
    {
        return r;
    }
    let is_watch = query(&uri)
        .iter()
        .any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    let client = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split('/').next())
        .unwrap_or("unknown");
    sim.count_request(client, if is_watch { "WATCH" } else { method.as_str() });
    let mut drop_watch_after = None;
    match sim
        .faults
        .take_for(client, method.as_str(), uri.path(), is_watch)
    {
        None => {}
        Some(crate::faults::Action::Error { code }) => return fault_error(code),
        Some(crate::faults::Action::Delay { ms }) => {
            tokio::time::sleep(Duration::from_millis(ms)).await
        }
        Some(crate::faults::Action::Hang) => {
            tokio::time::sleep(crate::faults::HANG).await;
            return fault_error(504);
        }
        Some(crate::faults::Action::DropWatch { after_events }) => {
            drop_watch_after = Some(after_events)
        }
        Some(crate::faults::Action::ExpireWatch) => {
            let e = ApiError::new(410, "Expired", "injected fault: too old resource version");
            let line = format!("{}\n", json!({"type": "ERROR", "object": e.status()}));
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                line,
            )
                .into_response();
        }
    }
    let Some(route) = parse_path(uri.path()) else {
        return error(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let t = match route {
        Route::Resource(t) => t,
        other => {
            return match discovery(&sim, &other) {
                Some(v) => json_response(StatusCode::OK, &v),
                None => error(&ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )),
            };
        }
    };
    let q = query(&uri);
    let param = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let Some((res, api_version, namespaced, kind)) = sim.read(|s| {
        let i = s.find(&t.group, &t.plural)?;
        let r = &s.resources[i];
        r.serves(&t.version)
            .then(|| (i, r.api_version(&t.version), r.namespaced, r.kind.clone()))
    }) else {
        return error(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let ns = if namespaced {
        t.namespace.as_deref()
    } else {
        None
    };
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let body_json = || -> Result<Value, ApiError> {
        if ctype.starts_with("application/vnd.kubernetes.protobuf")
            || ctype.starts_with("application/cbor")
        {
            // JSON only; clients that negotiate fall back on 415.
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unsupported format: {ctype} (capi-sim speaks JSON)"
                ),
            ));
        }
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(400, "BadRequest", format!("invalid JSON body: {e}")))
    };
    let fv = match FieldValidation::parse(param("fieldValidation")) {
        Ok(f) => f,
        Err(m) => return error(&ApiError::new(400, "BadRequest", m)),
    };
    // Who owns what a non-apply write changes (managedFields, operation Update).
    let writer = Some(
        param("fieldManager")
            .filter(|m| !m.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    );
    let respond = |r: (Result<Value, ApiError>, Vec<String>), code: StatusCode| match r.0 {
        Ok(v) => {
            let mut resp = json_response(code, &at_version(v, &api_version));
            for w in r.1 {
                if let Ok(h) = axum::http::HeaderValue::from_str(&format!("299 - {w:?}")) {
                    resp.headers_mut().append(header::WARNING, h);
                }
            }
            resp
        }
        Err(e) => error(&e),
    };
    if t.scale {
        let Some(name) = t.name.as_deref() else {
            return error(&ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        };
        return scale(&sim, res, ns, name, &method, ctype, &body, writer);
    }
    match (&method, &t.name) {
        (&Method::GET, None) => {
            let labels = match LabelSelector::parse(param("labelSelector").unwrap_or("")) {
                Ok(l) => l,
                Err(m) => return error(&ApiError::new(400, "BadRequest", m)),
            };
            let fields = match FieldSelector::parse(param("fieldSelector").unwrap_or("")) {
                Ok(f) => f,
                Err(m) => return error(&ApiError::new(400, "BadRequest", m)),
            };
            if param("watch").is_some_and(|w| w == "true" || w == "1") {
                return watch(
                    sim,
                    res,
                    ns.map(str::to_string),
                    labels,
                    fields,
                    api_version,
                    &q,
                    drop_watch_after,
                )
                .await;
            }
            let lq = ListQuery {
                namespace: ns.map(str::to_string),
                labels,
                fields,
                limit: param("limit").and_then(|l| l.parse().ok()),
                continue_token: param("continue")
                    .filter(|c| !c.is_empty())
                    .map(str::to_string),
            };
            let list_kind = sim.read(|s| s.resources[res].list_kind.clone());
            match sim.read(|s| s.list(res, &lq)) {
                Ok((items, rv, cont)) => {
                    let items: Vec<Value> = items
                        .into_iter()
                        .map(|o| at_version(o, &api_version))
                        .collect();
                    let mut m = json!({"resourceVersion": rv.to_string()});
                    if let Some(c) = cont {
                        m["continue"] = json!(c);
                    }
                    json_response(
                        StatusCode::OK,
                        &json!({"kind": list_kind, "apiVersion": api_version, "metadata": m, "items": items}),
                    )
                }
                Err(e) => error(&e),
            }
        }
        (&Method::GET, Some(name)) => {
            respond((sim.read(|s| s.get(res, ns, name)), vec![]), StatusCode::OK)
        }
        (&Method::POST, None) => {
            let b = match body_json() {
                Ok(b) => b,
                Err(e) => return error(&e),
            };
            respond(
                sim.with(|s| {
                    split(s, writer.clone(), |s: &mut crate::store::Store| {
                        s.create_with(res, ns, b, fv)
                    })
                }),
                StatusCode::CREATED,
            )
        }
        (&Method::PUT, Some(name)) => {
            let b = match body_json() {
                Ok(b) => b,
                Err(e) => return error(&e),
            };
            respond(
                sim.with(|s| {
                    split(s, writer.clone(), |s| {
                        s.update_with(res, ns, name, b, t.status, fv)
                    })
                }),
                StatusCode::OK,
            )
        }
        (&Method::PATCH, Some(name)) => {
            let ctype = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let pk = match ctype.split(';').next().unwrap_or("").trim() {
                "application/merge-patch+json" => PatchKind::Merge,
                "application/json-patch+json" => PatchKind::Json,
                "application/strategic-merge-patch+json" => {
                    return error(&ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!(
                            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (strategic merge patch is not supported for {kind})"
                        ),
                    ));
                }
                "application/apply-patch+yaml" => {
                    let Some(manager) = param("fieldManager")
                        .filter(|m| !m.is_empty())
                        .map(str::to_string)
                    else {
                        return error(&ApiError::new(
                            422,
                            "Invalid",
                            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                        ));
                    };
                    let force = param("force") == Some("true");
                    // kube-rs sends JSON; YAML apply bodies are parsed too.
                    let b: Value = match serde_json::from_slice(&body)
                        .or_else(|_| serde_norway::from_slice(&body))
                    {
                        Ok(b) => b,
                        Err(e) => {
                            return error(&ApiError::new(
                                400,
                                "BadRequest",
                                format!("invalid apply body: {e}"),
                            ));
                        }
                    };
                    // An apply that creates the object answers 201, as the apiserver.
                    let mut created = false;
                    let answer = sim.with(|s| {
                        let ((r, w), evs) = split(s, None, |s: &mut crate::store::Store| {
                            s.apply(res, ns, name, &b, t.status, fv, &manager, force)
                        });
                        created = evs
                            .first()
                            .is_some_and(|e| e.ty == crate::store::EventType::Added);
                        ((r, w), evs)
                    });
                    return respond(
                        answer,
                        if created {
                            StatusCode::CREATED
                        } else {
                            StatusCode::OK
                        },
                    );
                }
                other => {
                    return error(&ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!("unsupported patch type {other:?}"),
                    ));
                }
            };
            let b = match body_json() {
                Ok(b) => b,
                Err(e) => return error(&e),
            };
            respond(
                sim.with(|s| {
                    split(s, writer.clone(), |s| {
                        s.patch(res, ns, name, (pk, &b), t.status, fv)
                    })
                }),
                StatusCode::OK,
            )
        }
        (&Method::DELETE, Some(name)) => {
            let opts: Value = if body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(&body).unwrap_or(json!({}))
            };
            let policy = param("propagationPolicy").map(str::to_string).or_else(|| {
                opts.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
            let propagation = match policy.as_deref() {
                None | Some("Background") => Propagation::Background,
                Some("Foreground") => Propagation::Foreground,
                Some("Orphan") => Propagation::Orphan,
                Some(other) => {
                    return error(&ApiError::new(
                        422,
                        "Invalid",
                        format!("unsupported propagationPolicy {other:?}"),
                    ));
                }
            };
            let rv = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
            let uid = opts
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string);
            respond(
                sim.with(|s| {
                    split(s, writer.clone(), |s| {
                        s.delete(res, ns, name, propagation, rv.as_deref(), uid.as_deref())
                    })
                }),
                StatusCode::OK,
            )
        }
        _ => error(&ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported here"),
        )),
    }
}

type Mutation = Result<(Value, Vec<Arc<Event>>), ApiError>;
/// The response body (or error) and its warnings.
type Answer = (Result<Value, ApiError>, Vec<String>);

/// Run a mutation; hand back (result, warnings) and the events to publish.
/// The `scale` subresource (autoscaling/v1 Scale): GET, PUT, merge PATCH.
/// A write changes the object's spec replicas (a new generation), with the
/// object's `resourceVersion` as precondition when the body carries one.
#[allow(clippy::too_many_arguments)]
fn scale(
    sim: &Sim,
    res: usize,
    ns: Option<&str>,
    name: &str,
    method: &Method,
    ctype: &str,
    body: &[u8],
    writer: Option<String>,
) -> Response {
    let Some(paths) = sim.read(|s| s.resources[res].scale.clone()) else {
        return error(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let as_scale = |o: &Value| -> Value {
        let mut sc = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"],
                         "uid": o["metadata"]["uid"], "resourceVersion": o["metadata"]["resourceVersion"],
                         "creationTimestamp": o["metadata"]["creationTimestamp"]},
            "spec": {"replicas": o.pointer(&paths.spec_replicas).cloned().unwrap_or(json!(0))},
            "status": {"replicas": o.pointer(&paths.status_replicas).cloned().unwrap_or(json!(0))}});
        if let Some(sel) = paths.selector.as_deref().and_then(|p| o.pointer(p)) {
            sc["status"]["selector"] = sel.clone();
        }
        sc
    };
    let current = match sim.read(|s| s.get(res, ns, name)) {
        Ok(o) => o,
        Err(e) => return error(&e),
    };
    let wanted = match *method {
        Method::GET => return json_response(StatusCode::OK, &as_scale(&current)),
        Method::PUT | Method::PATCH => {
            let b: Value = match serde_json::from_slice(body) {
                Ok(b) => b,
                Err(e) => {
                    return error(&ApiError::new(
                        400,
                        "BadRequest",
                        format!("invalid JSON body: {e}"),
                    ));
                }
            };
            let mut sc = as_scale(&current);
            if *method == Method::PUT {
                sc = b;
            } else if ctype.starts_with("application/merge-patch+json")
                || ctype.starts_with("application/strategic-merge-patch+json")
            {
                crate::patch::merge(&mut sc, &b);
            } else if ctype.starts_with("application/json-patch+json") {
                match crate::patch::json_patch(&sc, &b) {
                    Ok(v) => sc = v,
                    Err(e) => return error(&ApiError::new(422, "Invalid", e)),
                }
            } else {
                return error(&ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("unsupported patch type {ctype:?} for scale"),
                ));
            }
            sc
        }
        _ => {
            return error(&ApiError::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    let Some(replicas) = wanted
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .filter(|r| *r >= 0)
    else {
        return error(&ApiError::new(
            422,
            "Invalid",
            "Scale.autoscaling \"\" is invalid: spec.replicas: Invalid value: must be greater than or equal to 0",
        ));
    };
    let mut next = current.clone();
    let parts: Vec<&str> = paths
        .spec_replicas
        .trim_start_matches('/')
        .split('/')
        .collect();
    let mut at = &mut next;
    for p in &parts[..parts.len().saturating_sub(1)] {
        if at.get(*p).is_none() {
            at[*p] = json!({});
        }
        at = &mut at[*p];
    }
    if let Some(last) = parts.last() {
        at[*last] = json!(replicas);
    }
    if let Some(rv) = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
    {
        next["metadata"]["resourceVersion"] = json!(rv);
    }
    let answer = sim.with(|s| {
        split(s, writer.clone(), |s: &mut crate::store::Store| {
            s.update_with(res, ns, name, next, false, FieldValidation::Ignore)
        })
    });
    match answer.0 {
        Ok(o) => json_response(StatusCode::OK, &as_scale(&o)),
        Err(e) => error(&e),
    }
}

fn split(
    s: &mut crate::store::Store,
    manager: Option<String>,
    f: impl FnOnce(&mut crate::store::Store) -> Mutation,
) -> (Answer, Vec<Arc<Event>>) {
    s.set_manager(manager);
    let r = f(s);
    s.set_manager(None);
    let warnings = s.take_warnings();
    match r {
        Ok((v, e)) => ((Ok(v), warnings), e),
        Err(e) => ((Err(e), warnings), vec![]),
    }
}

struct Watch {
    pending: VecDeque<Value>,
    rx: broadcast::Receiver<Arc<Event>>,
    res: usize,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    api_version: String,
    kind: String,
    bookmarks: bool,
    bookmark_every: Duration,
    deadline: tokio::time::Instant,
    last_rv: u64,
    done: bool,
    /// Injected: close the stream after this many more events.
    drop_after: Option<usize>,
    /// Changes when every open watch is to end (`POST /_sim/watches/drop`).
    kill: tokio::sync::watch::Receiver<u64>,
}

impl Watch {
    /// The event type this watch sees, if any (label transitions become
    /// ADDED/DELETED, as the apiserver's filtered watch does).
    fn sees(&self, ev: &Event) -> Option<&'static str> {
        if ev.res != self.res
            || self.ns.as_deref().is_some_and(|n| ev.namespace() != n)
            || !self.fields.matches(&ev.object)
        {
            return None;
        }
        let now = self.labels.matches(
            ev.object
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
        );
        let before = match &ev.prev_labels {
            Some(p) => self.labels.matches(Some(p)),
            None => now,
        };
        match (ev.ty, before, now) {
            (crate::store::EventType::Modified, true, false) => Some("DELETED"),
            (crate::store::EventType::Modified, false, true) => Some("ADDED"),
            (_, _, true) => Some(ev.ty.as_str()),
            _ => None,
        }
    }
    fn push(&mut self, ev: &Event) {
        self.last_rv = self.last_rv.max(ev.rv);
        if let Some(ty) = self.sees(ev) {
            self.pending.push_back(
                json!({"type": ty, "object": at_version((*ev.object).clone(), &self.api_version)}),
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn watch(
    sim: Sim,
    res: usize,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    api_version: String,
    q: &[(String, String)],
    drop_after: Option<usize>,
) -> Response {
    let param = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let from: Option<u64> = param("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse().ok());
    let timeout = param("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let bookmarks = param("allowWatchBookmarks").is_some_and(|b| b == "true");
    let kill = sim.watch_epoch();
    let ((replay, kind, now), rx) = sim.subscribe_with(|s| {
        let kind = s.resources[res].kind.clone();
        let replay = match from {
            Some(rv) => s.events_since(rv).map(Replay::Events),
            None => Ok(Replay::Snapshot(s.snapshot(res))),
        };
        (replay, kind, s.resource_version())
    });
    let mut w = Watch {
        pending: VecDeque::new(),
        rx,
        res,
        ns,
        labels,
        fields,
        api_version,
        kind,
        bookmarks,
        bookmark_every: sim.bookmark_every,
        deadline: tokio::time::Instant::now() + Duration::from_secs(timeout),
        last_rv: from.unwrap_or(now),
        done: false,
        drop_after,
        kill,
    };
    match replay {
        Err(e) => {
            w.pending
                .push_back(json!({"type": "ERROR", "object": e.status()}));
            w.done = true;
        }
        Ok(Replay::Events(evs)) => {
            for e in evs {
                w.push(&e);
            }
        }
        Ok(Replay::Snapshot(objs)) => {
            for o in objs {
                let ev = Event {
                    rv: now,
                    res,
                    ty: crate::store::EventType::Added,
                    object: Arc::new(o),
                    prev_labels: None,
                };
                w.push(&ev);
            }
            w.last_rv = now;
        }
    }
    let stream = futures_util::stream::unfold(w, |mut w| async move {
        loop {
            if w.drop_after == Some(0) {
                return None;
            }
            if let Some(v) = w.pending.pop_front() {
                if let Some(n) = w.drop_after.as_mut() {
                    *n -= 1;
                }
                let mut line = v.to_string();
                line.push('\n');
                return Some((Ok::<_, Infallible>(Bytes::from(line)), w));
            }
            if w.done {
                return None;
            }
            let bookmark = tokio::time::sleep(w.bookmark_every);
            tokio::select! {
                _ = tokio::time::sleep_until(w.deadline) => return None,
                Ok(()) = w.kill.changed() => return None,
                _ = bookmark, if w.bookmarks => {
                    let b = json!({"type": "BOOKMARK", "object": {"kind": w.kind, "apiVersion": w.api_version, "metadata": {"resourceVersion": w.last_rv.to_string()}}});
                    w.pending.push_back(b);
                }
                r = w.rx.recv() => match r {
                    Ok(ev) => w.push(&ev),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let e = ApiError::new(410, "Expired", "the watch fell behind; relist");
                        w.pending.push_back(json!({"type": "ERROR", "object": e.status()}));
                        w.done = true;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

enum Replay {
    Events(Vec<Arc<Event>>),
    Snapshot(Vec<Value>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parse_path("/api"), Some(Route::CoreVersions));
        assert_eq!(
            parse_path("/apis/cluster.x-k8s.io/v1beta1"),
            Some(Route::ResourceList {
                group: "cluster.x-k8s.io".into(),
                version: "v1beta1".into()
            })
        );
        let Some(Route::Resource(t)) =
            parse_path("/apis/cluster.x-k8s.io/v1beta1/namespaces/ns1/clusters/c1/status")
        else {
            panic!()
        };
        assert_eq!(
            (
                t.namespace.as_deref(),
                t.plural.as_str(),
                t.name.as_deref(),
                t.status
            ),
            (Some("ns1"), "clusters", Some("c1"), true)
        );
        let Some(Route::Resource(t)) = parse_path("/api/v1/namespaces/ns1") else {
            panic!()
        };
        assert_eq!(
            (t.namespace.as_deref(), t.plural.as_str(), t.name.as_deref()),
            (None, "namespaces", Some("ns1"))
        );
        let Some(Route::Resource(t)) = parse_path("/api/v1/namespaces/ns1/secrets") else {
            panic!()
        };
        assert_eq!(
            (t.namespace.as_deref(), t.plural.as_str(), t.name),
            (Some("ns1"), "secrets", None)
        );
        let Some(Route::Resource(t)) = parse_path("/apis/cluster.x-k8s.io/v1beta1/clusters") else {
            panic!()
        };
        assert_eq!((t.namespace, t.plural.as_str()), (None, "clusters"));
        assert_eq!(parse_path("/healthz/x/y"), None);
    }
}

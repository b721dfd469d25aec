//! kube-rs against the simulator, in process: the apiserver behaviours the
//! conductor depends on, checked through the real client library.

use std::path::PathBuf;
use std::time::Duration;

use capi_sim::resources::{self, Line};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, Config, ResourceExt};
use serde_json::json;

fn crds_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds")
}

async fn start(line: Line) -> (Client, capi_sim::Sim, String) {
    let dirs = resources::line_dirs(&crds_root(), line);
    let refs: Vec<&std::path::Path> = dirs.iter().map(PathBuf::as_path).collect();
    let mut all = resources::builtins();
    all.extend(resources::load_crd_dirs(&refs).expect("CRDs from ../shared/crds"));
    let mut sim = capi_sim::Sim::new(all, 10_000);
    sim.bookmark_every = Duration::from_millis(200);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = capi_sim::api::router(sim.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let config = Config::new(format!("http://{addr}").parse().unwrap());
    (Client::try_from(config).unwrap(), sim, addr.to_string())
}

fn clusters(client: &Client, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster");
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "clusters"),
    )
}

fn cluster(name: &str, version: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "Cluster",
        "metadata": {"name": name, "labels": {"app": "k8s", "tier": name}},
        "spec": {"paused": false}
    }))
    .unwrap()
}

fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn crud_conflicts_and_status_subresource() {
    for (line, version) in [(Line::V1beta1, "v1beta1"), (Line::V1beta2, "v1beta2")] {
        let (client, _sim, _addr) = start(line).await;
        let api = clusters(&client, version);
        let created = api
            .create(&PostParams::default(), &cluster("c1", version))
            .await
            .unwrap();
        assert_eq!(created.metadata.generation, Some(1));
        assert!(created.metadata.uid.is_some() && created.metadata.resource_version.is_some());
        assert_eq!(
            code(
                api.create(&PostParams::default(), &cluster("c1", version))
                    .await
                    .unwrap_err()
            ),
            409
        );

        // Optimistic concurrency: a stale resourceVersion is a 409.
        let mut a = api.get("c1").await.unwrap();
        let mut b = a.clone();
        a.data["spec"]["paused"] = json!(true);
        let a2 = api.replace("c1", &PostParams::default(), &a).await.unwrap();
        assert_eq!(
            a2.metadata.generation,
            Some(2),
            "spec change bumps generation"
        );
        b.data["spec"]["paused"] = json!(false);
        assert_eq!(
            code(
                api.replace("c1", &PostParams::default(), &b)
                    .await
                    .unwrap_err()
            ),
            409
        );

        // Status subresource: the main resource ignores status, /status ignores the rest.
        let mut with_status = a2.clone();
        with_status.data["status"] = json!({"phase": "Provisioned"});
        let ignored = api
            .replace("c1", &PostParams::default(), &with_status)
            .await
            .unwrap();
        assert!(ignored.data.get("status").is_none());
        let st = api
            .patch_status(
                "c1",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"phase": "Provisioned"}, "spec": {"paused": false}}),
                ),
            )
            .await
            .unwrap();
        assert_eq!(st.data["status"]["phase"], "Provisioned");
        assert_eq!(
            st.data["spec"]["paused"], true,
            "spec untouched through /status"
        );
        assert_eq!(
            st.metadata.generation,
            Some(2),
            "status does not bump generation"
        );

        // Unknown object: 404 Status.
        assert_eq!(code(api.get("nope").await.unwrap_err()), 404);
        // Wrong namespace: 404 on the namespace.
        let other: Api<ConfigMap> = Api::namespaced(client.clone(), "missing-ns");
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!(
            code(other.create(&PostParams::default(), &cm).await.unwrap_err()),
            404
        );
    }
}

#[tokio::test]
async fn finalizers_and_cascading_deletion() {
    let (client, _sim, _addr) = start(Line::V1beta1).await;
    let api = clusters(&client, "v1beta1");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // A finalizer blocks deletion until it is removed.
    let mut c = cluster("fin", "v1beta1");
    c.metadata.finalizers = Some(vec!["cluster.cluster.x-k8s.io".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    api.delete("fin", &DeleteParams::default()).await.unwrap();
    let pending = api.get("fin").await.unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    let mut adding = pending.clone();
    adding.metadata.finalizers = Some(vec!["cluster.cluster.x-k8s.io".into(), "new".into()]);
    assert_eq!(
        code(
            api.replace("fin", &PostParams::default(), &adding)
                .await
                .unwrap_err()
        ),
        422
    );
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::<()>::Json(
            serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(code(api.get("fin").await.unwrap_err()), 404);

    // Background: dependents go after the owner.
    let owner = api
        .create(&PostParams::default(), &cluster("owner", "v1beta1"))
        .await
        .unwrap();
    let uid = owner.metadata.uid.clone().unwrap();
    let dep = |name: &str, fin: bool| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name,
            "finalizers": if fin { json!(["block"]) } else { json!([]) },
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "owner", "uid": uid, "blockOwnerDeletion": true}]}}))
        .unwrap()
    };
    cms.create(&PostParams::default(), &dep("dep-a", false))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &dep("dep-b", false))
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert_eq!(code(cms.get("dep-a").await.unwrap_err()), 404);
    assert_eq!(code(cms.get("dep-b").await.unwrap_err()), 404);

    // Foreground: the owner waits for a dependent held by a finalizer.
    let owner = api
        .create(&PostParams::default(), &cluster("owner", "v1beta1"))
        .await
        .unwrap();
    let uid = owner.metadata.uid.clone().unwrap();
    let held: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["block"],
        "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "owner", "uid": uid}]}}))
        .unwrap();
    cms.create(&PostParams::default(), &held).await.unwrap();
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let waiting = api.get("owner").await.unwrap();
    assert!(
        waiting
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(code(cms.get("held").await.unwrap_err()), 404);
    assert_eq!(
        code(api.get("owner").await.unwrap_err()),
        404,
        "owner goes once its dependents are gone"
    );

    // Orphan: dependents stay, without the owner reference.
    let owner = api
        .create(&PostParams::default(), &cluster("owner", "v1beta1"))
        .await
        .unwrap();
    let uid = owner.metadata.uid.clone().unwrap();
    let orphan: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "orphan",
        "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "owner", "uid": uid}]}}))
        .unwrap();
    cms.create(&PostParams::default(), &orphan).await.unwrap();
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    let kept = cms.get("orphan").await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn selectors_and_pagination() {
    let (client, _sim, _addr) = start(Line::V1beta2).await;
    let api = clusters(&client, "v1beta2");
    for i in 0..25 {
        let mut c = cluster(&format!("c{i:02}"), "v1beta2");
        c.labels_mut().insert(
            "parity".into(),
            if i % 2 == 0 { "even" } else { "odd" }.into(),
        );
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let even = api
        .list(&ListParams::default().labels("parity=even"))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 13);
    let set = api
        .list(&ListParams::default().labels("tier in (c01, c02, c03),parity!=odd"))
        .await
        .unwrap();
    assert_eq!(
        set.items
            .iter()
            .map(|o| o.metadata.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["c02"]
    );
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c07"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    assert_eq!(
        code(
            api.list(&ListParams::default().labels("a in b"))
                .await
                .unwrap_err()
        ),
        400
    );

    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    loop {
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        names.extend(page.items.iter().map(|o| o.metadata.name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 25);
    assert_eq!(
        names,
        (0..25).map(|i| format!("c{i:02}")).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn watch_resume_bookmarks_and_gone() {
    let (client, sim, _addr) = start(Line::V1beta1).await;
    let api = clusters(&client, "v1beta1");
    api.create(&PostParams::default(), &cluster("w1", "v1beta1"))
        .await
        .unwrap();
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    api.create(&PostParams::default(), &cluster("w2", "v1beta1"))
        .await
        .unwrap();
    api.delete("w1", &DeleteParams::default()).await.unwrap();

    // Resume from rv: exactly what happened after it, then bookmarks.
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        match ev {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.metadata.name.unwrap())),
            WatchEvent::Bookmark(b) => {
                seen.push("BOOKMARK".into());
                assert!(
                    b.metadata.resource_version.parse::<u64>().unwrap()
                        >= rv.parse::<u64>().unwrap()
                );
                break;
            }
            other => seen.push(format!("{other:?}")),
        }
    }
    assert_eq!(seen, ["ADDED w2", "DELETED w1", "BOOKMARK"]);

    // After compaction the old version is gone: an ERROR event with 410.
    sim.with(|s| {
        s.compact();
        ((), vec![])
    });
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }

    // kube-runtime's watcher relists on 410 and keeps delivering.
    let w = kube::runtime::watcher(api.clone(), kube::runtime::watcher::Config::default());
    let mut objs = Box::pin(kube::runtime::WatchStreamExt::applied_objects(w));
    let first = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("w2"));
    api.create(&PostParams::default(), &cluster("w3", "v1beta1"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.metadata.name.as_deref(), Some("w3"));
}

/// A raw HTTP/1.1 request (for what kube-rs does not expose: Warning
/// headers and `fieldValidation`). Returns (status, headers, body).
async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> (u16, String, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let b = body.to_string();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
        b.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    // Bodies here are small and not chunked unless streamed.
    let json = rest.find('{').map(|i| &rest[i..]).and_then(|r| {
        let end = r.rfind('}').map(|j| j + 1).unwrap_or(r.len());
        serde_json::from_str(&r[..end]).ok()
    });
    (
        status,
        head.to_string(),
        json.unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn schema_validation_from_the_real_crds() {
    for (line, version, strategy) in [
        (
            Line::V1beta1,
            "v1beta1",
            json!({"strategy": {"type": "Sideways"}}),
        ),
        (
            Line::V1beta2,
            "v1beta2",
            json!({"rollout": {"strategy": {"type": "Sideways"}}}),
        ),
    ] {
        let (_client, _sim, addr) = start(line).await;
        let base = format!("/apis/cluster.x-k8s.io/{version}/namespaces/default");
        let cluster = |name: &str, spec: serde_json::Value| {
            json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "Cluster",
                   "metadata": {"name": name}, "spec": spec})
        };
        // Valid: accepted as is.
        let good = json!({"clusterNetwork": {"pods": {"cidrBlocks": ["10.0.0.0/16"]}},
                          "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}});
        let (code, _, body) = raw(
            &addr,
            "POST",
            &format!("{base}/clusters"),
            &cluster("good", good.clone()),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        assert_eq!(body["spec"]["controlPlaneEndpoint"]["port"], 6443);

        // A misspelled field: pruned with a warning by default...
        let mut typo = good.clone();
        typo["pausd"] = json!(true);
        let (code, head, body) = raw(
            &addr,
            "POST",
            &format!("{base}/clusters"),
            &cluster("typo", typo.clone()),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        assert!(body["spec"].get("pausd").is_none());
        assert!(
            head.to_lowercase()
                .contains("warning: 299 - \"unknown field \\\"spec.pausd\\\"\""),
            "{head}"
        );
        // ...refused with 400 under Strict.
        let (code, _, body) = raw(
            &addr,
            "POST",
            &format!("{base}/clusters?fieldValidation=Strict"),
            &cluster("typo2", typo),
        )
        .await;
        assert_eq!(
            (code, body["reason"].as_str()),
            (400, Some("BadRequest")),
            "{body}"
        );
        assert!(body["message"].as_str().unwrap().contains("spec.pausd"));

        // A wrong type: 422 Invalid, with the field as cause.
        let mut wrong = good.clone();
        wrong["controlPlaneEndpoint"]["port"] = json!("six");
        let (code, _, body) = raw(
            &addr,
            "POST",
            &format!("{base}/clusters"),
            &cluster("wrong", wrong),
        )
        .await;
        assert_eq!(
            (code, body["reason"].as_str()),
            (422, Some("Invalid")),
            "{body}"
        );
        assert_eq!(
            body["details"]["causes"][0]["field"],
            "spec.controlPlaneEndpoint.port"
        );

        // A value outside an enum: 422 FieldValueNotSupported.
        let mut md_spec = json!({"clusterName": "good", "selector": {},
            "template": {"spec": {"clusterName": "good", "bootstrap": {},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachineTemplate", "name": "t",
                                      "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1"}}}});
        if version == "v1beta2" {
            md_spec["template"]["spec"]["infrastructureRef"]
                .as_object_mut()
                .unwrap()
                .remove("apiVersion");
        } else {
            md_spec["template"]["spec"]["infrastructureRef"]
                .as_object_mut()
                .unwrap()
                .remove("apiGroup");
        }
        let ok_md = json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "MachineDeployment",
                           "metadata": {"name": "md-ok"}, "spec": md_spec.clone()});
        let (code, _, body) = raw(
            &addr,
            "POST",
            &format!("{base}/machinedeployments?fieldValidation=Strict"),
            &ok_md,
        )
        .await;
        assert_eq!(code, 201, "{version}: {body}");
        let mut bad_spec = md_spec.clone();
        merge(&mut bad_spec, &strategy);
        let bad_md = json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "MachineDeployment",
                            "metadata": {"name": "md-bad"}, "spec": bad_spec});
        let (code, _, body) = raw(
            &addr,
            "POST",
            &format!("{base}/machinedeployments"),
            &bad_md,
        )
        .await;
        assert_eq!(code, 422, "{body}");
        assert_eq!(
            body["details"]["causes"][0]["reason"],
            "FieldValueNotSupported"
        );
        if version == "v1beta2" {
            // v1beta2 requires spec.clusterName: missing is 422 Required.
            let mut missing = ok_md.clone();
            missing["metadata"]["name"] = json!("md-missing");
            missing["spec"]
                .as_object_mut()
                .unwrap()
                .remove("clusterName");
            let (code, _, body) = raw(
                &addr,
                "POST",
                &format!("{base}/machinedeployments"),
                &missing,
            )
            .await;
            assert_eq!(code, 422, "{body}");
            assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueRequired");
        }
    }
}

fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    capi_sim::patch::merge(target, patch);
}

#[tokio::test]
async fn faults_are_what_the_client_sees() {
    use capi_sim::faults::{Action, Rule};
    let (client, sim, addr) = start(Line::V1beta1).await;
    let api = clusters(&client, "v1beta1");
    api.create(&PostParams::default(), &cluster("f1", "v1beta1"))
        .await
        .unwrap();
    let rule = |method: &str, path: &str, times: usize, action: Action| Rule {
        method: Some(method.into()),
        path: Some(path.into()),
        watch_only: false,
        client: None,
        times: Some(times),
        action,
    };

    // 500 twice, then normal service.
    sim.faults
        .add(rule("GET", "/clusters/f1", 2, Action::Error { code: 500 }));
    assert_eq!(code(api.get("f1").await.unwrap_err()), 500);
    assert_eq!(code(api.get("f1").await.unwrap_err()), 500);
    assert!(api.get("f1").await.is_ok());

    // 429 with Retry-After and 503, as sent on the wire...
    sim.faults
        .add(rule("POST", "/clusters", 1, Action::Error { code: 429 }));
    let (status, head, body) = raw(
        &addr,
        "POST",
        "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/clusters",
        &json!({}),
    )
    .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (429, Some("TooManyRequests"))
    );
    assert!(head.to_lowercase().contains("retry-after: 1"), "{head}");
    sim.faults
        .add(rule("GET", "/clusters", 1, Action::Error { code: 503 }));
    let (status, _, _) = raw(
        &addr,
        "GET",
        "/apis/cluster.x-k8s.io/v1beta1/clusters",
        &json!(null),
    )
    .await;
    assert_eq!(status, 503);
    // ...and kube-rs's own retry of a 429 goes through once the fault is spent.
    sim.faults
        .add(rule("POST", "/clusters", 1, Action::Error { code: 429 }));
    api.create(&PostParams::default(), &cluster("f2", "v1beta1"))
        .await
        .unwrap();

    // A slow answer is slow; a hung one trips the caller's timeout.
    sim.faults
        .add(rule("GET", "/clusters/f1", 1, Action::Delay { ms: 300 }));
    let t = std::time::Instant::now();
    api.get("f1").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    sim.faults.add(rule("GET", "/clusters/f1", 1, Action::Hang));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), api.get("f1"))
            .await
            .is_err()
    );

    // Watches: dropped after one event; expired with 410.
    sim.faults.add(Rule {
        method: None,
        path: Some("/clusters".into()),
        watch_only: true,
        client: None,
        times: Some(1),
        action: Action::DropWatch { after_events: 1 },
    });
    let mut s = api
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        s.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));
    assert!(
        tokio::time::timeout(Duration::from_secs(2), s.try_next())
            .await
            .unwrap()
            .unwrap()
            .is_none(),
        "closed"
    );
    sim.faults.add(Rule {
        method: None,
        path: None,
        watch_only: true,
        client: None,
        times: Some(1),
        action: Action::ExpireWatch,
    });
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(sim.faults.rules().is_empty(), "every rule fired its count");

    // Every open watch ended at once (an apiserver restart): the streams end.
    let mut a = api
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    let mut b = api
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    sim.drop_watches();
    for s in [&mut a, &mut b] {
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match s.try_next().await {
                    Ok(Some(WatchEvent::Bookmark(_))) => continue,
                    other => return other.map(|e| e.is_none()),
                }
            }
        })
        .await;
        assert!(matches!(end, Ok(Ok(true))), "the stream must end: {end:?}");
    }
}

#[tokio::test]
async fn server_side_apply() {
    for (line, version) in [(Line::V1beta1, "v1beta1"), (Line::V1beta2, "v1beta2")] {
        let (client, _sim, _addr) = start(line).await;
        let api = clusters(&client, version);
        let desired = |paused: bool, extra: bool| {
            let mut v = json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "Cluster",
                               "metadata": {"name": "ssa", "labels": {"owner": "magnum"}},
                               "spec": {"paused": paused, "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}});
            if extra {
                v["metadata"]["annotations"] = json!({"note": "x"});
            }
            v
        };
        let conductor = PatchParams::apply("magnum-conductor");
        // Create by apply.
        let o = api
            .patch("ssa", &conductor, &Patch::Apply(desired(false, true)))
            .await
            .unwrap();
        assert_eq!(o.metadata.generation, Some(1));
        let mf = o.metadata.managed_fields.clone().unwrap();
        assert_eq!(
            (mf[0].manager.as_deref(), mf[0].operation.as_deref()),
            (Some("magnum-conductor"), Some("Apply"))
        );
        // Idempotent: same apply, same resourceVersion.
        let again = api
            .patch("ssa", &conductor, &Patch::Apply(desired(false, true)))
            .await
            .unwrap();
        assert_eq!(again.metadata.resource_version, o.metadata.resource_version);
        // Another manager takes spec.paused with a plain merge patch...
        let other = PatchParams {
            field_manager: Some("operator".into()),
            ..Default::default()
        };
        api.patch(
            "ssa",
            &other,
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
        // ...so applying a different value conflicts (409, with the field and owner)...
        let err = api
            .patch("ssa", &conductor, &Patch::Apply(desired(false, true)))
            .await
            .unwrap_err();
        match err {
            kube::Error::Api(s) => {
                assert_eq!(s.code, 409);
                assert!(
                    s.message.contains("operator") && s.message.contains(".spec.paused"),
                    "{}",
                    s.message
                );
            }
            other => panic!("{other}"),
        }
        // ...unless forced, which takes ownership back.
        let forced = api
            .patch(
                "ssa",
                &conductor.clone().force(),
                &Patch::Apply(desired(false, true)),
            )
            .await
            .unwrap();
        assert_eq!(forced.data["spec"]["paused"], false);
        assert_eq!(forced.metadata.generation, Some(3));
        // Dropping a field from the applied configuration removes it.
        let dropped = api
            .patch("ssa", &conductor, &Patch::Apply(desired(false, false)))
            .await
            .unwrap();
        assert!(dropped.annotations().get("note").is_none());
        assert_eq!(
            dropped.labels().get("owner").map(String::as_str),
            Some("magnum")
        );
        // Status apply through /status only touches status.
        let st = api
            .patch_status("ssa", &PatchParams::apply("capi-controller"),
                &Patch::Apply(json!({"apiVersion": format!("cluster.x-k8s.io/{version}"), "kind": "Cluster",
                                     "metadata": {"name": "ssa"}, "status": {"phase": "Provisioned"}})))
            .await
            .unwrap();
        assert_eq!(st.data["status"]["phase"], "Provisioned");
        assert_eq!(st.data["spec"]["paused"], false);
        // Apply without a field manager is refused.
        let err = api
            .patch(
                "ssa",
                &PatchParams::default(),
                &Patch::Apply(desired(false, false)),
            )
            .await
            .unwrap_err();
        assert_eq!(code(err), 422);
    }
}

#[tokio::test]
async fn label_selected_watch_sees_transitions() {
    let (client, _sim, _addr) = start(Line::V1beta1).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = cms
        .watch(
            &WatchParams::default()
                .labels("team=a")
                .timeout(5)
                .disable_bookmarks(),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "t", "labels": {"team": "b"}}}))
            .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    cms.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "c"}}})),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        match tokio::time::timeout(Duration::from_secs(5), s.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Added(_)) => seen.push("ADDED"),
            Some(WatchEvent::Modified(_)) => seen.push("MODIFIED"),
            Some(WatchEvent::Deleted(_)) => seen.push("DELETED"),
            other => panic!("{other:?}"),
        }
    }
    // Created outside the selector: unseen; moved in: ADDED; changed: MODIFIED; moved out: DELETED.
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);
}

//! The Lease protocol (src/lifecycle/coordination/lease.rs) against a real kube-apiserver
//! (`scripts/k8s-up.sh`: resourceVersion preconditions, 409s): one holder at a time,
//! release deletes, expiry by observation, and a release that lost a race
//! with a renewal still deletes the lease (found by 100 creates on two
//! conductors: the leader waited for ever on a lease it had left behind).
//!
//! What the protocol relies on is the apiserver's optimistic concurrency:
//! an update or delete carrying a stale
//! `resourceVersion` precondition is a 409 Conflict, a create of an existing
//! name is a 409 AlreadyExists, and an update that changes nothing keeps the
//! `resourceVersion` (k8s.io/apiserver pkg/registry/generic/registry/store.go,
//! Update and Delete with preconditions; API conventions, "Concurrency Control
//! and Consistency"). client-go's leaderelection judges expiry the same way
//! (observed record unchanged for leaseDurationSeconds, local clock).

use std::time::Duration;

use capi_sim::Line;
use conductor::lifecycle::coordination::lease::{Leases, cluster_lease};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;

/// A client of the shared control plane and a Lease namespace of this
/// test's own (created by the conductor's `prepare`, as at startup).
async fn client() -> (kube::Client, String) {
    let client = capi_sim::controlplane::shared(Line::V1beta1)
        .client()
        .await
        .unwrap();
    let ns = format!(
        "leases-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    conductor::lifecycle::coordination::lease::prepare(&client, &ns)
        .await
        .unwrap();
    (client, ns)
}

async fn wait_gone(api: &Api<Lease>, name: &str) {
    for _ in 0..100 {
        if api.get_opt(name).await.unwrap().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("lease {name} still there");
}

#[tokio::test]
async fn one_holder_release_and_expiry() {
    let (client, ns) = client().await;
    let d = Duration::from_secs(3);
    let a = Leases::new(client.clone(), &ns, "host-a-1", d, true);
    let b = Leases::new(client.clone(), &ns, "host-b-2", d, true);
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let name = cluster_lease("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e");

    let held = a.try_acquire(&name).await.unwrap();
    assert!(b.try_acquire(&name).await.is_err(), "held by a");
    assert!(
        a.try_acquire(&name).await.is_err(),
        "a's other tasks wait too"
    );
    // Renewed by a (every second): never expires for b.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(b.try_acquire(&name).await.is_err(), "renewed: still a's");
    assert!(held.valid());
    drop(held);
    wait_gone(&api, &name).await;

    // A holder that stopped renewing (killed): taken after the duration,
    // counted from when b first saw that record.
    put_lease(&api, &name, "host-dead-9").await;
    let seen = std::time::Instant::now();
    assert!(b.try_acquire(&name).await.is_err(), "not expired yet");
    let taken = loop {
        if let Ok(h) = b.try_acquire(&name).await {
            break h;
        }
        assert!(seen.elapsed() < Duration::from_secs(10), "never taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        seen.elapsed() >= d,
        "taken before its duration: {:?}",
        seen.elapsed()
    );
    let l = api.get(&name).await.unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("host-b-2"));
    drop(taken);
    wait_gone(&api, &name).await;
}

/// A lease record held by `holder` that nobody renews.
async fn put_lease(api: &Api<Lease>, name: &str, holder: &str) {
    let l: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3}
    }))
    .unwrap();
    api.create(&PostParams::default(), &l).await.unwrap();
}

#[tokio::test]
async fn a_release_that_lost_a_race_with_a_renewal_still_deletes() {
    let (client, ns) = client().await;
    let a = Leases::new(
        client.clone(),
        &ns,
        "host-a-1",
        Duration::from_secs(30),
        true,
    );
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let name = cluster_lease("0b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e");
    let held = a.try_acquire(&name).await.unwrap();
    // A renewal the drop cancelled after the apiserver applied it: the
    // record moved on, the holder's resourceVersion did not.
    let mut l = api.get(&name).await.unwrap();
    let before = l.metadata.resource_version.clone();
    l.spec.as_mut().unwrap().lease_transitions = Some(7);
    let l = api
        .replace(&name, &PostParams::default(), &l)
        .await
        .unwrap();
    assert_ne!(l.metadata.resource_version, before, "the record moved on");
    drop(held);
    wait_gone(&api, &name).await;
}

#[tokio::test]
async fn a_stale_lease_of_our_own_is_taken_after_its_duration() {
    let (client, ns) = client().await;
    let d = Duration::from_secs(2);
    let a = Leases::new(client.clone(), &ns, "host-a-1", d, true);
    let api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let name = cluster_lease("1b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e");
    // Left behind by this process (holder = us, nobody renewing).
    let l: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": "host-a-1", "leaseDurationSeconds": 2}
    }))
    .unwrap();
    api.create(&PostParams::default(), &l).await.unwrap();
    let seen = std::time::Instant::now();
    assert!(
        a.try_acquire(&name).await.is_err(),
        "fresh: another task of ours may hold it"
    );
    let held = loop {
        if let Ok(h) = a.try_acquire(&name).await {
            break h;
        }
        assert!(
            seen.elapsed() < Duration::from_secs(10),
            "waited for ever on our own stale lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(seen.elapsed() >= d);
    drop(held);
    wait_gone(&api, &name).await;
}

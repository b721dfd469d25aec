//! The controllers' scheduler: a pass visits the Clusters whose objects
//! changed since the last pass (as controller-runtime reconciles on watch
//! events), nothing at rest, everything after the history it reads was
//! compacted; and a cluster still goes all the way to Provisioned.

use capi_sim::controllers::Scheduler;
use capi_sim::resources::Line;
use capi_sim::store::Store;
use serde_json::{Value, json};

mod support;
use support::{apply_all, start_with};

/// Passes until one writes nothing (bounded); returns the passes run.
fn settle(sim: &capi_sim::Sim, sched: &mut Scheduler, line: Line) -> usize {
    for n in 1..=200 {
        let (events, errors) = sim.with(|s| {
            let p = sched.pass(s, line);
            ((p.events.len(), p.errors), p.events)
        });
        assert!(errors.is_empty(), "controller errors: {errors:?}");
        if events == 0 {
            return n;
        }
    }
    panic!("the controllers never settled");
}

fn visit(sim: &capi_sim::Sim, sched: &mut Scheduler, line: Line) -> usize {
    sim.with(|s| {
        let p = sched.pass(s, line);
        (p.visited, p.events)
    })
}

fn get(s: &Store, group: &str, plural: &str, name: &str) -> Value {
    let r = s.find(group, plural).unwrap();
    s.get(r, Some("default"), name).unwrap()
}

const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Reconciled objects labelled for `cluster` (every controller kind).
fn reconciled_of(s: &Store, cluster: &str) -> usize {
    [
        ("infrastructure.cluster.x-k8s.io", "openstackclusters"),
        ("cluster.x-k8s.io", "clusters"),
        ("controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes"),
        ("cluster.x-k8s.io", "machinedeployments"),
        ("cluster.x-k8s.io", "machinesets"),
        ("cluster.x-k8s.io", "machines"),
        ("cluster.x-k8s.io", "machinehealthchecks"),
        ("addons.cluster.x-k8s.io", "helmchartproxies"),
        ("addons.cluster.x-k8s.io", "helmreleaseproxies"),
    ]
    .iter()
    .filter_map(|(g, p)| s.find(g, p))
    .map(|r| {
        s.objects(r)
            .filter(|o| {
                o.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name")
                    .and_then(Value::as_str)
                    == Some(cluster)
            })
            .count()
    })
    .sum()
}

async fn scheduled(line: Line) {
    let v2 = line == Line::V1beta2;
    // No ticking controllers: this test runs the passes itself.
    let (client, sim) = start_with(line, None).await;
    // Ten clusters c1..c10, every object labelled with its Cluster as the
    // conductor renders them, but the ClusterResourceSets: those name no
    // Cluster and are visited every pass.
    for i in 1..=10 {
        apply_all(&client, v2, |kind, obj| {
            let text = obj
                .to_string()
                .replace("c1", &format!("c{i}"))
                .replace("\"ccm\"", &format!("\"ccm-c{i}\""));
            *obj = serde_json::from_str(&text).unwrap();
            if kind != "ClusterResourceSet" {
                obj["metadata"]["labels"][CLUSTER_LABEL] = json!(format!("c{i}"));
            }
        })
        .await;
    }
    let loose = 10;
    let mut sched = Scheduler::default();
    settle(&sim, &mut sched, line);
    sim.read(|s| {
        for i in 1..=10 {
            let c = get(s, "cluster.x-k8s.io", "clusters", &format!("c{i}"));
            assert_eq!(c.pointer("/status/phase"), Some(&json!("Provisioned")));
            let h = get(
                s,
                "addons.cluster.x-k8s.io",
                "helmreleaseproxies",
                &format!("ccm-c{i}-c{i}"),
            );
            assert_eq!(h.pointer("/status/status"), Some(&json!("deployed")));
        }
    });
    assert_eq!(visit(&sim, &mut sched, line), loose, "a fleet at rest");

    // A fault on one Machine of c3: the next pass visits c3's objects only,
    // and the health check replaces the Machine.
    let victim = sim.with(|s| {
        let r = s.find("cluster.x-k8s.io", "machines").unwrap();
        let mut m = s
            .objects(r)
            .find(|o| {
                o.pointer("/metadata/labels/cluster.x-k8s.io~1cluster-name") == Some(&json!("c3"))
            })
            .cloned()
            .unwrap();
        let name = m["metadata"]["name"].as_str().unwrap().to_string();
        m["metadata"]["annotations"]["capi-sim/unhealthy"] = json!("true");
        let (_, ev) = s.update(r, Some("default"), &name, m, false).unwrap();
        (name, ev)
    });
    let c3 = sim.read(|s| reconciled_of(s, "c3"));
    assert_eq!(
        visit(&sim, &mut sched, line),
        c3 + loose,
        "only c3 is woken"
    );
    settle(&sim, &mut sched, line);
    sim.read(|s| {
        let r = s.find("cluster.x-k8s.io", "machines").unwrap();
        assert!(s.get(r, Some("default"), &victim).is_err(), "remediated");
        let c = get(s, "cluster.x-k8s.io", "clusters", "c3");
        assert_eq!(c.pointer("/status/phase"), Some(&json!("Provisioned")));
        assert_eq!(reconciled_of(s, "c3"), c3, "the Machine was replaced");
    });
    assert_eq!(visit(&sim, &mut sched, line), loose);

    // A namespace-wide fault wakes every Cluster of the namespace.
    sim.with(|s| {
        let r = s.find("", "namespaces").unwrap();
        let mut n = s.get(r, None, "default").unwrap();
        n["metadata"]["annotations"] = json!({"capi-sim/never-ready": "true"});
        let (_, ev) = s.update(r, None, "default", n, false).unwrap();
        ((), ev)
    });
    let all = |s: &Store| {
        (1..=10)
            .map(|i| reconciled_of(s, &format!("c{i}")))
            .sum::<usize>()
            + loose
    };
    let expected = sim.read(all);
    assert_eq!(visit(&sim, &mut sched, line), expected);
    settle(&sim, &mut sched, line);

    // A change whose event was compacted away before the scheduler read
    // it: the next pass cannot know what changed and visits everything.
    sim.with(|s| {
        let r = s.find("cluster.x-k8s.io", "machinedeployments").unwrap();
        let mut md = s.get(r, Some("default"), "c5-md").unwrap();
        md["spec"]["replicas"] = json!(3);
        s.update(r, Some("default"), "c5-md", md, false).unwrap();
        s.compact();
        ((), vec![])
    });
    // (Plus the Machine the MachineSet creates earlier in the same pass.)
    let expected = sim.read(all);
    let visited = visit(&sim, &mut sched, line);
    assert!(visited >= expected, "{visited} < {expected}");
    settle(&sim, &mut sched, line);
    assert_eq!(visit(&sim, &mut sched, line), loose);
    sim.read(|s| {
        let r = s.find("cluster.x-k8s.io", "machines").unwrap();
        let n = s
            .objects(r)
            .filter(|o| {
                o.pointer("/metadata/labels/cluster.x-k8s.io~1deployment-name")
                    == Some(&json!("c5-md"))
            })
            .count();
        assert_eq!(n, 3, "the lost change was still acted on");
    });
}

#[tokio::test]
async fn scheduler_v1beta1() {
    scheduled(Line::V1beta1).await;
}

#[tokio::test]
async fn scheduler_v1beta2() {
    scheduled(Line::V1beta2).await;
}

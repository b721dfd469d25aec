//! Unit tests of [`super`] (lease.rs), kept apart so the module reads as code.

use super::*;

fn lease(holder: Option<&str>, duration: Option<i32>) -> Lease {
    Lease {
        metadata: ObjectMeta::default(),
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: duration,
            ..LeaseSpec::default()
        }),
    }
}

const D: Duration = Duration::from_secs(15);

#[test]
fn absent_or_released_leases_are_taken_ours_are_not() {
    assert_eq!(verdict(None, Duration::ZERO, D), Verdict::Absent);
    assert_eq!(
        verdict(Some(&lease(None, Some(15))), Duration::ZERO, D),
        Verdict::Take
    );
    assert_eq!(
        verdict(Some(&lease(Some(""), Some(15))), Duration::ZERO, D),
        Verdict::Take
    );
    assert_eq!(
        verdict(Some(&lease(Some("a"), Some(15))), Duration::ZERO, D),
        Verdict::HeldBy("a".into()),
        "another task of this process holds it"
    );
    assert_eq!(
        verdict(Some(&lease(Some("a"), Some(15))), D, D),
        Verdict::Take,
        "ours, but nobody renewed it for a whole duration: stale"
    );
}

#[test]
fn another_holder_keeps_it_until_unchanged_for_its_own_duration() {
    let l = lease(Some("b"), Some(30));
    assert_eq!(
        verdict(Some(&l), Duration::from_secs(29), D),
        Verdict::HeldBy("b".into()),
        "the record's duration wins over ours"
    );
    assert_eq!(verdict(Some(&l), Duration::from_secs(30), D), Verdict::Take);
    // No duration in the record: ours.
    let l = lease(Some("b"), None);
    assert_eq!(
        verdict(Some(&l), Duration::from_secs(14), D),
        Verdict::HeldBy("b".into())
    );
    assert_eq!(verdict(Some(&l), D, D), Verdict::Take);
}

#[test]
fn cluster_lease_names_are_valid_object_names() {
    let n = cluster_lease("5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e");
    assert!(n.len() <= 253);
    assert!(
        n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    );
}

//! Names on the management cluster (pure).
//!
//! - `stack_id` (stored in `cluster.stack_id`, the CAPI Cluster's name and
//!   the prefix of every object): the Magnum cluster name lowercased, runs of
//!   anything but `[a-z0-9]` as `-`, trimmed, at most 30 characters, then `-`
//!   and a 12-character Magnum short id (as magnum-capi-helm names its
//!   releases), so two clusters with one name never collide and the result is
//!   a DNS-1035 label of at most 43 characters.
//! - Namespaces: one per project, `<prefix><project_id>`.
//! - Object names: `<stack_id>-<suffix>`, at most 63 characters.

/// Lowercase `[a-z0-9-]`, no leading/trailing `-`, at most `max` characters.
fn clean(name: &str, max: usize) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut s: String = out.trim_matches('-').chars().take(max).collect();
    while s.ends_with('-') {
        s.pop();
    }
    s
}

/// A DNS-1035-safe form of `name` (at most `max` characters, starts with a letter).
pub fn sanitize(name: &str, max: usize) -> String {
    let mut s = clean(name, max);
    // A DNS-1035 label starts with a letter.
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        s = format!("k{s}");
        s.truncate(max);
    }
    s
}

/// A new `stack_id` for a cluster called `name` with short id `short`.
pub fn stack_id(name: Option<&str>, short: &str) -> String {
    let base = sanitize(name.unwrap_or("cluster"), 30);
    format!("{base}-{}", short.to_ascii_lowercase())
}

/// The namespace holding a project's clusters.
pub fn namespace(prefix: &str, project_id: &str) -> String {
    let mut s = format!("{prefix}{}", clean(project_id, 63));
    s.truncate(63);
    s.trim_end_matches('-').to_string()
}

/// `<stack_id>-<suffix>`, cut to 63 characters.
pub fn object_name(stack_id: &str, suffix: &str) -> String {
    let mut s = format!("{stack_id}-{suffix}");
    s.truncate(63);
    s.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns1035(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && !s.ends_with('-')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    #[test]
    fn names_are_dns_labels() {
        assert_eq!(
            stack_id(Some("My Cluster_01"), "ABCDEFGHIJKL"),
            "my-cluster-01-abcdefghijkl"
        );
        assert_eq!(stack_id(None, "abcdefghijkl"), "cluster-abcdefghijkl");
        for name in [
            "k8s.é.demo",
            "---",
            "9lives",
            &"x".repeat(100),
            "Ünïcödé Ñame",
            "a--b",
        ] {
            let s = stack_id(Some(name), "abcdefghijkl");
            assert!(dns1035(&s) && s.len() <= 43, "{name:?} -> {s:?}");
        }
        assert_eq!(
            namespace("magnum-", "9D3C1B2A4E5F46A7B8C9D0E1F2A3B4C5"),
            "magnum-9d3c1b2a4e5f46a7b8c9d0e1f2a3b4c5"
        );
        let long = object_name(
            &stack_id(Some(&"y".repeat(40)), "abcdefghijkl"),
            "control-plane-0123456789abcdef",
        );
        assert!(dns1035(&long), "{long}");
    }
}

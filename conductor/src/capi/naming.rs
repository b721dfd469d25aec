//! Names on the management cluster (pure).
//!
//! - `stack_id` (stored in `cluster.stack_id`, the CAPI Cluster's name and
//!   the prefix of every object): the Magnum cluster name lowercased, runs of
//!   anything but `[a-z0-9]` as `-`, trimmed, at most 30 characters, then `-`
//!   and a 12-character Magnum short id (as magnum-capi-helm names its
//!   releases), so two clusters with one name never collide and the result is
//!   a DNS-1035 label of at most 43 characters.
//! - Namespaces: one per project, `<prefix><project_id>`.
//! - Object names: `<stack_id>-<suffix>`, at most 63 characters; names that
//!   end in a spec hash keep the whole hash (the prefix is cut instead), so a
//!   spec change always gives a new name, however long the cluster name.
//! - Node group keys: the name of a nodegroup on the management cluster
//!   (object names, the `magnum.openstack.org/nodegroup` label). A Magnum
//!   name that is already a short DNS label is used as it is
//!   (`default-worker`); anything else becomes a cleaned prefix plus the
//!   first 8 characters of the nodegroup's uuid, so two Magnum names that
//!   clean to the same text never collide.

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

/// `<stack_id>-<part>-<hash>`, at most 63 characters, the hash kept whole.
pub fn hashed_name(stack_id: &str, part: &str, hash: &str) -> String {
    let mut prefix = format!("{stack_id}-{part}");
    prefix.truncate(62usize.saturating_sub(hash.len()));
    format!("{}-{hash}", prefix.trim_end_matches('-'))
}

/// Longest node group key: `<stack_id>` (43) + `-` + key + a hashed
/// template suffix still fits in 63 characters with the hash kept whole.
pub const GROUP_KEY_MAX: usize = 19;

/// The key of nodegroup `name` (uuid `uuid`) on the management cluster.
pub fn group_key(name: &str, uuid: &str) -> String {
    let dns_label = !name.is_empty()
        && name.len() <= GROUP_KEY_MAX
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if dns_label {
        return name.to_string();
    }
    let short: String = uuid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("{}-{short}", sanitize(name, GROUP_KEY_MAX - 9))
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

    #[test]
    fn hashed_names_keep_their_hash() {
        let stack = stack_id(Some(&"z".repeat(40)), "abcdefghijkl");
        let a = hashed_name(&stack, "default-worker", "0123abcd");
        let b = hashed_name(&stack, "default-worker", "9876fedc");
        assert!(a.ends_with("-0123abcd") && a.len() <= 63, "{a}");
        assert_ne!(a, b, "a spec change must give a new name");
        assert!(dns1035(&a));
        assert_eq!(
            hashed_name("k8s-abcdefghijkl", "control-plane", "0123abcd"),
            "k8s-abcdefghijkl-control-plane-0123abcd"
        );
    }

    #[test]
    fn group_keys_are_short_labels() {
        let u = "5B7C6A52-6f3e-4b8a-9d3e-0f6a1b2c3d4e";
        assert_eq!(group_key("default-worker", u), "default-worker");
        assert_eq!(group_key("gpu", u), "gpu");
        for name in [
            "GPU Nodes",
            "gpu_a",
            "a-very-long-nodegroup-name",
            "9lives",
            "ñ",
            "",
        ] {
            let k = group_key(name, u);
            assert!(dns1035(&k) && k.len() <= GROUP_KEY_MAX, "{name:?} -> {k:?}");
            assert!(k.ends_with("-5b7c6a52"), "{name:?} -> {k:?}");
        }
        assert_ne!(
            group_key("gpu_a", u),
            group_key("gpu-a_", "0f6a1b2c-6f3e-4b8a-9d3e-5b7c6a526f3e")
        );
        // The longest key still leaves room for a hashed template name.
        let stack = stack_id(Some(&"y".repeat(40)), "abcdefghijkl");
        let md = object_name(&stack, &group_key("a-very-long-nodegroup-name", u));
        assert!(md.len() <= 63 && md.ends_with("-5b7c6a52"), "{md}");
    }
}

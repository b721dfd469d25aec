"""magnum-api side of the Rust magnum-conductor (see README.md)."""

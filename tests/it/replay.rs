//! Replay of recorded messages (see tests/fixtures/rpc).

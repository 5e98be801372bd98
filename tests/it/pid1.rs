//! The daemon under systemd as PID 1: the Debian package installed and checked in a booted bookworm container.
//!
//! `systemd-analyze verify` and `systemd-socket-activate` check the units' text and the
//! descriptor handover, not the service: `DynamicUser=`, `SocketMode=`, the sandbox and the
//! watchdog act only under the real manager. This test packages the built binary
//! (`packaging/debian/build`, from the debug build: a release build costs minutes on 2 cores),
//! boots Debian bookworm (systemd 252) with `systemd-nspawn --boot` (`tests/pid1/run`, which
//! builds the root file system once into `target/pid1/`), and has a oneshot unit inside run
//! `tests/pid1/checks`, which writes one line per check. A machine that cannot boot the
//! container (not root, no debootstrap or systemd-nspawn) fails here with the reason: it never
//! passes without having booted.

use std::path::Path;
use std::process::Command;

use crate::install::repository;

/// Every check `tests/pid1/checks` runs, in its order; each must report `ok`.
const CHECKS: [&str; 18] = [
    "package-installs",
    "man-and-completion",
    "no-procps",
    "start-ready",
    "status-true",
    "search-answers",
    "stdio-server-under-hardening",
    "journal-priorities",
    "reload-applies",
    "reload-refuses-a-broken-file",
    "watchdog-restarts-a-frozen-daemon",
    "restart-on-failure",
    "clean-stop-empties-the-log",
    "unix-socket-activation",
    "http-socket-activation",
    "broken-config-is-not-restarted",
    "manual-install",
    "user-units",
];

fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {what}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    eprint!("{stderr}");
    stdout
}

#[test]
fn the_package_runs_under_systemd_as_pid_1() {
    let repository = repository();
    let binary = Path::new(env!("CARGO_BIN_EXE_mcp-mirror"));
    let fixture = Path::new(env!("CARGO_BIN_EXE_mcp-fixture"));
    let output = repository.join("target/pid1/deb");
    let package = run(
        Command::new("bash")
            .arg(repository.join("packaging/debian/build"))
            .arg("--binary")
            .arg(binary)
            .arg("--output")
            .arg(&output)
            // The package is unpacked once, right away: compressing it would only cost time.
            .env("DEB_COMPRESSION", "none"),
        "packaging/debian/build",
    );
    let package = package.trim();
    let results = run(
        Command::new("bash")
            .arg(repository.join("tests/pid1/run"))
            .arg(package)
            .arg(binary)
            .arg(fixture),
        "tests/pid1/run (booting bookworm with systemd-nspawn)",
    );
    let failures: Vec<&str> = results
        .lines()
        .filter(|line| line.starts_with("FAIL "))
        .collect();
    let missing: Vec<&&str> = CHECKS
        .iter()
        .filter(|name| !results.lines().any(|line| line == format!("ok {name}")))
        .collect();
    assert!(
        failures.is_empty() && missing.is_empty(),
        "checks under PID-1 systemd failed: {failures:#?}\nnot ok: {missing:?}\n(the container's journal: journalctl -D target/pid1/machine/var/log/journal)\n{results}"
    );
}

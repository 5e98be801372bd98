//! Default locations: systemd's directories when it sets them, system paths for root, else XDG.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use directories::ProjectDirs;

const APPLICATION: &str = "mcp-mirror";

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|metadata| metadata.uid() == 0)
        .unwrap_or(false)
}

fn project_dirs() -> Option<ProjectDirs> {
    ProjectDirs::from("", "", APPLICATION)
}

/// The first directory systemd lists in `variable` (it separates several with ':').
fn systemd_directory(variable: &str) -> Option<PathBuf> {
    let value = std::env::var_os(variable)?;
    let text = value.to_string_lossy();
    let first = text.split(':').next()?.trim();
    (!first.is_empty()).then(|| PathBuf::from(first))
}

pub fn default_config() -> PathBuf {
    if let Some(directory) = systemd_directory("CONFIGURATION_DIRECTORY") {
        return directory.join("daemon.toml");
    }
    if running_as_root() {
        return PathBuf::from("/etc/mcp-mirror/daemon.toml");
    }
    match project_dirs() {
        Some(dirs) => dirs.config_dir().join("daemon.toml"),
        None => PathBuf::from("/etc/mcp-mirror/daemon.toml"),
    }
}

pub fn default_database() -> PathBuf {
    if let Some(directory) = systemd_directory("STATE_DIRECTORY") {
        return directory.join("catalog.db");
    }
    if running_as_root() {
        return PathBuf::from("/var/lib/mcp-mirror/catalog.db");
    }
    match project_dirs() {
        Some(dirs) => dirs
            .state_dir()
            .unwrap_or_else(|| dirs.data_local_dir())
            .join("catalog.db"),
        None => PathBuf::from("/var/lib/mcp-mirror/catalog.db"),
    }
}

pub fn default_socket() -> PathBuf {
    if let Some(directory) = systemd_directory("RUNTIME_DIRECTORY") {
        return directory.join("mcp-mirror.sock");
    }
    if running_as_root() {
        return PathBuf::from("/run/mcp-mirror/mcp-mirror.sock");
    }
    match project_dirs() {
        Some(dirs) => match dirs.runtime_dir() {
            Some(runtime) => runtime.join("mcp-mirror.sock"),
            None => dirs
                .state_dir()
                .unwrap_or_else(|| dirs.data_local_dir())
                .join("mcp-mirror.sock"),
        },
        None => PathBuf::from("/run/mcp-mirror/mcp-mirror.sock"),
    }
}

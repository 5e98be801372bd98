//! Default locations (systemd's directories when it sets them, system paths for root, else
//! XDG), and the owner-only creation of the state directory and the database file.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use directories::ProjectDirs;

const APPLICATION: &str = "mcp-mirror";
/// The state directory: only the daemon's user may list or enter it.
const PRIVATE_DIRECTORY_MODE: u32 = 0o700;
/// The database: only the daemon's user may read it; SQLite gives `-wal` and `-shm` the same.
const PRIVATE_FILE_MODE: u32 = 0o600;

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

/// Creates `directory` and its missing parents owner-only (0700) whatever the umask, so the
/// catalog is not readable by other local users; a directory that exists is left as it is.
pub(crate) fn create_private_directory(directory: &Path) -> io::Result<()> {
    if directory.as_os_str().is_empty() || directory.is_dir() {
        return Ok(());
    }
    if let Some(parent) = directory.parent() {
        create_private_directory(parent)?;
    }
    match DirBuilder::new()
        .mode(PRIVATE_DIRECTORY_MODE)
        .create(directory)
    {
        // The umask may have taken bits off the mode we asked for; set it exactly.
        Ok(()) => {
            std::fs::set_permissions(directory, Permissions::from_mode(PRIVATE_DIRECTORY_MODE))
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && directory.is_dir() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Creates an empty `path` owner-only (0600) whatever the umask, unless it exists. Done before
/// SQLite opens the database, because SQLite creates `-wal` and `-shm` with the database's mode.
pub(crate) fn create_private_file(path: &Path) -> io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
    {
        Ok(file) => file.set_permissions(Permissions::from_mode(PRIVATE_FILE_MODE)),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

//! What a valid file names outside itself, looked at without changing anything: the database's
//! file and directory, the socket's place, token files' modes and the model directory.
//!
//! `serve`, `reload` and `check` all run these through `config::load`, so they say the same
//! words. Errors are what would stop the daemon; warnings are what it survives with less (a
//! model that cannot load leaves search lexical).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::raw::RawConfig;
use super::source::expand_credentials;
use super::source::SourceFile;
use super::{Config, ConfigError};

/// The longest path a Unix socket may be bound at (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH_BYTES: usize = 107;

/// The files a sentence-transformers directory must hold for `semantic::Encoder::load`.
const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// What the environment checks found.
#[derive(Default)]
pub(super) struct Findings {
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigError>,
}

/// Looks at every path `config` names; reads metadata only (no file is created or opened for
/// writing, and the database is never opened).
pub(super) fn check(
    source: &SourceFile,
    raw: &RawConfig,
    config: &Config,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Findings {
    let mut findings = Findings::default();
    let at = |value: &Option<Spanned<String>>, key: &str, message: String| match value {
        Some(value) => source.error(&value.span(), key, message),
        None => ConfigError {
            file: source.path.to_path_buf(),
            line: None,
            key: Some(key.to_string()),
            message,
        },
    };
    if let Err(message) = database_place(&config.daemon.database) {
        let error = at(&raw.daemon.database, "daemon.database", message);
        findings.errors.push(error);
    }
    if let Err(message) = socket_place(&config.daemon.socket) {
        findings
            .errors
            .push(at(&raw.daemon.socket, "daemon.socket", message));
    }
    for (name, table) in &raw.servers {
        let Some(file) = &table.get_ref().bearer_token_file else {
            continue;
        };
        let path = source.resolve(&expand_credentials(file.get_ref(), lookup_env));
        if let Some(message) = open_to_others(&path) {
            let key = format!("servers.{}.bearer_token_file", name.get_ref());
            findings
                .warnings
                .push(source.error(&file.span(), &key, message));
        }
    }
    if let Some(model) = &config.search.semantic_model {
        if let Err(message) = model_directory(model) {
            let message = format!("{message}: serve starts, and search stays lexical");
            let key = "search.semantic_model";
            findings
                .warnings
                .push(at(&raw.search.semantic_model, key, message));
        }
    }
    findings
}

/// A token file others may read: a warning for a server's token (the HTTP face's tokens are
/// refused outright, in `http`).
fn open_to_others(path: &Path) -> Option<String> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "{} is open to group or others (mode {mode:04o}): a token file should be private to the daemon's user (chmod 600 it)",
            path.display()
        )
    })
}

/// `access(2)` for this process's user: whether it may do `mode` (`libc::W_OK` and friends).
fn may(path: &Path, mode: libc::c_int) -> io::Result<()> {
    let text = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))?;
    // SAFETY: access only reads the NUL-terminated path we pass.
    if unsafe { libc::access(text.as_ptr(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The directory a file at `path` goes in: its parent, `.` for a bare name.
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A directory the daemon will create files in: it exists and this user may create files in it,
/// or its nearest existing ancestor lets this user create it.
fn directory_for_files(directory: &Path) -> Result<(), String> {
    let mut existing = directory;
    while !existing.exists() {
        match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
            _ => return Ok(()),
        }
    }
    if !existing.is_dir() {
        return Err(format!("{} is not a directory", existing.display()));
    }
    may(existing, libc::W_OK | libc::X_OK).map_err(|error| {
        if existing == directory {
            format!("cannot create files in {}: {error}", directory.display())
        } else {
            format!(
                "{} does not exist and cannot be created in {}: {error}",
                directory.display(),
                existing.display()
            )
        }
    })
}

/// The database: a file this user may read and write, in a directory it may create the
/// journal in, which nobody else may write to (they could replace the catalog under it).
fn database_place(database: &Path) -> Result<(), String> {
    let directory = directory_of(database);
    directory_for_files(&directory)?;
    if let Ok(metadata) = std::fs::metadata(&directory) {
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(format!(
                "{} is writable by group or others (mode {mode:04o}): they could replace the catalog (chmod 700 it)",
                directory.display()
            ));
        }
    }
    match std::fs::metadata(database) {
        Ok(metadata) if metadata.is_dir() => Err(format!(
            "{} is a directory, not a database file",
            database.display()
        )),
        Ok(_) => may(database, libc::R_OK | libc::W_OK)
            .map_err(|error| format!("cannot read and write {}: {error}", database.display())),
        Err(_) => Ok(()),
    }
}

/// The socket: a path short enough to bind, where nothing but a socket is, in a directory the
/// daemon may create (or, when systemd made the socket, already holding it).
fn socket_place(socket: &Path) -> Result<(), String> {
    let length = socket.as_os_str().len();
    if length > MAX_SOCKET_PATH_BYTES {
        return Err(format!(
            "{} is {length} bytes long; a Unix socket's path may be at most {MAX_SOCKET_PATH_BYTES}",
            socket.display()
        ));
    }
    match std::fs::symlink_metadata(socket) {
        Ok(metadata) if metadata.file_type().is_socket() => Ok(()),
        Ok(_) => Err(format!("{} exists and is not a socket", socket.display())),
        Err(_) => directory_for_files(&directory_of(socket)),
    }
}

/// The model directory holds what the encoder loads first; its contents are checked when the
/// daemon loads it.
fn model_directory(model: &Path) -> Result<(), String> {
    if !model.is_dir() {
        return Err(format!("{} is not a directory", model.display()));
    }
    let missing: Vec<&str> = MODEL_FILES
        .into_iter()
        .filter(|file| !model.join(file).is_file())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} has no {} (a sentence-transformers directory holds config.json, tokenizer.json and model.safetensors)",
            model.display(),
            missing.join(", ")
        ))
    }
}

//! The socket file the daemon bound (`SocketFile`): opened at start, checked by the health loop.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::net::UnixListener;

use crate::socket;

/// Where the listening socket came from, and whether its file is ours to remove.
#[derive(Clone)]
pub(super) struct SocketFile {
    /// The socket's path, when it has one (a passed socket may be abstract).
    pub(super) path: Option<PathBuf>,
    pub(super) passed: bool,
    /// Device and inode of the file we bound; `None` when systemd owns the file.
    bound_file: Option<(u64, u64)>,
}

impl SocketFile {
    /// Listens on the socket systemd passed, if any, else binds `path`.
    pub(super) fn open(
        path: &Path,
        passed: Option<OwnedFd>,
    ) -> anyhow::Result<(UnixListener, SocketFile)> {
        let Some(descriptor) = passed else {
            let listener = socket::bind(path)?;
            let bound_file = std::fs::metadata(path)
                .map(|metadata| (metadata.dev(), metadata.ino()))
                .ok();
            let file = SocketFile {
                path: Some(path.to_path_buf()),
                passed: false,
                bound_file,
            };
            return Ok((listener, file));
        };
        let adopt = || -> io::Result<(UnixListener, Option<PathBuf>)> {
            let listener = std::os::unix::net::UnixListener::from(descriptor);
            // Fails unless the descriptor is a Unix socket, which is what we need to know.
            let address = listener.local_addr()?;
            listener.set_nonblocking(true)?;
            let path = address.as_pathname().map(Path::to_path_buf);
            Ok((UnixListener::from_std(listener)?, path))
        };
        let (listener, passed_path) = adopt().context(
            "systemd passed a file descriptor that is not a listening Unix socket (check ListenStream= in mcp-mirror.socket)",
        )?;
        if passed_path.as_deref() != Some(path) {
            tracing::info!(
                passed = ?passed_path,
                configured = %path.display(),
                "serving on the socket systemd passed, not the configured path"
            );
        }
        let file = SocketFile {
            path: passed_path,
            passed: true,
            bound_file: None,
        };
        Ok((listener, file))
    }

    /// Why clients can no longer reach us through the file we bound, if they cannot: it was
    /// deleted (a tmp cleaner, an operator's `rm`) or another process bound the path. A passed
    /// socket's file is systemd's, and is not checked.
    pub(super) fn lost(&self) -> Option<String> {
        let (Some(path), Some(identity)) = (&self.path, self.bound_file) else {
            return None;
        };
        match std::fs::metadata(path) {
            Ok(metadata) if (metadata.dev(), metadata.ino()) == identity => None,
            Ok(_) => Some(format!(
                "the socket file {} was replaced by another; clients no longer reach this daemon",
                path.display()
            )),
            Err(error) => Some(format!(
                "the socket file {} is gone ({error}); clients can no longer connect",
                path.display()
            )),
        }
    }

    /// Removes the socket file only if it is still the one we created: never one systemd made,
    /// nor one a newer daemon bound after ours went stale.
    pub(super) fn remove_file_if_ours(&self) {
        let (Some(path), Some(_)) = (&self.path, self.bound_file) else {
            return;
        };
        if self.lost().is_none() {
            if let Err(error) = std::fs::remove_file(path) {
                tracing::warn!(%error, path = %path.display(), "cannot remove the socket file");
            }
        }
    }
}

//! `mcp-mirror reload`: SIGHUP to the daemon with kill(2), then the reload's outcome from its socket.
//!
//! The units' `ExecReload=` runs it, so a reload needs nothing but our own binary: `/bin/kill`
//! (procps) is missing from minimal images, and `Type=notify-reload`, which would have systemd
//! send the signal itself, needs systemd 253 (Debian bookworm has 252).

use std::path::Path;
use std::time::{Duration, Instant};

use super::client::Client;
use super::ClientError;
use crate::protocol::{CatalogStatus, DaemonStatus, NoParams};

/// How long to wait for the daemon to say it applied (or refused) the file.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Sends SIGHUP to `pid` (else to the pid the socket's daemon reports). When the socket
/// answers, waits until the daemon has applied the new file, or refused it: a refused file is
/// an error (exit 1), so `systemctl reload` fails and says why. When it does not (a socket
/// the caller may not open), the signal alone is the reload.
pub fn reload(socket: &Path, pid: Option<u32>, as_json: bool) -> Result<(), ClientError> {
    let before = match Client::connect(socket).and_then(|mut client| daemon_status(&mut client)) {
        Ok(status) => Some(status),
        Err(error) if pid.is_none() => return Err(error),
        Err(_) => None,
    };
    let Some(target) = pid.or(before.as_ref().map(|status| status.pid)) else {
        return Err(ClientError::Usage("no daemon process id to signal".into()));
    };
    let pid = libc::pid_t::try_from(target)
        .ok()
        .filter(|pid| *pid > 0)
        .ok_or_else(|| ClientError::Usage(format!("{target} is not a process id")))?;
    // SAFETY: kill(2) only sends a signal; it touches no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        return Err(ClientError::Protocol(format!(
            "cannot send SIGHUP to process {pid}: {}",
            std::io::Error::last_os_error()
        )));
    }
    let Some(before) = before.filter(|status| status.pid == target) else {
        report(as_json, target, "signalled", None);
        return Ok(());
    };
    let deadline = Instant::now() + RELOAD_TIMEOUT;
    loop {
        std::thread::sleep(POLL_INTERVAL);
        let now = Client::connect(socket).and_then(|mut client| daemon_status(&mut client))?;
        if now.config_error_at.is_some() && now.config_error_at != before.config_error_at {
            let error = now.config_error.unwrap_or_default();
            report(as_json, target, "refused", Some(&error));
            return Err(ClientError::Protocol(format!(
                "the daemon refused the new configuration and keeps the previous one: {error}"
            )));
        }
        if now.config_loaded_at != before.config_loaded_at {
            report(as_json, target, "reloaded", None);
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ClientError::Protocol(format!(
                "sent SIGHUP to process {target}, but its socket reported no reload within {RELOAD_TIMEOUT:?}"
            )));
        }
    }
}

fn daemon_status(client: &mut Client) -> Result<DaemonStatus, ClientError> {
    Ok(client
        .call::<CatalogStatus>(&NoParams {}, Some(RELOAD_TIMEOUT))?
        .daemon)
}

fn report(as_json: bool, pid: u32, outcome: &str, error: Option<&str>) {
    if as_json {
        let mut answer = serde_json::json!({"pid": pid, "outcome": outcome});
        if let Some(error) = error {
            answer["error"] = error.into();
        }
        println!("{answer}");
    } else if error.is_none() {
        match outcome {
            "reloaded" => println!("mcp-mirror (pid {pid}) reloaded its configuration"),
            _ => println!("sent SIGHUP to mcp-mirror (pid {pid})"),
        }
    }
}

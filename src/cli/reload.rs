//! `mcp-mirror reload`: asks the daemon's socket to re-read its configuration (`daemon/reload`)
//! and prints that reload's outcome; where the socket cannot be asked, SIGHUP with kill(2).
//!
//! The socket's answer is the outcome of a reload that read the file after the request
//! arrived, so in a storm of reloads each caller hears its own (a signal names no sender, and
//! watching the status after one could report another's). The units' `ExecReload=` runs this,
//! so a reload needs nothing but our own binary: `/bin/kill` (procps) is missing from minimal
//! images, and `Type=notify-reload`, which would have systemd send the signal itself, needs
//! systemd 253 (Debian bookworm has 252).

use std::path::Path;
use std::time::Duration;

use super::client::Client;
use super::ClientError;
use crate::protocol::{
    CatalogStatus, DaemonReload, NoParams, ReloadOutcome, ReloadResult, METHOD_NOT_FOUND,
};

/// How long to wait for the daemon to say it applied (or refused) the file.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Asks the daemon at `socket` to reload when it is the process `pid` (or any, without one),
/// and waits for the outcome: a refused file is an error (exit 1), so `systemctl reload` fails
/// and says why. When the socket cannot be asked (not ours to open, another daemon's, or a
/// daemon from before `daemon/reload`), `pid` gets SIGHUP and the signal alone is the reload.
pub fn reload(socket: &Path, pid: Option<u32>, as_json: bool) -> Result<(), ClientError> {
    let asked = Client::connect(socket).and_then(|mut client| {
        let status = client.call::<CatalogStatus>(&NoParams {}, Some(RELOAD_TIMEOUT))?;
        Ok((client, status.daemon.pid))
    });
    let target = match asked {
        Ok((mut client, daemon)) if pid.map_or(true, |pid| pid == daemon) => {
            match client.call::<DaemonReload>(&NoParams {}, Some(RELOAD_TIMEOUT)) {
                Ok(result) => return reported(as_json, daemon, result),
                Err(ClientError::Remote { code, .. }) if code == METHOD_NOT_FOUND => daemon,
                Err(error) => return Err(error),
            }
        }
        Ok(_) => pid.unwrap_or_default(),
        Err(error) => pid.ok_or(error)?,
    };
    signal(target)?;
    print_outcome(as_json, target, "signalled", None);
    Ok(())
}

/// Sends SIGHUP to `target`.
fn signal(target: u32) -> Result<(), ClientError> {
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
    Ok(())
}

/// Prints the daemon's answer; a refused file is the command's error.
fn reported(as_json: bool, pid: u32, result: ReloadResult) -> Result<(), ClientError> {
    match result.outcome {
        ReloadOutcome::Applied => {
            print_outcome(as_json, pid, "reloaded", None);
            Ok(())
        }
        ReloadOutcome::Refused => {
            let error = result.error.unwrap_or_default();
            print_outcome(as_json, pid, "refused", Some(&error));
            Err(ClientError::Protocol(format!(
                "the daemon refused the new configuration and keeps the previous one: {error}"
            )))
        }
    }
}

fn print_outcome(as_json: bool, pid: u32, outcome: &str, error: Option<&str>) {
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

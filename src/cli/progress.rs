//! The progress line `refresh --wait` shows on a terminal while it waits.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::client::Client;
use super::render::escaped;
use crate::protocol::{CatalogStatus, NoParams};

const POLL_INTERVAL: Duration = Duration::from_millis(200);
const TICK_INTERVAL: Duration = Duration::from_millis(100);
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// A spinner on stderr with each server's state and the time spent, from `catalog/status`
/// polled on a second connection. indicatif draws it only when stderr is a terminal.
pub struct Progress {
    done: Arc<AtomicBool>,
    poller: std::thread::JoinHandle<()>,
    bar: ProgressBar,
}

impl Progress {
    pub fn start(socket: &Path, server: Option<String>) -> Progress {
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} waiting {elapsed}: {msg}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(TICK_INTERVAL);
        let done = Arc::new(AtomicBool::new(false));
        let poller = {
            let (done, bar, socket) = (done.clone(), bar.clone(), socket.to_path_buf());
            std::thread::spawn(move || poll(&socket, server.as_deref(), &done, &bar))
        };
        Progress { done, poller, bar }
    }

    pub fn finish(self) {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.poller.join();
        self.bar.finish_and_clear();
    }
}

/// Shows the servers' states until `done`, or until the daemon stops answering.
fn poll(socket: &Path, server: Option<&str>, done: &AtomicBool, bar: &ProgressBar) {
    let Ok(mut client) = Client::connect(socket) else {
        return;
    };
    while !done.load(Ordering::Relaxed) {
        let Ok(status) = client.call::<CatalogStatus>(&NoParams {}, Some(STATUS_TIMEOUT)) else {
            return;
        };
        let states: Vec<String> = status
            .servers
            .iter()
            .filter(|entry| server.map_or(true, |name| entry.name == name))
            .map(|entry| {
                format!(
                    "{} {} ({} resources)",
                    escaped(&entry.name),
                    entry.state,
                    entry.resources
                )
            })
            .collect();
        bar.set_message(states.join(", "));
        std::thread::sleep(POLL_INTERVAL);
    }
}

//! The progress line `refresh --wait` shows on a terminal while it waits: a spinner with each
//! server's state, and a bar when one walk in flight has an estimate.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::client::Client;
use super::render::escaped;
use super::status::progress_text;
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
        if let Ok(style) = ProgressStyle::with_template(SPINNER) {
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

/// Shows the servers' states until `done`, or until the daemon stops answering: a bar
/// (entries of the expected count) while exactly one walk with an estimate runs, else a spinner.
fn poll(socket: &Path, server: Option<&str>, done: &AtomicBool, bar: &ProgressBar) {
    let Ok(mut client) = Client::connect(socket) else {
        return;
    };
    let (spinner, counted) = styles();
    let mut showing_bar = false;
    while !done.load(Ordering::Relaxed) {
        let Ok(status) = client.call::<CatalogStatus>(&NoParams {}, Some(STATUS_TIMEOUT)) else {
            return;
        };
        let shown: Vec<_> = status
            .servers
            .iter()
            .filter(|entry| server.map_or(true, |name| entry.name == name))
            .collect();
        let states: Vec<String> = shown
            .iter()
            .map(|entry| {
                let progress = entry
                    .live
                    .as_ref()
                    .and_then(|live| live.walk_progress.as_ref());
                match progress {
                    Some(progress) => format!(
                        "{} {} ({})",
                        escaped(&entry.name),
                        entry.state,
                        progress_text(progress)
                    ),
                    None => format!(
                        "{} {} ({} resources)",
                        escaped(&entry.name),
                        entry.state,
                        entry.resources
                    ),
                }
            })
            .collect();
        let estimated: Vec<_> = shown
            .iter()
            .filter_map(|entry| entry.live.as_ref()?.walk_progress.as_ref())
            .filter_map(|progress| Some((progress.entries, progress.expected_entries?)))
            .collect();
        match (estimated.as_slice(), &counted) {
            ([(entries, expected)], Some(style)) => {
                if !showing_bar {
                    bar.set_style(style.clone());
                    showing_bar = true;
                }
                bar.set_length((*expected).max(*entries));
                bar.set_position(*entries);
            }
            _ => {
                if showing_bar {
                    if let Some(style) = &spinner {
                        bar.set_style(style.clone());
                    }
                    showing_bar = false;
                }
            }
        }
        bar.set_message(states.join(", "));
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The spinner's and the bar's styles (`None` if a template does not parse).
fn styles() -> (Option<ProgressStyle>, Option<ProgressStyle>) {
    (
        ProgressStyle::with_template(SPINNER).ok(),
        ProgressStyle::with_template("[{bar:24}] {elapsed}: {wide_msg}")
            .ok()
            .map(|style| style.progress_chars("=> ")),
    )
}

const SPINNER: &str = "{spinner} waiting {elapsed}: {wide_msg}";

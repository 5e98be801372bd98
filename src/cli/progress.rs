//! The progress line `refresh --wait` shows on a terminal while it waits.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::Client;
use crate::protocol::{CatalogStatus, NoParams};

/// Each server's state and the time spent, redrawn in place from `catalog/status` on a
/// second connection.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    pub fn start(socket: &Path, server: Option<String>) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let socket = socket.to_path_buf();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let Ok(mut client) = Client::connect(&socket) else {
                return;
            };
            while !flag.load(Ordering::Relaxed) {
                let Ok(status) =
                    client.call::<CatalogStatus>(&NoParams {}, Some(Duration::from_secs(5)))
                else {
                    return;
                };
                let states: Vec<String> = status
                    .servers
                    .iter()
                    .filter(|entry| server.as_ref().map_or(true, |name| entry.name == *name))
                    .map(|entry| {
                        format!(
                            "{} {} ({} resources)",
                            entry.name, entry.state, entry.resources
                        )
                    })
                    .collect();
                eprint!(
                    "\r\x1b[2Kwaiting {:.1}s: {}",
                    started.elapsed().as_secs_f64(),
                    states.join(", ")
                );
                let _ = std::io::stderr().flush();
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Progress { done, thread }
    }

    pub fn finish(self) {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        eprint!("\r\x1b[2K");
    }
}

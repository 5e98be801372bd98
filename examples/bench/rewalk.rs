//! Rewalk (issue 30 item 2): a 1,000,000-resource server whose every entry changes at each walk, four walks; the daemon's RSS sampled throughout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use serde_json::{json, Value};

use crate::daemon::{fixture_stdio_table, start_daemon, Daemon, DaemonFiles};
use crate::measure::proc_status_kb;
use crate::process::{poll_until, write_json_atomically};
use crate::query::index_caught_up;
use crate::report::{mb, Report, Samples};

const RESOURCES: usize = 1_000_000;
const WALKS: usize = 4;
/// How long the daemon is left alone after the last walk before "after" is read.
const SETTLE: Duration = Duration::from_secs(20);

/// Every generated entry's title and description carry the prefix: a new prefix changes all.
fn scenario(walk: usize) -> Value {
    json!({"generate": RESOURCES, "page_size": 1000, "prefix": format!("v{walk}")})
}

/// Samples the daemon's VmRSS every 100 ms until `stop`; keeps the highest since the last take.
struct RssSampler {
    peak_kb: Arc<Mutex<u64>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let peak_kb = Arc::new(Mutex::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak_kb, stop) = (peak_kb.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rss) = proc_status_kb(pid, "VmRSS") {
                        if let Ok(mut peak) = peak_kb.lock() {
                            *peak = (*peak).max(rss);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        RssSampler {
            peak_kb,
            stop,
            thread: Some(thread),
        }
    }
    /// The highest sample since the last call, and a fresh start.
    fn take_peak_kb(&self) -> u64 {
        self.peak_kb
            .lock()
            .map(|mut peak| std::mem::take(&mut *peak))
            .unwrap_or(0)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits for the index to hold every resource and reflect the newest change.
fn wait_for_index(daemon: &Daemon) -> anyhow::Result<()> {
    let mut client = daemon.client()?;
    let mut last = Value::Null;
    poll_until(
        "the search index to catch up",
        Duration::from_secs(1800),
        Duration::from_millis(100),
        || {
            last = client.call("catalog/status", json!({}))?;
            Ok(index_caught_up(&last, RESOURCES as u64).then_some(()))
        },
    )
    .map_err(|error| anyhow!("{error:#}: {}", last["daemon"]["searchIndex"]))
}

struct WalkFigures {
    changed: u64,
    swap_ms: f64,
    seconds: f64,
    peak_kb: u64,
    after_kb: Option<u64>,
}

pub fn run(report: &mut Report) -> anyhow::Result<()> {
    report.line("## Rewalk: 1,000,000 resources, every one changed at each of 4 walks");
    report.line("");
    let files = DaemonFiles::fresh("rewalk")?;
    let scenario_path = files.path("scenario.json");
    write_json_atomically(&scenario_path, &scenario(0))?;
    let args = vec![
        "--name".into(),
        "rewalk".into(),
        "--scenario".into(),
        scenario_path.display().to_string(),
    ];
    let config = files.config("", &fixture_stdio_table("rewalk", &args))?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    let pid = daemon.process.pid();
    let sampler = RssSampler::start(pid);
    daemon.wait_for_walks(1, Duration::from_secs(1800))?;
    wait_for_index(&daemon)?;
    let first_load_seconds = started.elapsed().as_secs_f64();
    let first_load_peak = sampler.take_peak_kb();
    std::thread::sleep(Duration::from_secs(5));
    let baseline = proc_status_kb(pid, "VmRSS");
    sampler.take_peak_kb();
    let mut walks = Vec::new();
    for walk in 1..=WALKS {
        let swaps_before = daemon.swaps().len();
        let began = Instant::now();
        // The stdio fixture notices the file within 100 ms and sends list_changed.
        write_json_atomically(&scenario_path, &scenario(walk))?;
        let deadline = Instant::now() + Duration::from_secs(1800);
        let swap = loop {
            let swaps = daemon.swaps();
            if let Some(swap) = swaps
                .get(swaps_before..)
                .and_then(|new| new.first().copied())
            {
                break swap;
            }
            if Instant::now() > deadline {
                bail!("walk {walk} never swapped");
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        wait_for_index(&daemon)?;
        walks.push(WalkFigures {
            changed: swap.changed,
            swap_ms: swap.total_ms,
            seconds: began.elapsed().as_secs_f64(),
            peak_kb: sampler.take_peak_kb(),
            after_kb: proc_status_kb(pid, "VmRSS"),
        });
        eprintln!(
            "walk {walk}: changed {}, peak {} MB",
            swap.changed,
            mb(walks.last().map(|figures| figures.peak_kb))
        );
    }
    std::thread::sleep(SETTLE);
    let settled = proc_status_kb(pid, "VmRSS");
    let high_water = proc_status_kb(pid, "VmHWM");
    drop(sampler);
    let mut peaks = Samples::default();
    let rows: Vec<Vec<String>> = walks
        .iter()
        .enumerate()
        .map(|(number, figures)| {
            peaks.push(figures.peak_kb as f64 / 1024.0);
            vec![
                (number + 1).to_string(),
                figures.changed.to_string(),
                format!("{:.1}", figures.seconds),
                format!("{:.0}", figures.swap_ms),
                mb(Some(figures.peak_kb)),
                mb(figures.after_kb),
            ]
        })
        .collect();
    report.line(format!(
        "A stdio fixture of {RESOURCES} generated resources (page size 1,000) whose scenario \
         file gets a new `prefix` before each walk, so every title and description changes; \
         the daemon's VmRSS sampled every 100 ms. First load and index: {first_load_seconds:.0} s, \
         peak {} MB; baseline {} MB (5 s after). Re-walks: median peak {:.1} MB, max {:.1} MB \
         (budget: under 200 MB); {} MB {} s after the last index catch-up; VmHWM over the \
         whole run {} MB.",
        mb(Some(first_load_peak)),
        mb(baseline),
        peaks.median(),
        peaks.max(),
        mb(settled),
        SETTLE.as_secs(),
        mb(high_water),
    ));
    report.line("");
    report.table(
        &[
            "walk",
            "changed",
            "walk + index s",
            "swap ms",
            "peak RSS MB",
            "RSS after MB",
        ],
        &rows,
    );
    Ok(())
}

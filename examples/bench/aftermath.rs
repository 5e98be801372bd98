//! Aftermath: search latency in the minute after a first load of 1,000,000 resources becomes
//! visible, while the search index finishes indexing it, SQLite's full-text backlog runs and
//! the index merges its segments (issue 35: no class over 5 ms p99 at any moment), and then
//! during re-walks that each change a tenth of the catalog (the peer's `--revision-file`).
//! One client on one connection sends the query scenario's 8 classes in turn, without pause.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::daemon::{start_daemon, start_http_server, Daemon, DaemonFiles};
use crate::paths::bench_peer_binary;
use crate::process::{http_server_table, SocketClient};
use crate::query::{million_classes, wait_for_index, QueryClass};
use crate::report::{Report, Samples};

const RESOURCES: usize = 1_000_000;
/// The first phase's length after the load is visible (`--aftermath-minute-s=N` shortens it
/// to time the re-walks alone; the budget's moment is the whole minute).
const WINDOW: Duration = Duration::from_secs(60);
const SLICE_S: f64 = 10.0;
/// Re-walks timed after the minute, each changing a tenth of the catalog.
const REWALKS: usize = 3;

/// Every answer of one class: (seconds after the load was visible, milliseconds).
pub(crate) type Answers = Vec<Vec<(f64, f64)>>;

/// The first phase's length: `--aftermath-minute-s=N`, else `WINDOW`.
pub fn minute_from_arguments(arguments: &[String]) -> anyhow::Result<Duration> {
    match arguments
        .iter()
        .find_map(|argument| argument.strip_prefix("--aftermath-minute-s="))
    {
        Some(seconds) => Ok(Duration::from_secs(seconds.parse().map_err(|_| {
            anyhow::anyhow!("--aftermath-minute-s takes whole seconds, not {seconds}")
        })?)),
        None => Ok(WINDOW),
    }
}

pub fn run(report: &mut Report, window: Duration) -> anyhow::Result<()> {
    let files = DaemonFiles::fresh("aftermath")?;
    let args: Vec<String> = [
        "--name",
        "after",
        "--resources",
        &RESOURCES.to_string(),
        "--page-size",
        "1000",
        "--era",
        "legacy",
        "--revision-file",
        &files.path("revision.txt").display().to_string(),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let peer = start_http_server(
        &bench_peer_binary("fast-peer"),
        &args,
        &files.path("server.log"),
    )?;
    let config = files.config("", &http_server_table("after", &peer.url))?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    daemon.wait_for_walks(1, Duration::from_secs(600))?;
    let visible = Instant::now();
    let visible_after = started.elapsed().as_secs_f64();
    let classes = million_classes();
    let mut searcher = Searcher::new(
        daemon.client()?,
        &files.path("answers.tsv"),
        &classes,
        visible,
    )?;
    while visible.elapsed() < window {
        searcher.search_once()?;
    }
    let minute = searcher.take_phase();
    let rewalks = (1..=REWALKS)
        .map(|revision| {
            rewalk(
                &daemon,
                &files.path("revision.txt"),
                revision,
                &mut searcher,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let during_rewalks = searcher.take_phase();
    drop(daemon);
    drop(peer);
    write_report(
        report,
        &classes,
        (visible_after, window),
        (&minute, &during_rewalks),
        &rewalks,
    );
    Ok(())
}

/// The minute's table, then the re-walks' lines and table.
fn write_report(
    report: &mut Report,
    classes: &[QueryClass],
    (visible_after, window): (f64, Duration),
    (minute, during_rewalks): (&Phase, &Phase),
    rewalks: &[Rewalk],
) {
    report.line("## Aftermath: searches in the minute after a 1,000,000 first load");
    report.line("");
    report.line(format!(
        "Host: {}. The fast peer over HTTP, pages of 1,000, default configuration; the first \
         load visible {visible_after:.2} s after the daemon started, then one client sends the \
         query scenario's classes in turn without pause for {} s ({} searches, {} failed). \
         Milliseconds per answer, measured by the client.",
        crate::cpu_and_vector_flags(),
        window.as_secs(),
        minute.searches(),
        minute.failed,
    ));
    minute.error_lines(report);
    report.line("");
    let slices = (window.as_secs_f64() / SLICE_S).ceil() as usize;
    let windows: Vec<(f64, f64)> = (0..slices)
        .map(|slice| (slice as f64 * SLICE_S, (slice + 1) as f64 * SLICE_S))
        .collect();
    class_table(
        report,
        "each 10 s after visible",
        &class_rows(classes, &minute.answers, &windows),
    );
    report.line("");
    report.line(format!(
        "Then {REWALKS} re-walks, each after the last one's walk pace, each changing a tenth of \
         the catalog (the peer's revision file rewritten, then `catalog/refresh`); searches \
         timed from the rewrite until the index holds the swap ({} searches, {} failed):",
        during_rewalks.searches(),
        during_rewalks.failed,
    ));
    report.line("");
    for (revision, timing) in rewalks.iter().enumerate() {
        report.line(format!(
            "- re-walk {}: {} entries changed, walk and swap {:.2} s, the index current {:.2} s \
             after the rewrite",
            revision + 1,
            timing.changed,
            timing.walked_s,
            timing.window.1 - timing.window.0,
        ));
    }
    during_rewalks.error_lines(report);
    report.line("");
    let windows: Vec<(f64, f64)> = rewalks.iter().map(|timing| timing.window).collect();
    class_table(
        report,
        "each re-walk",
        &class_rows(classes, &during_rewalks.answers, &windows),
    );
}

/// The class table, its last column the p99 within each of `windows`.
pub(crate) fn class_table(report: &mut Report, windows: &str, rows: &[Vec<String>]) {
    let last = format!("p99 ms in {windows}");
    report.table(
        &["class", "searches", "p50 ms", "p99 ms", "max ms", &last],
        rows,
    );
}

/// One row per class: its answers' count, p50, p99 and max, and the p99 within each window
/// (seconds after the load was visible, from and to).
pub(crate) fn class_rows(
    classes: &[QueryClass],
    answers: &Answers,
    windows: &[(f64, f64)],
) -> Vec<Vec<String>> {
    classes
        .iter()
        .zip(answers)
        .map(|(class, timed)| {
            let all = Samples(timed.iter().map(|(_, ms)| *ms).collect());
            let per_window: Vec<String> = windows
                .iter()
                .map(|(from, to)| {
                    let within = Samples(
                        timed
                            .iter()
                            .filter(|(at, _)| at >= from && at < to)
                            .map(|(_, ms)| *ms)
                            .collect(),
                    );
                    format!("{:.1}", within.quantile(0.99))
                })
                .collect();
            vec![
                class.label.to_string(),
                all.len().to_string(),
                format!("{:.2}", all.median()),
                format!("{:.2}", all.quantile(0.99)),
                format!("{:.1}", all.max()),
                per_window.join(" / "),
            ]
        })
        .collect()
}

/// One client sending the classes in turn, each answer timed and kept by class.
pub(crate) struct Searcher<'a> {
    client: SocketClient,
    /// Every answer as a line, beside the daemon's log: when it was asked (Unix seconds, the
    /// log's clock), its class, its milliseconds, the error it answered if it failed, the
    /// engine that answered (`index`, `sqlite`) and the answer's note (why SQLite answered, or
    /// that the index answered from a previous state).
    timeline: std::io::BufWriter<std::fs::File>,
    classes: &'a [QueryClass],
    pub(crate) visible: Instant,
    /// What the searches of the current phase (the minute, the re-walks) came to.
    phase: Phase,
    asked: usize,
}

/// The searches of one phase: every answer by class, and the failed ones.
pub(crate) struct Phase {
    pub(crate) answers: Answers,
    pub(crate) failed: u64,
    /// Each distinct error a failed search answered, with its count.
    errors: std::collections::BTreeMap<String, u64>,
}

impl Phase {
    fn new(classes: usize) -> Phase {
        Phase {
            answers: vec![Vec::new(); classes],
            failed: 0,
            errors: Default::default(),
        }
    }

    pub(crate) fn searches(&self) -> usize {
        self.answers.iter().map(Vec::len).sum()
    }

    /// A line for each distinct error, with how many searches answered it.
    pub(crate) fn error_lines(&self, report: &mut Report) {
        for (error, count) in &self.errors {
            report.line(format!("- {count} searches failed with: {error}"));
        }
    }
}

impl<'a> Searcher<'a> {
    /// A searcher on `client` sending `classes` in turn, its answers timed from `visible` and
    /// written to `answers` (a file beside the daemon's log).
    pub(crate) fn new(
        client: SocketClient,
        answers: &Path,
        classes: &'a [QueryClass],
        visible: Instant,
    ) -> anyhow::Result<Searcher<'a>> {
        Ok(Searcher {
            client,
            timeline: std::io::BufWriter::new(std::fs::File::create(answers)?),
            classes,
            visible,
            phase: Phase::new(classes.len()),
            asked: 0,
        })
    }

    /// The phase so far, a new one begun.
    pub(crate) fn take_phase(&mut self) -> Phase {
        std::mem::replace(&mut self.phase, Phase::new(self.classes.len()))
    }

    pub(crate) fn search_once(&mut self) -> anyhow::Result<()> {
        self.asked += 1;
        let class = self.asked % self.classes.len();
        let asked = Instant::now();
        let asked_at_us = crate::measure::now_us();
        let answer = self.client.request(
            "catalog/search",
            self.classes[class].params(self.asked, false),
        )?;
        let milliseconds = asked.elapsed().as_secs_f64() * 1000.0;
        writeln!(
            self.timeline,
            "{:.6}\t{class}\t{milliseconds:.3}\t{}\t{}\t{}",
            asked_at_us as f64 / 1e6,
            answer["error"]["message"].as_str().unwrap_or(""),
            answer["result"]["engine"].as_str().unwrap_or(""),
            answer["result"]["note"].as_str().unwrap_or("")
        )?;
        match answer.get("result") {
            None => {
                self.phase.failed += 1;
                *self
                    .phase
                    .errors
                    .entry(
                        answer["error"]["message"]
                            .as_str()
                            .unwrap_or("?")
                            .to_string(),
                    )
                    .or_default() += 1;
            }
            Some(_) => self.phase.answers[class].push((
                asked.duration_since(self.visible).as_secs_f64(),
                milliseconds,
            )),
        }
        Ok(())
    }
}

/// One re-walk: when its searches were timed (seconds after visible), its walk and swap, and
/// how many entries it changed.
struct Rewalk {
    window: (f64, f64),
    walked_s: f64,
    changed: u64,
}

/// Waits out the walk pace (the last walk's duration, at least `min_walk_interval`'s 1 s),
/// rewrites the peer's revision file and refreshes, searching without pause from the rewrite
/// until the index holds the swap.
fn rewalk(
    daemon: &Daemon,
    revision_file: &Path,
    revision: usize,
    searcher: &mut Searcher<'_>,
) -> anyhow::Result<Rewalk> {
    let last_walk_ms = daemon.server_status("after")?["lastWalk"]["durationMs"]
        .as_u64()
        .unwrap_or(0);
    std::thread::sleep(Duration::from_millis(last_walk_ms.max(1000) + 500));
    let swaps_before = daemon.swaps().len();
    let mut control = daemon.client()?;
    let done = AtomicBool::new(false);
    let from = searcher.visible.elapsed().as_secs_f64();
    let walked_s = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let outcome = refresh_until_indexed(&mut control, revision_file, revision);
            done.store(true, Ordering::Release);
            outcome
        });
        while !done.load(Ordering::Acquire) {
            searcher.search_once()?;
        }
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("the re-walk's thread panicked"))?
    })?;
    let to = searcher.visible.elapsed().as_secs_f64();
    let changed = daemon
        .swaps()
        .get(swaps_before)
        .map(|swap| swap.changed)
        .unwrap_or(0);
    Ok(Rewalk {
        window: (from, to),
        walked_s,
        changed,
    })
}

/// Rewrites the revision file, refreshes the server and waits for the index to hold the
/// swap; returns the refresh's seconds (its walk and swap).
fn refresh_until_indexed(
    control: &mut SocketClient,
    revision_file: &Path,
    revision: usize,
) -> anyhow::Result<f64> {
    let staged = revision_file.with_extension("tmp");
    std::fs::write(&staged, format!("revision {revision}"))?;
    std::fs::rename(&staged, revision_file)?;
    let started = Instant::now();
    control.call("catalog/refresh", json!({"server": "after", "wait": true}))?;
    let walked_s = started.elapsed().as_secs_f64();
    wait_for_index(control, RESOURCES as u64, Duration::from_millis(20))?;
    Ok(walked_s)
}

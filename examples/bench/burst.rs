//! Fleet's burst part (`bench fleet --burst`, issue 35.2): searches on a downstream mirror while
//! it follows a burst, the origin fixture's whole share of the catalog (a tenth) changed at once.
//!
//! After the fleet's first syncs, one client sends the fleet classes (`query::fleet_classes`)
//! to the first downstream without pause, from `LEAD` before each burst until that
//! downstream's search index holds it. A burst rewrites the origin's scenario with a new
//! `prefix` (a word added to every generated title and description); the upstream walks the
//! origin and swaps, then the downstream follows (the bucket's round of updates as one delta,
//! or the HTTP face's change feed). Each window is split by the two daemons' logs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::json;

use super::{origin_scenario, Downstream, Fleet};
use crate::aftermath::{class_rows, class_table, Phase, Searcher};
use crate::daemon::{swaps_in, Swap};
use crate::measure::now_us;
use crate::process::{write_json_atomically, SocketClient};
use crate::query::{fleet_classes, wait_for_index};
use crate::report::{Report, Samples};

/// Bursts a run times.
const BURSTS: usize = 3;
/// How long each window searches before its burst is written: the quiet part, for comparison.
const LEAD: Duration = Duration::from_secs(2);
/// One burst reaching the downstream's index.
const BURST_LIMIT: Duration = Duration::from_secs(300);
/// How often the watcher reads the downstream's log and, at the end, its status.
const WATCH_PAUSE: Duration = Duration::from_millis(20);
/// The pause between windows: beyond the upstream's walk pace (its last walk of the origin,
/// about a second), so that no burst's walk is held back.
const GAP: Duration = Duration::from_secs(3);
/// An answer slower than this counts against issue 35's budget.
const BUDGET_MS: f64 = 5.0;

/// One burst's moments (µs since the epoch) as the harness and the two logs saw them.
struct Burst {
    /// The window's start: `LEAD` before the write.
    searching_us: i64,
    written_us: i64,
    /// The upstream's swap of the origin's walk.
    upstream_swap_us: Option<i64>,
    /// The downstream's swaps that carried the burst.
    swaps: Vec<Swap>,
    /// The downstream's index holding the last of them (`catalog/status`).
    current_us: i64,
}

pub(super) fn run(
    report: &mut Report,
    fleet: &Fleet,
    downstream: &Downstream,
) -> anyhow::Result<()> {
    let classes = fleet_classes();
    let visible = Instant::now();
    let visible_us = now_us();
    let mut searcher = Searcher::new(
        crate::daemon::connect(&downstream.files.socket())?,
        &downstream.files.path("answers.tsv"),
        &classes,
        visible,
    )?;
    let mut bursts = Vec::new();
    for number in 1..=BURSTS {
        let mut control = crate::daemon::connect(&downstream.files.socket())?;
        let done = AtomicBool::new(false);
        let burst = std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let outcome = one_burst(fleet, downstream, &mut control, number);
                done.store(true, Ordering::Release);
                outcome
            });
            while !done.load(Ordering::Acquire) {
                searcher.search_once()?;
            }
            watcher
                .join()
                .map_err(|_| anyhow::anyhow!("burst {number}'s watcher panicked"))?
        })?;
        eprintln!(
            "fleet: burst {number}: the downstream's index current {:.2} s after the write, {} swaps",
            (burst.current_us - burst.written_us) as f64 / 1e6,
            burst.swaps.len()
        );
        bursts.push(burst);
        std::thread::sleep(GAP);
    }
    let phase = searcher.take_phase();
    // The last burst's word is found on the downstream: the searches ran against the change.
    let found = crate::daemon::connect(&downstream.files.socket())?.call(
        "catalog/search",
        json!({"query": format!("burst{BURSTS}"), "limit": 10}),
    )?;
    if found["results"].as_array().map_or(0, Vec::len) == 0 {
        bail!("the downstream finds no entry with the last burst's word: {found}");
    }
    write_report(report, fleet, &classes, &phase, &bursts, visible_us);
    Ok(())
}

/// Burst `number`: waits `LEAD`, writes the origin's scenario with the word `burst{number}`,
/// then waits for the downstream's swaps to carry every changed entry and its index to hold
/// them.
fn one_burst(
    fleet: &Fleet,
    downstream: &Downstream,
    control: &mut SocketClient,
    number: usize,
) -> anyhow::Result<Burst> {
    let searching_us = now_us();
    std::thread::sleep(LEAD);
    let mut scenario = origin_scenario(fleet.per_server - 1, 0);
    scenario["prefix"] = json!(format!("burst{number}"));
    let written = Instant::now();
    let written_us = now_us();
    write_json_atomically(fleet.scenario_path, &scenario)?;
    // Every generated entry of the origin changes; its marker stays.
    let expected = (fleet.per_server - 1) as u64;
    let swaps = loop {
        let log = std::fs::read_to_string(downstream.files.log()).unwrap_or_default();
        let swaps: Vec<Swap> = swaps_in(&log)
            .into_iter()
            .filter(|swap| swap.committed_at_us > written_us && swap.changed > 0)
            .collect();
        if swaps.iter().map(|swap| swap.changed).sum::<u64>() >= expected {
            break swaps;
        }
        if written.elapsed() > BURST_LIMIT {
            bail!(
                "burst {number}: the downstream's swaps carried {} of {expected} changes after {BURST_LIMIT:?}",
                swaps.iter().map(|swap| swap.changed).sum::<u64>()
            );
        }
        std::thread::sleep(WATCH_PAUSE);
    };
    wait_for_index(control, fleet.total as u64, WATCH_PAUSE)
        .with_context(|| format!("burst {number}: the downstream's index"))?;
    let current_us = now_us();
    let upstream_swap_us = fleet
        .upstream
        .swaps()
        .iter()
        .find(|swap| swap.committed_at_us > written_us && swap.changed > 0)
        .map(|swap| swap.committed_at_us);
    Ok(Burst {
        searching_us,
        written_us,
        upstream_swap_us,
        swaps,
        current_us,
    })
}

/// The parts of a window, in the order of the report's table.
const PARTS: [&str; 6] = [
    "before the write (quiet)",
    "the upstream's walk and swap of the origin",
    "the first search asked after each of the downstream's swaps (it waits for the index to apply that swap)",
    "the downstream receiving and staging (outside its swaps' holds)",
    "the downstream's swaps' holds of the writer",
    "the downstream's index catching up after its last swap",
];

/// The part of `burst` an answer asked at `at_us` falls in; `first_after_swap` when it was the
/// first answer asked after one of the downstream's swaps committed.
fn part_of(burst: &Burst, at_us: i64, first_after_swap: bool) -> usize {
    let in_hold = burst.swaps.iter().any(|swap| {
        let hold_us = (swap.hold_ms * 1000.0) as i64;
        at_us >= swap.committed_at_us - hold_us && at_us <= swap.committed_at_us
    });
    let last_swap_us = burst
        .swaps
        .iter()
        .map(|swap| swap.committed_at_us)
        .max()
        .unwrap_or(burst.written_us);
    match at_us {
        at if at < burst.written_us => 0,
        at if at < burst.upstream_swap_us.unwrap_or(burst.written_us) => 1,
        _ if first_after_swap => 2,
        _ if in_hold => 4,
        at if at <= last_swap_us => 3,
        _ => 5,
    }
}

fn write_report(
    report: &mut Report,
    fleet: &Fleet,
    classes: &[crate::query::QueryClass],
    phase: &Phase,
    bursts: &[Burst],
    visible_us: i64,
) {
    let seconds = |us: i64| (us - visible_us) as f64 / 1e6;
    let after_write = |burst: &Burst, us: i64| (us - burst.written_us) as f64 / 1e6;
    report.line(format!(
        "### Burst: searches on a downstream while it follows a tenth of {} changing",
        fleet.total
    ));
    report.line("");
    report.line(format!(
        "Host: {}. After the first syncs, one client on one connection sends {} classes in turn \
         without pause to the first downstream, from {} s before each burst until that \
         downstream's index holds it ({} searches, {} failed). A burst rewrites the origin \
         fixture's scenario with a new word in every generated title and description ({} \
         entries, a tenth of the catalog); the upstream walks the origin and swaps, the \
         downstream follows. Milliseconds per answer, measured by the client; every answer is \
         in the downstream's directory, `answers.tsv`.",
        crate::cpu_and_vector_flags(),
        classes.len(),
        LEAD.as_secs(),
        phase.searches(),
        phase.failed,
        fleet.per_server - 1,
    ));
    report.line("");
    for (index, burst) in bursts.iter().enumerate() {
        let holds: Vec<f64> = burst.swaps.iter().map(|swap| swap.hold_ms).collect();
        report.line(format!(
            "- burst {}: window {:.2} s; after the write the upstream swapped at {}, the \
             downstream's {} swaps from {:.2} to {:.2} s (holds {:.0}-{:.0} ms, {:.0} ms in \
             all), its index current at {:.2} s",
            index + 1,
            seconds(burst.current_us) - seconds(burst.searching_us),
            burst
                .upstream_swap_us
                .map_or("?".into(), |us| format!("{:.2} s", after_write(burst, us))),
            burst.swaps.len(),
            burst
                .swaps
                .first()
                .map_or(f64::NAN, |swap| after_write(burst, swap.committed_at_us)),
            burst
                .swaps
                .last()
                .map_or(f64::NAN, |swap| after_write(burst, swap.committed_at_us)),
            holds.iter().copied().fold(f64::INFINITY, f64::min),
            holds.iter().copied().fold(0.0, f64::max),
            holds.iter().sum::<f64>(),
            after_write(burst, burst.current_us),
        ));
    }
    phase.error_lines(report);
    report.line("");
    let windows: Vec<(f64, f64)> = bursts
        .iter()
        .map(|burst| (seconds(burst.searching_us), seconds(burst.current_us)))
        .collect();
    class_table(
        report,
        "each burst",
        &class_rows(classes, &phase.answers, &windows),
    );
    report.line("");
    let rows = part_rows(phase, bursts, visible_us);
    report.table(
        &[
            "part of the window (all classes)",
            "searches",
            "p50 ms",
            "p99 ms",
            "max ms",
            "over 5 ms",
        ],
        &rows,
    );
    report.line("");
}

/// The report's rows of the window's parts (`PARTS`): every answer placed in its burst's part,
/// the first one asked after each of the downstream's swaps apart.
fn part_rows(phase: &Phase, bursts: &[Burst], visible_us: i64) -> Vec<Vec<String>> {
    // Every answer (µs asked, ms), in the order asked; then the first one after each swap.
    let mut timed: Vec<(i64, f64)> = phase
        .answers
        .iter()
        .flatten()
        .map(|&(at_s, milliseconds)| (visible_us + (at_s * 1e6) as i64, milliseconds))
        .collect();
    timed.sort_by_key(|&(at_us, _)| at_us);
    let firsts: std::collections::BTreeSet<usize> = bursts
        .iter()
        .flat_map(|burst| &burst.swaps)
        .map(|swap| timed.partition_point(|&(at_us, _)| at_us < swap.committed_at_us))
        .collect();
    let mut parts = vec![Samples::default(); PARTS.len()];
    for (position, &(at_us, milliseconds)) in timed.iter().enumerate() {
        if let Some(burst) = bursts
            .iter()
            .find(|burst| at_us >= burst.searching_us && at_us <= burst.current_us)
        {
            parts[part_of(burst, at_us, firsts.contains(&position))].push(milliseconds);
        }
    }
    PARTS
        .iter()
        .zip(&parts)
        .map(|(part, samples)| {
            vec![
                part.to_string(),
                samples.len().to_string(),
                format!("{:.2}", samples.median()),
                format!("{:.2}", samples.quantile(0.99)),
                format!("{:.1}", samples.max()),
                samples
                    .0
                    .iter()
                    .filter(|ms| **ms > BUDGET_MS)
                    .count()
                    .to_string(),
            ]
        })
        .collect()
}

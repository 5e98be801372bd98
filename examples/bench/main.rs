//! The benchmark harness (issue 6): runs the real daemon against the real fixture server and
//! the fast peer through each scenario of the performance budgets (BENCHMARKS.md) and prints Markdown
//! tables.
//!
//! Run it with `bench/run [SCENARIO...]` (it builds the release binaries, the benchmark-only
//! crates under bench/ and the Python SDK venv first); scenarios are `walk`, `swap`,
//! `change`, `query`, `start`, `idle`, `fleet` (`--burst`: searches on a downstream following a burst), `kinds`, `semantic`, `rewalk`, `history`, `index`, `aftermath`, or `all`. `bench bare-walk CONFIG ROUNDS`
//! is the bare loop: our own transport (`upstream::Session`) fetching every page and discarding it,
//! the floor a mirror is compared with. One file per scenario (burst.rs is fleet's `--burst` part); the child-process and socket helpers are
//! tests/common/process.rs, shared with the integration tests. Nothing here is part of the
//! daemon or of `cargo test`.

mod aftermath;
mod change;
mod daemon;
mod fleet;
mod history;

mod idle;
mod index;
mod kinds;
mod measure;
mod paging;
mod paths;
/// Spawning, waiting for and stopping the binaries, and the socket client: shared with the
/// integration tests (tests/it/support.rs), which use parts of it this harness does not.
#[allow(dead_code)]
#[path = "../../tests/common/process.rs"]
mod process;
mod query;
mod report;
mod rewalk;
mod semantic;
mod start;
mod swap;
mod walk;

// The daemon's allocator (`mcp_mirror::heap`): the bare loop (the daemon's transport) and `index`
// (its indexing) run the daemon's code in this process, and are measured as the daemon runs it.
mcp_mirror::use_daemon_allocator!();

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context as _};

use crate::paths::{bench_peer_binary, python_binary, release_binary, work_dir, ROOT};
use crate::report::Report;
use crate::walk::WalkOptions;

/// The CPU's model name and its vector flags (AVX2, FMA, AVX-512's, AMX's): hosts differ
/// between runs, and the encoder's speed follows the widest unit.
pub fn cpu_and_vector_flags() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown".into());
    let mut flags: Vec<&str> = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("flags"))
        .unwrap_or_default()
        .split_whitespace()
        .filter(|flag| {
            matches!(*flag, "avx2" | "fma") || flag.starts_with("avx512") || flag.starts_with("amx")
        })
        .collect();
    flags.sort_unstable();
    flags.dedup();
    format!("CPU `{model}`, vector flags {}", flags.join(" "))
}

fn machine() -> String {
    let model = cpu_and_vector_flags();
    let cores = std::thread::available_parallelism().map_or(0, |cores| cores.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores, {memory} memory, {model}, Linux {}",
        kernel.trim()
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn git_revision() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(ROOT)
            .output()
            .ok()
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let dirty = !run(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    format!(
        "{}{}",
        run(&["rev-parse", "--short", "HEAD"]),
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        }
    )
}

fn main() -> anyhow::Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.first().map(String::as_str) == Some("bare-walk") {
        let config = arguments.get(1).context("bare-walk CONFIG ROUNDS")?;
        let rounds = arguments
            .get(2)
            .context("bare-walk CONFIG ROUNDS")?
            .parse()?;
        return walk::bare_walk(Path::new(config), rounds);
    }
    let walk_options = WalkOptions::from_arguments(&arguments)?;
    let query_options = query::QueryOptions::from_arguments(&arguments)?;
    let quick = walk_options.quick;
    let mut scenarios: Vec<&str> = arguments
        .iter()
        .map(String::as_str)
        .filter(|argument| !argument.starts_with("--"))
        .collect();
    const ALL: [&str; 13] = [
        "walk",
        "swap",
        "change",
        "query",
        "start",
        "idle",
        "fleet",
        "kinds",
        "semantic",
        "rewalk",
        "history",
        "index",
        "aftermath",
    ];
    if scenarios.is_empty() || scenarios.contains(&"all") {
        scenarios = ALL.to_vec();
    }
    if let Some(unknown) = scenarios.iter().find(|name| !ALL.contains(name)) {
        bail!(
            "unknown scenario {unknown}; choose from all, {}",
            ALL.join(", ")
        );
    }
    for binary in ["mcp-mirror", "mcp-fixture"] {
        if !release_binary(binary).exists() {
            bail!(
                "{} is missing: run `bench/run`, which builds it",
                release_binary(binary).display()
            );
        }
    }
    if scenarios.contains(&"walk") || scenarios.contains(&"aftermath") {
        if !python_binary().exists() {
            bail!(
                "{} is missing: run `bench/run`, which creates the venv",
                python_binary().display()
            );
        }
        for binary in ["fast-peer", "rmcp-walk"] {
            if !bench_peer_binary(binary).exists() {
                bail!(
                    "{} is missing: run `bench/run`, which builds it",
                    bench_peer_binary(binary).display()
                );
            }
        }
    }
    let bench = std::env::current_exe()?;
    std::fs::create_dir_all(work_dir())?;
    let mut report = Report {
        text: String::new(),
    };
    let started = Instant::now();
    report.line(format!("Machine: {}.", machine()));
    report.line(format!(
        "Revision {}; load average at start {}.",
        git_revision(),
        load_average()
    ));
    report.line("");
    let mut results: BTreeMap<&str, anyhow::Result<()>> = BTreeMap::new();
    let mut million: Option<query::MillionDatabase> = None;
    for scenario in &scenarios {
        eprintln!("== {scenario}");
        let outcome = match *scenario {
            "walk" => walk::run(&mut report, &bench, &walk_options),
            "swap" => swap::run(&mut report),
            "rewalk" => rewalk::run(&mut report),
            "index" => index::run(&mut report),
            "aftermath" => {
                aftermath::run(&mut report, aftermath::minute_from_arguments(&arguments)?)
            }
            "history" => history::run(&mut report, &history::Parts::from_arguments(&arguments)?),
            "change" => change::run(&mut report),
            "query" | "start" => (|| {
                if million.is_none() && query_options.reuse_million {
                    million = query::reuse_million_database();
                }
                if million.is_none() {
                    eprintln!("building the 1,000,000-resource database");
                    million = Some(query::build_million_database(&query_options)?);
                }
                let files = million.as_ref().context("million database")?;
                match *scenario {
                    "query" => query::run(&mut report, files, &query_options),
                    _ => start::run(&mut report, &files.files),
                }
            })(),
            "idle" => idle::run(&mut report, quick),
            "fleet" => fleet::FleetOptions::from_arguments(&arguments)
                .and_then(|options| fleet::run(&mut report, &options)),
            "kinds" => kinds::run(&mut report, quick),
            "semantic" => semantic::parts_from_arguments(&arguments).and_then(|parts| {
                let precision = semantic::precision_from_arguments(&arguments);
                semantic::run(&mut report, quick, &parts, precision)
            }),
            _ => unreachable!(),
        };
        if let Err(error) = &outcome {
            report.line(format!("**{scenario} failed:** {error:#}"));
            report.line("");
        }
        results.insert(scenario, outcome);
    }
    report.line(format!(
        "Finished in {:.0} s; load average at the end {}.",
        started.elapsed().as_secs_f64(),
        load_average()
    ));
    let output = Path::new(ROOT).join("target/bench-results.md");
    std::fs::write(&output, &report.text)?;
    eprintln!("results written to {}", output.display());
    if results.values().any(|outcome| outcome.is_err()) {
        bail!("some scenarios failed");
    }
    Ok(())
}

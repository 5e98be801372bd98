//! Search through the daemon's socket at a million entries, the derived index beside SQLite's FTS5, in one run.
//!
//! Not part of CI. Run: `cargo build --release --bins --example search_side_by_side &&
//! target/release/examples/search_side_by_side [ENTRIES]`. Mirrors one stdio fixture of
//! ENTRIES resources (default 1,000,000) into a fresh directory under target/, waits for the
//! index, then times every query class as a plain query (the index) and as the same
//! AND-of-words query in FTS5 syntax (`raw: true`, SQLite), and the throughput of the
//! selective mix with 1, 8 and 64 clients.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Client {
    fn connect(socket: &Path) -> anyhow::Result<Client> {
        let stream = UnixStream::connect(socket)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_id: 1,
        })
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.writer, "{request}")?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                anyhow::bail!("the daemon closed the socket");
            }
            let message: Value = serde_json::from_str(&line)?;
            if message["id"] == id {
                return match message.get("result") {
                    Some(result) => Ok(result.clone()),
                    None => anyhow::bail!("{method} failed: {message}"),
                };
            }
        }
    }
}

fn release_binary(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/release")
        .join(name)
}

fn vm_hwm_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// The words of `text` as an FTS5 query of the same meaning: all of them, the last a prefix.
fn fts5_and_of_words(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{word}\""))
        .collect();
    format!("{}*", words.join(" "))
}

type Class = (&'static str, fn(usize) -> String);

fn classes() -> Vec<Class> {
    vec![
        ("one word, rare (a 6-digit id, 1 match)", |i| {
            format!("{:06}", (i * 7919) % 1_000_000)
        }),
        ("two words (`document` + a number)", |i| {
            format!("document {}", (i * 104_729) % 1_000_000 + 100_000)
        }),
        ("prefix (4 digits, 100 matches)", |i| {
            format!("{:04}", (i * 31) % 10_000)
        }),
        ("two words (`topic-N doc`)", |i| {
            format!("topic-{} doc", i % 37)
        }),
        ("one word, every resource matches (`document`)", |_| {
            "document".into()
        }),
        ("prefix, every resource matches (`synth`)", |_| {
            "synth".into()
        }),
        ("AND of two common words", |i| {
            ["synthetic document", "document number", "about synthetic"][i % 3].into()
        }),
    ]
}

struct Timing {
    queries: usize,
    timed_out: usize,
    p50: f64,
    p99: f64,
    max: f64,
    engine: String,
}

fn time_class(
    client: &mut Client,
    make: fn(usize) -> String,
    raw: bool,
    limit: Duration,
) -> anyhow::Result<Timing> {
    let params = |i: usize| {
        let text = make(i);
        if raw {
            json!({"query": fts5_and_of_words(&text), "raw": true, "limit": 10})
        } else {
            json!({"query": text, "limit": 10})
        }
    };
    for warm in 0..3 {
        let _ = client.call("catalog/search", params(warm + 1000));
    }
    let started = Instant::now();
    let mut times = Vec::new();
    let mut engine = String::new();
    let mut timed_out = 0;
    for i in 0..300 {
        if started.elapsed() > limit {
            break;
        }
        let before = Instant::now();
        // A search cut off by `search_timeout` counts with the time it took.
        match client.call("catalog/search", params(i)) {
            Ok(answer) => engine = answer["engine"].as_str().unwrap_or("").to_string(),
            Err(_) => timed_out += 1,
        }
        times.push(before.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at = |fraction: f64| {
        let rank = ((times.len() as f64) * fraction).ceil() as usize;
        times[rank.clamp(1, times.len()) - 1]
    };
    Ok(Timing {
        queries: times.len(),
        timed_out,
        p50: at(0.5),
        p99: at(0.99),
        max: times.last().copied().unwrap_or(0.0),
        engine,
    })
}

fn throughput(socket: &Path, clients: usize, raw: bool) -> anyhow::Result<(f64, usize, f64, f64)> {
    let window = Duration::from_secs(5);
    let workers: Vec<_> = (0..clients)
        .map(|worker| {
            let socket = socket.to_path_buf();
            std::thread::spawn(move || -> anyhow::Result<(Vec<f64>, usize)> {
                let mut client = Client::connect(&socket)?;
                let selective = classes();
                let started = Instant::now();
                let mut times = Vec::new();
                let mut refused = 0;
                let mut i = worker * 7;
                while started.elapsed() < window {
                    let text = (selective[i % 3].1)(i);
                    let params = if raw {
                        json!({"query": fts5_and_of_words(&text), "raw": true, "limit": 10})
                    } else {
                        json!({"query": text, "limit": 10})
                    };
                    let before = Instant::now();
                    // Answers only: a search the gate refuses as busy is counted apart.
                    match client.call("catalog/search", params) {
                        Ok(_) => times.push(before.elapsed().as_secs_f64() * 1000.0),
                        Err(_) => refused += 1,
                    }
                    i += 1;
                }
                Ok((times, refused))
            })
        })
        .collect();
    let mut times = Vec::new();
    let mut refused = 0;
    for worker in workers {
        let (answered, turned_away) = worker
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        times.extend(answered);
        refused += turned_away;
    }
    times.sort_by(f64::total_cmp);
    let at = |fraction: f64| {
        let rank = ((times.len() as f64) * fraction).ceil() as usize;
        times[rank.clamp(1, times.len()) - 1]
    };
    if times.is_empty() {
        return Ok((0.0, refused, 0.0, 0.0));
    }
    Ok((
        times.len() as f64 / window.as_secs_f64(),
        refused,
        at(0.5),
        at(0.99),
    ))
}

fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return Ok(found);
        }
        if started.elapsed() > limit {
            anyhow::bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

fn main() -> anyhow::Result<()> {
    let entries: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let work = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/search-side-by-side");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let socket = work.join("mirror.sock");
    let config = work.join("daemon.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\ndatabase = {:?}\nsocket = {:?}\n\n[servers.million]\ncommand = {:?}\nargs = [\"--name\", \"million\", \"--generate\", \"{entries}\", \"--page-size\", \"1000\"]\n",
            work.join("catalog.db").display().to_string(),
            socket.display().to_string(),
            release_binary("mcp-fixture").display().to_string(),
        ),
    )?;
    let log = std::fs::File::create(work.join("daemon.log"))?;
    let child = Command::new(release_binary("mcp-mirror"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let pid = child.id();
    let _daemon = Daemon(child);
    let started = Instant::now();
    let mut client = wait_for("the socket", Duration::from_secs(20), || {
        Client::connect(&socket).ok()
    })?;
    wait_for("the first walk", Duration::from_secs(1800), || {
        let status = client.call("catalog/status", json!({})).ok()?;
        (status["servers"][0]["walksOk"].as_u64().unwrap_or(0) >= 1).then_some(())
    })?;
    let walked = started.elapsed();
    let status = wait_for("the index", Duration::from_secs(1800), || {
        let status = client.call("catalog/status", json!({})).ok()?;
        let index = &status["daemon"]["searchIndex"];
        (index["state"] == "ready" && index["documents"] == entries as u64).then(|| index.clone())
    })?;
    let indexed = started.elapsed() - walked;
    println!("## Search through the socket: the derived index beside FTS5, {entries} resources");
    println!();
    println!(
        "First load: the walk committed after {:.1} s; the index had every entry {:.1} s later ({:.1} MB on disk, generation {}). Daemon peak RSS (VmHWM) over the load and the index build: {:.0} MB.",
        walked.as_secs_f64(),
        indexed.as_secs_f64(),
        status["bytes"].as_f64().unwrap_or(0.0) / 1e6,
        status["generation"],
        vm_hwm_mb(pid)
    );
    println!();
    println!(
        "| query class | engine | queries | cut off at search_timeout | p50 ms | p99 ms | max ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (label, make) in classes() {
        for raw in [false, true] {
            let timing = time_class(&mut client, make, raw, Duration::from_secs(20))?;
            let engine = if raw {
                "sqlite (raw)"
            } else {
                timing.engine.as_str()
            };
            println!(
                "| {label} | {engine} | {} | {} | {:.2} | {:.2} | {:.2} |",
                timing.queries, timing.timed_out, timing.p50, timing.p99, timing.max
            );
        }
    }
    println!();
    println!("| selective mix (first three classes) | clients | answers/s | refused as busy | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    for raw in [false, true] {
        for clients in [1, 8, 64] {
            let (rate, refused, p50, p99) = throughput(&socket, clients, raw)?;
            let engine = if raw { "sqlite" } else { "index" };
            println!("| {engine} | {clients} | {rate:.0} | {refused} | {p50:.2} | {p99:.2} |");
        }
    }
    println!();
    println!("Daemon peak RSS at the end: {:.0} MB.", vm_hwm_mb(pid));
    Ok(())
}

//! Semantic search (issue 23): the encoder's speed in-process (tokens per second on one core, a question's embedding), and hybrid search through the daemon at 10,000 tools (time to embed them, p50/p99 with the question's embedding, peak RSS with the model loaded).

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use mcp_mirror::semantic::Precision;

use crate::daemon::{fixture_stdio_table, start_daemon, DaemonFiles};
use crate::measure::proc_status_kb;
use crate::paths::ROOT;
use crate::process::{poll_until, write_json_atomically};
use crate::report::{mb, Report, Samples};

/// Questions as agents type them (LiveMCPBench's style), 8 to 31 tokens.
const QUESTIONS: &[&str] = &[
    "What is the weather forecast for Berlin tomorrow?",
    "Find the current stock price of Apple and plot its price history over the last month",
    "Convert 250 US dollars to euros at today's exchange rate",
    "Send an email to my team summarizing the open pull requests in our repository",
    "Translate this paragraph into Spanish and French",
    "How long does it take to drive from San Francisco to Los Angeles?",
    "List the files in my home directory that changed this week",
    "Create a GitHub issue for the failing nightly build with the error log attached",
    "Draw a pie chart of my monthly expenses by category",
    "Search recent news about electric vehicles in Europe",
];

fn model_directory() -> std::path::PathBuf {
    std::path::Path::new(ROOT).join("target/models/all-MiniLM-L6-v2")
}

/// The scenario's parts to run: `--semantic-parts=encoder,hybrid` (both by default).
pub fn parts_from_arguments(arguments: &[String]) -> anyhow::Result<Vec<String>> {
    let parts: Vec<String> = arguments
        .iter()
        .find_map(|argument| argument.strip_prefix("--semantic-parts="))
        .unwrap_or("encoder,hybrid")
        .split(',')
        .map(str::to_string)
        .collect();
    if let Some(unknown) = parts
        .iter()
        .find(|part| !["encoder", "hybrid"].contains(&part.as_str()))
    {
        bail!("unknown semantic part {unknown}: choose from encoder, hybrid");
    }
    Ok(parts)
}

/// `--semantic-precision=f32|bf16`: the hybrid part's `[search] semantic_precision` (the
/// daemon's default otherwise).
pub fn precision_from_arguments(arguments: &[String]) -> Option<String> {
    arguments
        .iter()
        .find_map(|argument| argument.strip_prefix("--semantic-precision="))
        .map(str::to_string)
}

pub fn run(
    report: &mut Report,
    quick: bool,
    parts: &[String],
    precision: Option<String>,
) -> anyhow::Result<()> {
    let model = model_directory();
    if !model.join("config.json").exists() {
        bail!(
            "no model at {}: run tests/interop/install.sh first",
            model.display()
        );
    }
    if parts.iter().any(|part| part == "encoder") {
        encoder(report, &model)?;
    }
    if parts.iter().any(|part| part == "hybrid") {
        let count = if quick { 1_000 } else { 10_000 };
        hybrid(report, &model, count, precision.as_deref())?;
    }
    Ok(())
}

fn encoder(report: &mut Report, model: &std::path::Path) -> anyhow::Result<()> {
    report.line("## Semantic: the encoder (all-MiniLM-L6-v2, one thread, in-process)");
    report.line("");
    report.line(format!(
        "{}; each kernel path this CPU has (the daemon uses the first).",
        crate::cpu_and_vector_flags()
    ));
    report.line("");
    let mut rows = Vec::new();
    for isa in mcp_mirror::semantic::Isa::available() {
        for precision in [Precision::F32, Precision::Bf16] {
            rows.extend(encoder_on(model, isa, precision)?);
        }
    }
    report.table(&["measure", "value"], &rows);
    Ok(())
}

/// The encoder's rows on one kernel path: load time, documents' tokens per second, a
/// question's embedding.
fn encoder_on(
    model: &std::path::Path,
    isa: mcp_mirror::semantic::Isa,
    precision: Precision,
) -> anyhow::Result<Vec<Vec<String>>> {
    let path = format!("{} {}", isa.name(), precision.name());
    let loading = Instant::now();
    let encoder = mcp_mirror::semantic::Encoder::load_with(model, isa, precision)
        .context("loading the model")?;
    let load_ms = loading.elapsed().as_secs_f64() * 1000.0;
    // Documents: tool-like texts of about 60 tokens, one thread.
    let documents: Vec<String> = (0..300)
        .map(|index| {
            format!(
                "get record {index}. Looks up records in section {} of the synthetic catalog and \
                 returns them as JSON. lookup: the value of the field for lookup {index}, plain \
                 text, trimmed and normalised before use, compared without regard to case",
                index % 97
            )
        })
        .collect();
    let mut tokens = 0usize;
    let began = Instant::now();
    let began_cpu = thread_cpu_seconds();
    for document in &documents {
        tokens += encoder.token_ids(document)?.len();
        encoder.embed(document)?;
    }
    let seconds = began.elapsed().as_secs_f64();
    let cpu_seconds = thread_cpu_seconds() - began_cpu;
    let mut questions = Samples::default();
    let mut questions_cpu = Samples::default();
    let mut question_tokens = Samples::default();
    for round in 0..220 {
        let question = QUESTIONS[round % QUESTIONS.len()];
        let began = Instant::now();
        let began_cpu = thread_cpu_seconds();
        encoder.embed(question)?;
        if round >= 20 {
            questions.push(began.elapsed().as_secs_f64() * 1000.0);
            questions_cpu.push((thread_cpu_seconds() - began_cpu) * 1000.0);
            question_tokens.push(encoder.token_ids(question)?.len() as f64);
        }
    }
    Ok(vec![
        vec![format!("{path}: model load, ms"), format!("{load_ms:.0}")],
        vec![
            format!(
                "{path}: documents: {} texts, {tokens} tokens, tokens/s",
                documents.len()
            ),
            format!(
                "{:.0} ({:.0} per CPU second of the thread)",
                tokens as f64 / seconds,
                tokens as f64 / cpu_seconds
            ),
        ],
        vec![
            format!(
                "{path}: a question's embedding ({:.0}-{:.0} tokens), ms p50 / p99",
                question_tokens.min(),
                question_tokens.max()
            ),
            format!(
                "{:.1} / {:.1} ({:.1} / {:.1} of the thread's CPU)",
                questions.median(),
                questions.quantile(0.99),
                questions_cpu.median(),
                questions_cpu.quantile(0.99)
            ),
        ],
    ])
}

/// The calling thread's CPU time: on a shared machine, what the encoder costs a core, whatever
/// else runs.
fn thread_cpu_seconds() -> f64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `time` is.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    time.tv_sec as f64 + time.tv_nsec as f64 * 1e-9
}

fn hybrid(
    report: &mut Report,
    model: &std::path::Path,
    count: usize,
    precision: Option<&str>,
) -> anyhow::Result<()> {
    let files = DaemonFiles::fresh("semantic")?;
    let scenario = files.path("scenario.json");
    // One described property each: about 60 tokens a tool, as real tools have.
    write_json_atomically(
        &scenario,
        &json!({"generate": 0, "generate_tools": count, "generated_tool_properties": 1, "tools_page_size": 1000}),
    )?;
    let args = vec![
        "--name".into(),
        "tools".into(),
        "--scenario".into(),
        scenario.display().to_string(),
    ];
    let config = files.config("", &fixture_stdio_table("tools", &args))?;
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(&format!(
        "\n[search]\nsemantic_model = {:?}\n",
        model.display().to_string()
    ));
    if let Some(precision) = precision {
        text.push_str(&format!("semantic_precision = {precision:?}\n"));
    }
    std::fs::write(&config, text)?;
    let started = Instant::now();
    let daemon = start_daemon(&files, &config)?;
    let mut client = daemon.client()?;
    let mut embedded_at = None;
    poll_until(
        "every tool's vector",
        Duration::from_secs(3600),
        Duration::from_millis(200),
        || {
            let status = client.call("catalog/status", json!({}))?;
            let vectors = &status["daemon"]["vectors"];
            let ready = vectors["state"] == "ready"
                && vectors["count"].as_u64().unwrap_or(0) >= count as u64;
            if ready && embedded_at.is_none() {
                embedded_at = Some(started.elapsed());
            }
            Ok(ready.then_some(()))
        },
    )?;
    let embed_seconds = embedded_at.map_or(0.0, |elapsed| elapsed.as_secs_f64());
    let vectors = client.call("catalog/status", json!({}))?["daemon"]["vectors"].clone();
    let mut rows = Vec::new();
    for (mode, repeated) in [
        ("lexical", false),
        ("semantic", false),
        ("hybrid", false),
        ("semantic", true),
    ] {
        let mut samples = Samples::default();
        for round in 0..220 {
            // Each question asked once (the daemon keeps recent questions' vectors), but in
            // the last row, which asks the same ten again and again.
            let question = match repeated {
                true => QUESTIONS[round % QUESTIONS.len()].to_string(),
                false => format!("{} #{mode}{round}", QUESTIONS[round % QUESTIONS.len()]),
            };
            let began = Instant::now();
            let answer: Value = client.call(
                "catalog/search",
                json!({"query": question, "kinds": ["tool"], "limit": 10, "mode": mode}),
            )?;
            if round >= 20 {
                samples.push(began.elapsed().as_secs_f64() * 1000.0);
            }
            if answer["mode"] != mode {
                bail!("asked for {mode}, answered {}", answer["mode"]);
            }
        }
        let asked = match repeated {
            true => "the same 10 questions again (their vectors kept)",
            false => "each question once",
        };
        rows.push(vec![
            format!("{mode}, {asked}, ms p50 / p99"),
            format!("{:.1} / {:.1}", samples.median(), samples.quantile(0.99)),
        ]);
    }
    let peak = proc_status_kb(daemon.process.child.id(), "VmHWM");
    let vectors_bytes = std::fs::metadata(files.path("catalog.vectors"))
        .map(|meta| meta.len())
        .unwrap_or(0);
    rows.push(vec![
        "from start until every tool had its vector, s".into(),
        format!("{embed_seconds:.0}"),
    ]);
    rows.push(vec!["daemon peak RSS, MB".into(), mb(peak)]);
    rows.push(vec![
        "catalog.vectors, MB".into(),
        format!("{:.1}", vectors_bytes as f64 / 1e6),
    ]);
    report.line(format!(
        "## Semantic: hybrid search at {count} tools through the socket"
    ));
    report.line("");
    report.line(
        "One client, questions as typed, `catalog/search {kinds: [tool], limit: 10, mode}`, \
         200 timed after 20 warm-up; the question's embedding is part of semantic and hybrid.",
    );
    report.line("");
    report.line(format!(
        "{}; the daemon's kernel and precision: {} {}.",
        crate::cpu_and_vector_flags(),
        vectors["kernel"].as_str().unwrap_or("?"),
        vectors["precision"].as_str().unwrap_or("?")
    ));
    report.line("");
    report.table(&["measure", "value"], &rows);
    Ok(())
}

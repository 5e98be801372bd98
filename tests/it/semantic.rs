//! Semantic search: the encoder of `[search] semantic_model` against an independent implementation (the same token ids, the same vectors within 1e-5), and the daemon's hybrid search with the real model.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_mirror::semantic::{Encoder, Isa, Precision};
use serde_json::{json, Value};

use crate::install;
use crate::support::{run_cli, stdio_server, wait_for, Daemon, Scratch};

/// Texts like the ones a catalog holds (tool names and descriptions, questions as typed), and
/// the awkward ones: accents, CJK, emoji, control characters, long words, punctuation runs,
/// and a text longer than the model's 256 tokens.
fn texts() -> Vec<String> {
    let mut texts: Vec<String> = [
        "search_repositories: Search for GitHub repositories",
        "get_weather Get the current weather forecast for a city",
        "What is the stock price of Apple today?",
        "Convert 100 US dollars to euros at today's exchange rate",
        "Draw a pie chart of my monthly expenses",
        "How long is my commute from Berlin to Potsdam by train?",
        "read_file: Read the complete contents of a file from the file system.",
        "createIssue creates a new issue in a GitHub repository (owner, repo, title, body)",
        "list_directory path: the directory to list",
        "Café crème brûlée, naïve façade, Ångström, São Paulo",
        "ÄÖÜ äöü ß Straße",
        "东京的天气怎么样？",
        "日本語のテキストと English mixed 한국어",
        "emoji 🎉🚀 party rocket 👍",
        "tabs\tand\nnewlines\r\nand   many    spaces",
        "control\u{0}chars\u{7}and\u{fffd}replacement",
        "",
        "   ",
        "a",
        "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
        "https://api.example.com/v1/users?id=42&sort=desc#section",
        "file:///home/user/notes/2026-12-02.md",
        "snake_case_name kebab-case-name camelCaseName PascalCaseName SCREAMING_CASE",
        "!!!???...,,,;;;:::---___",
        "x = (a + b) * c / d - e % f ^ g",
        "JSON: {\"key\": [1, 2, 3], \"nested\": {\"ok\": true}}",
        "The quick brown fox jumps over the lazy dog",
        "Summarize the latest pull requests and post the summary to Slack #engineering",
        "Find flights from SFO to JFK on December 24th under $300",
        "Translate 'good morning' into French, Spanish and German",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "Ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ and ｓｙｍｂｏｌｓ",
        "Ελληνικά και Русский текст",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    // Past the model's 256 tokens: both sides cut at the same place.
    texts.push(
        "The mirror keeps a local copy of every server's catalog and answers searches. ".repeat(30),
    );
    texts
}

/// The cosine of two vectors, in f64.
fn cosine(got: &[f32], want: &[f64]) -> f64 {
    let dot: f64 = got
        .iter()
        .zip(want)
        .map(|(got, want)| f64::from(*got) * want)
        .sum();
    let norm = |values: &mut dyn Iterator<Item = f64>| values.map(|v| v * v).sum::<f64>().sqrt();
    dot / (norm(&mut got.iter().map(|v| f64::from(*v))) * norm(&mut want.iter().copied()))
}

/// tests/semantic/reference.py's token ids and vectors of `texts` (`{ids: [...], vectors: [...]}`).
fn numpy_reference(python: &Path, model: &Path, texts: &[String]) -> Value {
    let mut child = Command::new(python)
        .arg(install::repository().join("tests/semantic/reference.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python starts");
    let request = json!({ "model": model, "texts": texts });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.to_string().as_bytes())
        .expect("the texts reach python");
    let output = child.wait_with_output().expect("python ends");
    assert!(output.status.success(), "the reference failed");
    serde_json::from_slice(&output.stdout).expect("the reference answers JSON")
}

#[test]
fn encoder_matches_an_independent_numpy_forward_pass_on_every_kernel_path() {
    let model = install::minilm_model();
    let python = install::python_numpy();
    let encoder = Encoder::load(&model, Precision::default()).expect("the model loads");
    assert_eq!(encoder.isa(), Isa::widest(), "the widest unit by default");
    assert_eq!(encoder.dimensions, 384);
    assert_eq!(encoder.max_tokens, 256);
    let texts = texts();
    let reference = numpy_reference(&python, &model, &texts);

    // Every kernel path this host has (AVX-512, AVX2, portable) against the reference, and
    // each wider one against the portable path. The narrower paths are slow in a debug build
    // (the portable one most), so they read four short texts (ASCII, accents, CJK, emoji); the
    // widest, which the daemon uses, reads them all.
    //
    // In f32 every path is within 1e-5 of the reference. In bf16 every path is within 1e-5 of
    // the portable path's bf16 vectors (the products give the same bits on every path; the
    // element-wise passes differ in their last bits), and each vector within a cosine of
    // `BF16_COSINE` of the reference's.
    const SAMPLE: [usize; 4] = [0, 9, 11, 13];
    const BF16_COSINE: f64 = 0.9999;
    let mut worst = 0f64;
    for precision in [Precision::F32, Precision::Bf16] {
        let mut portable: Vec<Option<Vec<f32>>> = Vec::new();
        let mut lowest_cosine = 1f64;
        for isa in Isa::available().into_iter().rev() {
            let began = std::time::Instant::now();
            let encoder = Encoder::load_with(&model, isa, precision).expect("the model loads");
            assert_eq!((encoder.isa(), encoder.precision()), (isa, precision));
            let path = format!("{} {}", isa.name(), precision.name());
            let mut worst_against_portable = 0f32;
            for (number, text) in texts.iter().enumerate() {
                if isa != Isa::widest() && !SAMPLE.contains(&number) {
                    portable.push(None);
                    continue;
                }
                let ids = encoder.token_ids(text).expect("tokenizes");
                let expected_ids: Vec<u32> =
                    serde_json::from_value(reference["ids"][number].clone()).expect("ids");
                assert_eq!(ids, expected_ids, "token ids of {text:?}");
                let vector = encoder.embed(text).expect("embeds");
                let expected: Vec<f64> =
                    serde_json::from_value(reference["vectors"][number].clone()).expect("vector");
                assert_eq!(vector.len(), expected.len());
                if precision == Precision::Bf16 {
                    let cosine = cosine(&vector, &expected);
                    lowest_cosine = lowest_cosine.min(cosine);
                    assert!(
                        cosine >= BF16_COSINE,
                        "{text:?} on {path}: cosine {cosine} to the reference"
                    );
                } else {
                    for (index, (got, want)) in vector.iter().zip(&expected).enumerate() {
                        let difference = (f64::from(*got) - want).abs();
                        worst = worst.max(difference);
                        assert!(
                            difference <= 1e-5,
                            "{text:?} on {path}: component {index} is {got}, the reference {want}"
                        );
                    }
                }
                if isa == Isa::portable() {
                    portable.push(Some(vector));
                    continue;
                }
                let Some(portable_vector) = &portable[number] else {
                    continue;
                };
                for (index, (got, want)) in vector.iter().zip(portable_vector).enumerate() {
                    worst_against_portable = worst_against_portable.max((got - want).abs());
                    assert!(
                        (got - want).abs() <= 1e-5,
                        "{text:?} on {path}: component {index} is {got}, the portable path's {want}"
                    );
                }
            }
            println!(
                "{path}: largest difference from the portable path {worst_against_portable:e} ({:.1} s)",
                began.elapsed().as_secs_f64()
            );
        }
        if precision == Precision::Bf16 {
            println!("bf16: lowest cosine to the reference {lowest_cosine}");
        }
    }
    println!("f32: largest difference from the reference: {worst:e}");
    // The long text really was cut at the model's limit.
    let long = texts.last().expect("a long text");
    assert_eq!(encoder.token_ids(long).expect("tokenizes").len(), 256);
}

fn tool(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"input": {"type": "string", "description": "What to work on"}},
            "required": ["input"]
        },
        "annotations": {"readOnlyHint": true}
    })
}

fn catalog() -> Value {
    json!({
        "tools": [
            tool("get_forecast", "Forecasts the weather for a city: temperature, wind and precipitation"),
            tool("stock_quote", "Current share price of a listed company"),
            tool("send_email", "Sends an email message to a recipient"),
            tool("convert_currency", "Converts an amount between currencies at the latest exchange rate"),
            tool("create_issue", "Opens an issue in a GitHub repository"),
            tool("read_file", "Reads the contents of a file from disk"),
            tool("translate_text", "Translates text between languages"),
            tool("plot_chart", "Draws a bar or pie chart from numbers"),
        ],
        "prompts": [{"name": "summarize", "description": "Summarizes a long document"}]
    })
}

/// A daemon mirroring the catalog above, with `[search] semantic_model = model`.
fn semantic_daemon(scratch: &Scratch, model: &Path) -> Daemon {
    let scenario = scratch.write_scenario("scenario.json", &catalog());
    let scenario = scenario.display().to_string();
    let server = stdio_server("fx", &["--name", "fx", "--scenario", &scenario]);
    let config = scratch.config(&server);
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[search]\nsemantic_model = {:?}\n",
        model.display().to_string()
    ));
    std::fs::write(&config, text).expect("config");
    Daemon::start(scratch, &config)
}

/// `catalog/search` for "email" among tools, once the fixture's tools are in: `walksOk` counts
/// the resource walk's swap, and the tools' swap comes after it.
fn email_tool_search(daemon: &Daemon) -> Value {
    wait_for("the tools in search", Duration::from_secs(30), || {
        let answer = daemon.call(
            "catalog/search",
            json!({"query": "email", "kinds": ["tool"]}),
        );
        (!names(&answer).is_empty()).then_some(answer)
    })
}

fn vectors(daemon: &Daemon) -> Value {
    daemon.call("catalog/status", json!({}))["daemon"]["vectors"].clone()
}

fn wait_for_vectors(daemon: &Daemon, count: u64) -> Value {
    let mut last = Value::Null;
    wait_for("every entry's vector", Duration::from_secs(120), || {
        let vectors = vectors(daemon);
        if vectors != last {
            println!("vectors: {vectors}");
            last = vectors.clone();
        }
        let done = vectors["state"] == "ready" && vectors["count"].as_u64() >= Some(count);
        done.then_some(vectors)
    })
}

fn names(answer: &Value) -> Vec<String> {
    answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|hit| hit["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn hybrid_search_finds_by_meaning_pages_in_order_and_never_embeds_an_entry_twice() {
    let model = install::minilm_model();
    let scratch = Scratch::new();
    let mut daemon = semantic_daemon(&scratch, &model);
    daemon.wait_for_walks("fx", 1);
    // The eight tools, the prompt, and the fixture's templates.
    let status = wait_for_vectors(&daemon, 9);
    assert_eq!(status["model"], "all-MiniLM-L6-v2");
    assert_eq!(status["dimensions"], 384);
    assert_eq!(status["pending"], 0);
    assert_eq!(status["kinds"], json!(["template", "tool", "prompt"]));
    // The default precision, on the widest unit, and `status` says both.
    assert_eq!(status["precision"], "bf16");
    assert_eq!(status["kernel"], Isa::widest().name());
    let embedded = status["count"].as_u64().expect("count");
    let printed = run_cli(&daemon.socket, &["status"]);
    let printed = String::from_utf8_lossy(&printed.stdout);
    let line = format!(
        "vectors ready · all-MiniLM-L6-v2 · {embedded} embedded, 0 waiting · {} bf16",
        Isa::widest().name()
    );
    assert!(printed.contains(&line), "{line:?} in {printed}");

    // No word of the question is in the tool, but its meaning is.
    let question = "will it rain in Paris tomorrow";
    let lexical = daemon.call(
        "catalog/search",
        json!({"query": question, "kinds": ["tool"], "mode": "lexical"}),
    );
    assert_eq!(lexical["mode"], "lexical");
    assert!(!names(&lexical).contains(&"get_forecast".to_string()));
    for mode in [None, Some("hybrid"), Some("semantic")] {
        let mut params = json!({"query": question, "kinds": ["tool"], "limit": 3});
        if let Some(mode) = mode {
            params["mode"] = json!(mode);
        }
        let answer = daemon.call("catalog/search", params);
        assert_eq!(answer["mode"], mode.unwrap_or("hybrid"), "{answer}");
        assert_eq!(names(&answer)[0], "get_forecast", "{mode:?}: {answer}");
    }

    // Pages of a hybrid ranking concatenate to one page, never repeating a hit.
    let whole = names(&daemon.call(
        "catalog/search",
        json!({"query": "money exchange", "limit": 6, "kinds": ["tool", "prompt"]}),
    ));
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    while paged.len() < 6 {
        let mut params =
            json!({"query": "money exchange", "limit": 2, "kinds": ["tool", "prompt"]});
        if let Some(cursor) = &cursor {
            params["cursor"] = json!(cursor);
        }
        let page = daemon.call("catalog/search", params);
        paged.extend(names(&page));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, whole);
    assert_eq!(whole[0], "convert_currency");

    // The MCP face's search gives a host the found tools' whole definitions.
    let called = daemon.call(
        "tools/call",
        json!({"name": "search_catalog", "arguments": {
            "query": "email someone", "kinds": ["tool"], "limit": 2, "definitions": true
        }}),
    );
    let hits = called["structuredContent"]["hits"]
        .as_array()
        .expect("hits");
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["name"], "send_email");
    assert_eq!(
        hits[0]["definition"]["inputSchema"]["required"],
        json!(["input"])
    );
    assert_eq!(hits[0]["definition"]["annotations"]["readOnlyHint"], true);

    // A restart reads the vectors back: nothing is embedded again, so the file does not grow.
    let file = scratch.path("catalog.vectors");
    let size = std::fs::metadata(&file).expect("the vectors file").len();
    daemon.stop();
    let daemon = semantic_daemon(&scratch, &model);
    daemon.wait_for_walks("fx", 1);
    wait_for_vectors(&daemon, embedded);
    assert_eq!(
        std::fs::metadata(&file).expect("the vectors file").len(),
        size
    );
    let answer = daemon.call(
        "catalog/search",
        json!({"query": question, "kinds": ["tool"]}),
    );
    assert_eq!(names(&answer)[0], "get_forecast");
}

#[test]
fn search_stays_lexical_and_says_why_when_the_model_cannot_load() {
    let scratch = Scratch::new();
    let missing = scratch.path("no-such-model");
    let daemon = semantic_daemon(&scratch, &missing);
    daemon.wait_for_walks("fx", 1);
    let status = wait_for("the model's failure", Duration::from_secs(30), || {
        let vectors = vectors(&daemon);
        (vectors["state"] == "failed").then_some(vectors)
    });
    assert!(status["error"]
        .as_str()
        .expect("error")
        .contains("config.json"));
    let answer = email_tool_search(&daemon);
    assert_eq!(answer["mode"], "lexical");
    assert!(answer["note"]
        .as_str()
        .expect("note")
        .contains("answered lexically"));
    assert_eq!(names(&answer), ["send_email"]);
}

/// A model directory that claims what it does not hold: config.json's sizes (`hidden_size`
/// 10^12, 10,000 layers), a safetensors header naming a 4 TB tensor in a file of 256 data bytes,
/// the real tokenizer.json beside them. `safetensors` is the header (the tensor table).
fn hostile_model(
    scratch: &Scratch,
    name: &str,
    config: Value,
    safetensors: &str,
) -> std::path::PathBuf {
    let directory = scratch.path(name);
    std::fs::create_dir_all(&directory).expect("model dir");
    std::fs::copy(
        install::minilm_model().join("tokenizer.json"),
        directory.join("tokenizer.json"),
    )
    .expect("tokenizer");
    std::fs::write(directory.join("config.json"), config.to_string()).expect("config");
    let mut bytes = (safetensors.len() as u64).to_le_bytes().to_vec();
    bytes.extend(safetensors.as_bytes());
    bytes.extend([0u8; 256]);
    std::fs::write(directory.join("model.safetensors"), bytes).expect("weights");
    directory
}

fn absurd_config() -> Value {
    json!({
        "model_type": "bert", "hidden_size": 1_000_000_000_000u64, "num_attention_heads": 1,
        "num_hidden_layers": 10_000, "intermediate_size": 1_000_000_000_000u64,
        "vocab_size": 1, "max_position_embeddings": 512, "type_vocab_size": 1,
        "hidden_act": "gelu", "layer_norm_eps": 1e-12
    })
}

fn load_error(directory: &Path) -> String {
    Encoder::load(directory, Precision::default())
        .err()
        .expect("the hostile model is refused")
        .to_string()
}

#[test]
fn a_hostile_model_directory_is_refused_before_anything_is_sized_by_it() {
    let scratch = Scratch::new();
    // A 4 TB tensor claimed by a header in a file of 256 data bytes: refused, nothing reserved.
    let huge = r#"{"embeddings.word_embeddings.weight":{"dtype":"F32","shape":[1,1000000000000],"data_offsets":[0,4000000000000]}}"#;
    let directory = hostile_model(&scratch, "huge", absurd_config(), huge);
    assert!(load_error(&directory).contains("past the end of the file"));
    // A header whose length runs past the file.
    let truncated = hostile_model(&scratch, "truncated", absurd_config(), "{}");
    let weights = truncated.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).expect("weights");
    bytes[..8].copy_from_slice(&(4u64 << 20).to_le_bytes());
    std::fs::write(&weights, bytes).expect("weights");
    assert!(load_error(&truncated).contains("past the end of the file"));
    // Shapes that do not match config.json.
    let config = json!({
        "model_type": "bert", "hidden_size": 4, "num_attention_heads": 1,
        "num_hidden_layers": 10_000, "intermediate_size": 4, "vocab_size": 1,
        "max_position_embeddings": 8, "type_vocab_size": 1, "hidden_act": "gelu",
        "layer_norm_eps": 1e-12
    });
    let mismatch = r#"{"embeddings.word_embeddings.weight":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}}"#;
    let directory = hostile_model(&scratch, "mismatch", config.clone(), mismatch);
    assert!(load_error(&directory).contains("expected [1, 4]"));
    // 10,000 layers the file does not hold.
    let embeddings = [
        ("embeddings.word_embeddings.weight", "[1,4]", 0, 16),
        ("embeddings.position_embeddings.weight", "[8,4]", 16, 144),
        ("embeddings.token_type_embeddings.weight", "[1,4]", 144, 160),
        ("embeddings.LayerNorm.weight", "[4]", 160, 176),
        ("embeddings.LayerNorm.bias", "[4]", 160, 176),
    ];
    let table: Vec<String> = embeddings
        .iter()
        .map(|(name, shape, start, end)| {
            format!(r#""{name}":{{"dtype":"F32","shape":{shape},"data_offsets":[{start},{end}]}}"#)
        })
        .collect();
    let directory = hostile_model(
        &scratch,
        "layers",
        config.clone(),
        &format!("{{{}}}", table.join(",")),
    );
    assert!(load_error(&directory).contains("no tensor encoder.layer.0."));
    // A model reading fewer tokens than its special ones (the tokenizer would underflow).
    let mut one_token = config;
    one_token["max_position_embeddings"] = json!(1);
    let directory = hostile_model(&scratch, "one-token", one_token, "{}");
    assert!(load_error(&directory).contains("reads at most 1 tokens"));
    // A 500 MB tokenizer.json (sparse), and one nested 100,000 deep.
    let directory = hostile_model(&scratch, "big-tokenizer", absurd_config(), huge);
    let tokenizer = std::fs::File::create(directory.join("tokenizer.json")).expect("tokenizer");
    tokenizer.set_len(500 << 20).expect("sparse tokenizer");
    assert!(load_error(&directory).contains("over the"));
    let directory = hostile_model(&scratch, "deep-tokenizer", absurd_config(), huge);
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    std::fs::write(directory.join("tokenizer.json"), deep).expect("tokenizer");
    assert!(load_error(&directory).contains("tokenizer.json"));
}

#[test]
fn a_model_claiming_terabytes_leaves_the_daemon_up_and_search_lexical() {
    let scratch = Scratch::new();
    let huge = r#"{"embeddings.word_embeddings.weight":{"dtype":"F32","shape":[1,1000000000000],"data_offsets":[0,4000000000000]}}"#;
    let model = hostile_model(&scratch, "huge", absurd_config(), huge);
    let daemon = semantic_daemon(&scratch, &model);
    daemon.wait_for_walks("fx", 1);
    let status = wait_for("the model's failure", Duration::from_secs(30), || {
        let vectors = vectors(&daemon);
        (vectors["state"] == "failed").then_some(vectors)
    });
    let error = status["error"].as_str().expect("error");
    assert!(error.contains("past the end of the file"), "{error}");
    let answer = email_tool_search(&daemon);
    assert_eq!(answer["mode"], "lexical");
    assert_eq!(names(&answer), ["send_email"]);
}

/// A daemon like `semantic_daemon`'s with more `[search]` lines.
fn semantic_daemon_with(scratch: &Scratch, model: &Path, search: &str) -> Daemon {
    let scenario = scratch.write_scenario("scenario.json", &catalog());
    let scenario = scenario.display().to_string();
    let server = stdio_server("fx", &["--name", "fx", "--scenario", &scenario]);
    let config = scratch.config(&server);
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[search]\nsemantic_model = {:?}\n{search}\n",
        model.display().to_string()
    ));
    std::fs::write(&config, text).expect("config");
    Daemon::start(scratch, &config)
}

/// Waits for the model to fail; its error, which the log says once.
fn model_failure(daemon: &Daemon) -> String {
    let status = wait_for("the model's failure", Duration::from_secs(60), || {
        let vectors = vectors(daemon);
        (vectors["state"] == "failed").then_some(vectors)
    });
    let error = status["error"].as_str().expect("error").to_string();
    // A model that fails at once (a 1 ms deadline) can fail before the first walk: the search
    // is asked once the tools are there, and must answer lexically.
    daemon.wait_for_walks("fx", 1);
    let answer = email_tool_search(daemon);
    assert_eq!(answer["mode"], "lexical");
    assert_eq!(names(&answer), ["send_email"]);
    let said = daemon
        .log_text()
        .lines()
        .filter(|line| line.contains("semantic search is off"))
        .count();
    assert_eq!(said, 1, "{}", daemon.log_text());
    error
}

/// A FIFO where the weights should be: the open would block for good (semantic search
/// "loading" forever, with no log line); refused as not a regular file instead.
#[test]
fn a_fifo_in_the_model_directory_fails_the_model_instead_of_loading_forever() {
    let scratch = Scratch::new();
    let model = hostile_model(&scratch, "fifo", absurd_config(), "{}");
    let weights = model.join("model.safetensors");
    std::fs::remove_file(&weights).expect("remove the weights");
    let made = std::process::Command::new("mkfifo")
        .arg(&weights)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let daemon = semantic_daemon(&scratch, &model);
    daemon.wait_for_walks("fx", 1);
    let error = model_failure(&daemon);
    assert!(
        error.contains("not a regular file (a FIFO)") && error.contains("model.safetensors"),
        "{error}"
    );
}

/// A load past `[search] semantic_load_timeout` (a real model, given 1 ms) fails the model.
#[test]
fn a_model_loading_past_its_deadline_fails_and_search_stays_lexical() {
    let scratch = Scratch::new();
    let daemon = semantic_daemon_with(
        &scratch,
        &install::minilm_model(),
        "semantic_load_timeout = \"1ms\"",
    );
    daemon.wait_for_walks("fx", 1);
    let error = model_failure(&daemon);
    assert!(error.contains("semantic_load_timeout"), "{error}");
}

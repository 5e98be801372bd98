//! The encoder of `[search] semantic_model` against an independent implementation: the same token ids, and the same vectors within 1e-5, on texts of every shape a catalog has.

use std::io::Write;
use std::process::{Command, Stdio};

use mcp_mirror::semantic::Encoder;
use serde_json::json;

use crate::install;

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

#[test]
fn encoder_matches_an_independent_numpy_forward_pass() {
    let model = install::minilm_model();
    let python = install::python_numpy();
    let encoder = Encoder::load(&model).expect("the model loads");
    assert_eq!(encoder.dimensions, 384);
    assert_eq!(encoder.max_tokens, 256);
    let texts = texts();

    let mut child = Command::new(&python)
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
    let reference: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the reference answers JSON");

    let mut worst = 0f64;
    for (number, text) in texts.iter().enumerate() {
        let ids = encoder.token_ids(text).expect("tokenizes");
        let expected_ids: Vec<u32> =
            serde_json::from_value(reference["ids"][number].clone()).expect("ids");
        assert_eq!(ids, expected_ids, "token ids of {text:?}");
        let vector = encoder.embed(text).expect("embeds");
        let expected: Vec<f64> =
            serde_json::from_value(reference["vectors"][number].clone()).expect("vector");
        assert_eq!(vector.len(), expected.len());
        for (index, (got, want)) in vector.iter().zip(&expected).enumerate() {
            let difference = (f64::from(*got) - want).abs();
            worst = worst.max(difference);
            assert!(
                difference <= 1e-5,
                "{text:?}: component {index} is {got}, the reference {want}"
            );
        }
    }
    println!("largest difference from the reference: {worst:e}");
    // The long text really was cut at the model's limit.
    let long = texts.last().expect("a long text");
    assert_eq!(encoder.token_ids(long).expect("tokenizes").len(), 256);
}

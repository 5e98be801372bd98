//! Each subcommand's `--help` lists the flags it takes and no other (`serve` has no `--url`),
//! and a client flag written before a command that does not take it is refused.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::MIRROR;

/// The `--flags` a help text lists in its options.
fn listed_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .map(str::trim_start)
        .filter_map(|line| {
            // A short form first (`-h, --help`, `-V, --version`).
            let line = match line.as_bytes() {
                [b'-', short, b',', b' ', ..] if short.is_ascii_alphabetic() => &line[4..],
                _ => line,
            };
            let flag = line.strip_prefix("--")?;
            let end = flag
                .find(|character: char| !(character.is_ascii_alphanumeric() || character == '-'))
                .unwrap_or(flag.len());
            Some(flag[..end].to_string())
        })
        .collect()
}

fn help_of(command: &str) -> String {
    let output = Command::new(MIRROR)
        .args([command, "--help"])
        .output()
        .expect("run mcp-mirror");
    assert!(output.status.success(), "{command} --help");
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn each_subcommand_lists_only_the_flags_it_takes() {
    const CLIENT: &[&str] = &["socket", "url", "token-file", "json"];
    const READING: &[&str] = &["socket", "url", "token-file", "json", "database"];
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("serve", &["config", "log-format"], &[]),
        ("check", &["config"], &[]),
        ("status", &[], CLIENT),
        ("ls", &["server", "long"], READING),
        ("templates", &[], READING),
        (
            "search",
            &[
                "limit",
                "server",
                "mime-type",
                "raw",
                "cursor",
                "kind",
                "mode",
                "uri-flag",
            ],
            READING,
        ),
        ("show", &[], READING),
        ("tools", &["server"], READING),
        ("prompts", &["server"], READING),
        ("changes", &["since", "kind"], READING),
        ("drift", &["server"], CLIENT),
        ("accept", &["server"], CLIENT),
        ("read", &["output"], CLIENT),
        ("watch", &["since"], CLIENT),
        ("mcp", &["socket"], &[]),
        ("refresh", &["wait"], CLIENT),
        ("reload", &["pid", "socket", "json"], &[]),
        ("completions", &[], &[]),
        ("man", &[], &[]),
    ];
    for (command, own, shared) in cases {
        let mut expected: BTreeSet<String> = own
            .iter()
            .chain(*shared)
            .map(|flag| flag.to_string())
            .collect();
        expected.insert("help".to_string());
        let help = help_of(command);
        assert_eq!(
            listed_flags(&help),
            expected,
            "mcp-mirror {command} --help:\n{help}"
        );
    }
}

#[test]
fn the_top_level_help_lists_no_client_flags() {
    let output = Command::new(MIRROR).arg("--help").output().expect("run");
    let help = String::from_utf8(output.stdout).expect("utf-8");
    let flags = listed_flags(&help);
    assert_eq!(
        flags,
        ["help", "version"].into_iter().map(String::from).collect(),
        "{help}"
    );
    assert!(help.contains("  check "), "{help}");
}

#[test]
fn a_client_flag_is_refused_where_it_means_nothing() {
    for (args, words) in [
        (
            &["serve", "--url", "http://127.0.0.1:1/mcp"][..],
            "unexpected argument '--url'",
        ),
        (&["serve", "--json"][..], "unexpected argument '--json'"),
        (&["--json", "serve"][..], "`serve` takes no --json"),
        (
            &["--url", "http://127.0.0.1:1/mcp", "mcp"][..],
            "`mcp` takes no --url",
        ),
        (
            &["--database", "x.db", "refresh"][..],
            "`refresh` takes no --database",
        ),
        (
            &["refresh", "--database", "x.db"][..],
            "unexpected argument '--database'",
        ),
    ] {
        let output = Command::new(MIRROR)
            .args(args)
            .env_remove("MCP_MIRROR_URL")
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
}

//! `serve` refuses a bad configuration with a message naming the file, the line and the key.

use std::process::Command;

use crate::support::{Scratch, MIRROR};

fn serve_output(scratch: &Scratch, text: &str) -> (i32, String) {
    let path = scratch.write("daemon.toml", text);
    let output = Command::new(MIRROR)
        .args(["serve", "--config"])
        .arg(&path)
        .env_remove("MIRROR_TEST_UNSET_TOKEN")
        .output()
        .expect("run mcp-mirror serve");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_configs_are_refused_with_file_line_and_key() {
    let scratch = Scratch::new();
    let file = scratch.path("daemon.toml").display().to_string();
    let cases = [
        ("[daemon]\nresync_interval = \"soonish\"\n", 2, "daemon.resync_interval", "not a duration"),
        ("[servers.a]\n\n[servers.b]\ncommand = \"x\"\n", 1, "servers.a", "set `url`"),
        ("[servers.a]\nurl = \"http://127.0.0.1:1/mcp\"\ncommand = \"x\"\n", 3, "servers.a", "not both"),
        (
            "[servers.a]\nurl = \"http://127.0.0.1:1/mcp\"\nbearer_token_env = \"MIRROR_TEST_UNSET_TOKEN\"\n",
            3,
            "servers.a.bearer_token_env",
            "MIRROR_TEST_UNSET_TOKEN is not set",
        ),
        ("[daemon]\ndatabse = \"x.db\"\n", 2, "daemon.databse", "unknown field"),
        ("[servers.a]\ncommand = \"x\"\nargs = \"not a list\"\n", 3, "", "invalid type"),
        ("[daemon\n", 1, "", "unclosed table"),
    ];
    for (text, line, key, words) in cases {
        let (code, stderr) = serve_output(&scratch, text);
        assert_eq!(code, 2, "{text:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{file}:{line}: ")),
            "{text:?}: {stderr}"
        );
        assert!(stderr.contains(key), "{text:?}: {stderr}");
        assert!(stderr.contains(words), "{text:?}: {stderr}");
    }
}

#[test]
fn a_missing_config_file_is_named() {
    let scratch = Scratch::new();
    let missing = scratch.path("nope.toml");
    let output = Command::new(MIRROR)
        .args(["serve", "--config"])
        .arg(&missing)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}

#[test]
fn a_refused_config_never_quotes_a_value() {
    const SECRET: &str = "tok-misplaced-3c9e1a77";
    let scratch = Scratch::new();
    for text in [
        format!("[servers.a]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = \"X-Key: {SECRET}\"\n"),
        format!(
            "[servers.a]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = {{ \"X-Key\" = {SECRET} }}\n"
        ),
        format!(
            "[servers.a]\ncommand = \"x\"\nenv = {{ KEY = \"{SECRET}\" }}\npriority = \"high\"\n"
        ),
    ] {
        let (code, stderr) = serve_output(&scratch, &text);
        assert_eq!(code, 2, "{text:?}: {stderr}");
        assert!(
            stderr.contains(":3: ") || stderr.contains(":4: "),
            "{text:?}: {stderr}"
        );
        assert!(!stderr.contains(SECRET), "{text:?}: {stderr}");
    }
}

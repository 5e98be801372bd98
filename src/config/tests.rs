//! Unit tests of the configuration: value syntaxes, a full file, errors naming file, line and key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::ExposeSecret;

use super::values::{parse_duration, parse_size};
use super::*;

fn parse_text(text: &str) -> Result<Config, ConfigError> {
    parse(Path::new("/etc/mcp-mirror/daemon.toml"), text, &|name| {
        (name == "SET_TOKEN").then(|| "s3cret".to_string())
    })
}

#[test]
fn sizes_parse() {
    assert_eq!(parse_size("10MiB"), Ok(10 << 20));
    assert_eq!(parse_size("512KiB"), Ok(512 << 10));
    assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("0").is_err());
    assert!(parse_size("lots").is_err());
    assert!(parse_size("10 parsecs").is_err());
    assert!(parse_size("99999999999999999999GiB").is_err());
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert!(parse_duration("soon").is_err());
    assert!(parse_duration("15").is_err());
    assert!(parse_duration("0s").is_err());
    assert!(parse_duration("").is_err());
}

#[test]
fn full_config_validates() {
    let config = parse_text(
        r#"
[daemon]
database = "state/catalog.db"
socket = "/run/m.sock"
resync_interval = "10m"
max_pages = 50

[servers.docs]
url = "https://example.com/mcp"
bearer_token_env = "SET_TOKEN"
headers = { "X-Team" = "search" }
priority = 10

[servers.local]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { LOG_LEVEL = "warn", API_KEY = "env-s3cret-value" }
max_items = 20
"#,
    )
    .expect("valid config");
    assert_eq!(
        config.daemon.database,
        PathBuf::from("/etc/mcp-mirror/state/catalog.db")
    );
    assert_eq!(config.daemon.resync_interval, Duration::from_secs(600));
    assert_eq!(config.servers.len(), 2);
    let docs = &config.servers[0];
    assert_eq!(docs.priority, 10);
    assert_eq!(docs.limits.max_pages, 50);
    match &docs.transport {
        Transport::Http { bearer_token, .. } => {
            assert_eq!(
                bearer_token.as_ref().map(ExposeSecret::expose_secret),
                Some("s3cret")
            );
            assert!(!format!("{docs:?}").contains("s3cret"));
        }
        other => panic!("unexpected transport {other:?}"),
    }
    assert_eq!(config.servers[1].limits.max_items, 20);
    assert!(!config.daemon.keep_removed);
    let secrets: Vec<&str> = config.secrets().collect();
    assert_eq!(secrets, ["search", "s3cret", "env-s3cret-value", "warn"]);
    let debug = format!("{config:?}");
    assert!(!debug.contains("search\""), "{debug}");
    assert!(!debug.contains("env-s3cret-value"), "{debug}");
    assert!(debug.contains("API_KEY"), "{debug}");
}

#[test]
fn daemon_keys_for_the_service() {
    let config =
        parse_text("[daemon]\nkeep_removed = true\nlog_level = \"mcp_mirror=debug,warn\"\n")
            .expect("valid config");
    assert!(config.daemon.keep_removed);
    assert_eq!(
        config.daemon.log_level.as_deref(),
        Some("mcp_mirror=debug,warn")
    );
    let error = parse_text("[daemon]\nlog_level = \"=[\"\n").expect_err("bad filter");
    assert!(
        error.to_string().contains(":2: daemon.log_level: "),
        "{error}"
    );
}

#[test]
fn token_files_expand_the_credentials_directory() {
    let directory = tempfile::tempdir().expect("temp dir");
    std::fs::write(directory.path().join("docs-token"), "tok-from-credential\n").expect("write");
    let credentials = directory.path().to_string_lossy().to_string();
    for reference in ["%d/docs-token", "$CREDENTIALS_DIRECTORY/docs-token"] {
        let text = format!("[servers.docs]\nurl = \"https://example.com/mcp\"\nbearer_token_file = \"{reference}\"\n");
        let config = parse(Path::new("/etc/mcp-mirror/daemon.toml"), &text, &|name| {
            (name == "CREDENTIALS_DIRECTORY").then(|| credentials.clone())
        })
        .expect("valid config");
        match &config.servers[0].transport {
            Transport::Http { bearer_token, .. } => assert_eq!(
                bearer_token.as_ref().map(ExposeSecret::expose_secret),
                Some("tok-from-credential")
            ),
            other => panic!("unexpected transport {other:?}"),
        }
    }
}

#[test]
fn errors_name_file_line_and_key() {
    let cases = [
        (
            "[servers.a]\nurl = \"http://x/\"\ncommand = \"y\"\n",
            3,
            "servers.a",
        ),
        ("[daemon]\n\n[servers.a]\nargs = []\n", 3, "servers.a"),
        (
            "[servers.a]\nurl = \"http://x/\"\nbearer_token_env = \"NOPE\"\n",
            3,
            "servers.a.bearer_token_env",
        ),
        (
            "[daemon]\nresync_interval = \"soon\"\n",
            2,
            "daemon.resync_interval",
        ),
        ("[daemon]\nsurprise = 1\n", 2, "surprise"),
        ("[servers.a]\ncommand = \"x\"\nbogus = true\n", 3, "bogus"),
        ("[daemon\n", 1, ""),
    ];
    // A value is never quoted back: it may be a secret.
    let error =
        parse_text("[servers.a]\nurl = \"http://x/\"\nheaders = { \"K\" = tok-unquoted-secret }\n")
            .expect_err("unquoted value");
    assert!(
        !error.to_string().contains("tok-unquoted-secret"),
        "{error}"
    );
    // Nor is a secret of the wrong type, which serde would quote in its message.
    let error =
        parse_text("[servers.a]\nurl = \"http://x/\"\nheaders = \"X-Key: tok-misplaced-secret\"\n")
            .expect_err("headers of the wrong type");
    let rendered = error.to_string();
    assert!(rendered.contains(":3: "), "{rendered}");
    assert!(rendered.contains("invalid type"), "{rendered}");
    assert!(!rendered.contains("tok-misplaced-secret"), "{rendered}");
    for (text, line, key) in cases {
        let error = parse_text(text).expect_err(text);
        let rendered = error.to_string();
        assert!(
            rendered.starts_with(&format!("/etc/mcp-mirror/daemon.toml:{line}: ")),
            "{text:?} gave {rendered}"
        );
        assert!(rendered.contains(key), "{text:?} gave {rendered}");
    }
}

#[test]
fn a_changed_token_or_env_value_is_a_changed_server() {
    let http = |token: &'static str| {
        parse(
            Path::new("/etc/mcp-mirror/daemon.toml"),
            "[servers.docs]\nurl = \"https://example.com/mcp\"\nbearer_token_env = \"T\"\n",
            &move |_| Some(token.to_string()),
        )
        .expect("valid config")
    };
    assert_eq!(http("token-one"), http("token-one"));
    assert_ne!(http("token-one"), http("token-two"));
    let stdio = |value: &str| {
        parse_text(&format!(
            "[servers.local]\ncommand = \"x\"\nenv = {{ KEY = \"{value}\" }}\n"
        ))
        .expect("valid config")
    };
    assert_ne!(stdio("value-one"), stdio("value-two"));
}

#[test]
fn template_bounds_have_defaults_and_ceilings() {
    let config = parse_text("[servers.a]\ncommand = \"x\"\n").expect("valid");
    assert_eq!(config.servers[0].limits.max_template_bytes, 4096);
    assert_eq!(config.servers[0].limits.max_template_expressions, 64);
    let config = parse_text(
        "[daemon]\nmax_template_bytes = 65536\nmax_template_expressions = 1024\n\n[servers.a]\ncommand = \"x\"\n",
    )
    .expect("valid");
    assert_eq!(config.servers[0].limits.max_template_bytes, 65536);
    assert_eq!(config.servers[0].limits.max_template_expressions, 1024);
    for (key, value) in [
        ("max_template_bytes", 65537),
        ("max_template_expressions", 1025),
    ] {
        let error = parse_text(&format!("[daemon]\n{key} = {value}\n")).expect_err(key);
        let rendered = error.to_string();
        assert!(
            rendered.contains(&format!("daemon.{key}")) && rendered.contains("must be at most"),
            "{rendered}"
        );
    }
}

#[test]
fn the_first_load_index_hold_is_a_duration_or_off() {
    let hold = |table: &str| {
        parse_text(&format!("[search]\n{table}\n"))
            .map(|config| config.search.first_load_index_hold)
    };
    assert_eq!(hold("").expect("default"), None);
    assert_eq!(
        hold("first_load_index_hold = \"10s\"").expect("10s"),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        hold("first_load_index_hold = \"off\"").expect("off"),
        Some(Duration::ZERO)
    );
    let error = hold("first_load_index_hold = \"soon\"").expect_err("not a duration");
    assert!(
        error.to_string().contains("search.first_load_index_hold"),
        "{error}"
    );
}

#[test]
fn the_semantic_precision_is_bf16_unless_f32_is_asked() {
    let precision = |table: &str| {
        parse_text(&format!("[search]\n{table}\n")).map(|config| config.search.semantic_precision)
    };
    assert_eq!(precision("").expect("default"), super::Precision::Bf16);
    assert_eq!(
        precision("semantic_precision = \"f32\"").expect("f32"),
        super::Precision::F32
    );
    assert_eq!(
        precision("semantic_precision = \"bf16\"").expect("bf16"),
        super::Precision::Bf16
    );
    let error = precision("semantic_precision = \"int8\"").expect_err("not a precision");
    let rendered = error.to_string();
    assert!(
        rendered.contains("search.semantic_precision") && rendered.contains(":2:"),
        "{rendered}"
    );
}

#[test]
fn nats_keys_are_checked_and_their_errors_name_file_line_and_key() {
    let cases = [
        (
            "[servers.f]\nnats = \"http://x/\"\nbucket = \"b\"\n",
            2,
            "servers.f.nats",
        ),
        (
            "[servers.f]\nnats = \"nats://x:4222\"\n",
            2,
            "servers.f.bucket",
        ),
        (
            "[servers.f]\nnats = \"nats://x:4222\"\nbucket = \"no.dots\"\n",
            3,
            "servers.f.bucket",
        ),
        (
            "[servers.f]\nnats = \"nats://x:4222\"\nbucket = \"b\"\nurl = \"http://x/\"\n",
            2,
            "servers.f.url",
        ),
        (
            "[servers.f]\ncommand = \"x\"\nbucket = \"b\"\n",
            3,
            "servers.f.bucket",
        ),
        ("[nats]\nurl = \"localhost\"\n", 2, "nats.url"),
        (
            "[nats.publish.fleet]\nservers = [\"a\"]\n",
            1,
            "nats.publish.fleet",
        ),
        (
            "[nats]\nurl = \"nats://x:4222\"\n[nats.publish.fleet]\nkinds = [\"blob\"]\n",
            3,
            "nats.publish.fleet.kinds",
        ),
    ];
    for (text, line, key) in cases {
        let error = parse_text(text).expect_err(text);
        let rendered = error.to_string();
        assert!(
            rendered.starts_with(&format!("/etc/mcp-mirror/daemon.toml:{line}: ")),
            "{text:?} gave {rendered}"
        );
        assert!(rendered.contains(key), "{text:?} gave {rendered}");
    }
    let config = parse_text(
        "[nats]\nurl = \"nats://x:4222\"\ncredentials = \"fleet.creds\"\n\
         [nats.publish.fleet]\nkinds = [\"resource\"]\n\
         [servers.f]\nnats = \"nats://x:4222\"\nbucket = \"fleet\"\n",
    )
    .expect("valid config");
    assert_eq!(config.nats.publish.len(), 1);
    match &config.servers[0].transport {
        Transport::Nats {
            bucket,
            credentials,
            ..
        } => {
            assert_eq!(bucket, "fleet");
            assert_eq!(
                credentials.as_deref(),
                Some(Path::new("/etc/mcp-mirror/fleet.creds"))
            );
        }
        other => panic!("{other:?}"),
    }
}

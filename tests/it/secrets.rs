//! Secrets stay in their place: an `env` value a hostile server echoes never reaches the log,
//! status or the database files, and the state directory and database are owner-only.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::support::{open_database, run_cli, stdio_server, wait_for, Daemon, Scratch, MIRROR};

/// A stdio MCP server that echoes its API key wherever it can: on stderr, in `serverInfo`
/// and in the error it answers every request after `initialize` with.
const ECHOING_SERVER: &str = r#"
echo "hostile server starting with key $MIRROR_TEST_API_KEY" >&2
while IFS= read -r line; do
  id=$(printf '%s\n' "$line" | sed -n 's/^{"id":\([0-9][0-9]*\),.*/\1/p')
  [ -n "$id" ] || continue
  case "$line" in
    *'"method":"initialize"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"resources":{}},"serverInfo":{"name":"echo","version":"%s"}}}\n' "$id" "$MIRROR_TEST_API_KEY" ;;
    *)
      echo "refusing a request with key $MIRROR_TEST_API_KEY" >&2
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"upstream rejected key %s"}}\n' "$id" "$MIRROR_TEST_API_KEY" ;;
  esac
done
"#;

/// Starts the real daemon on `config` with umask 022, the common default that would leave
/// new files readable by every local user.
fn start_with_umask_022(scratch: &Scratch, config: &Path, database: &Path) -> Daemon {
    let log = scratch.path("daemon.log");
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut command = Command::new(MIRROR);
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "debug,mcp_mirror=trace")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    // SAFETY: umask(2) is async-signal-safe and touches only the child being started.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    let mut daemon = Daemon {
        child: command.spawn().expect("start mcp-mirror"),
        socket: scratch.path("mirror.sock"),
        database: database.to_path_buf(),
        log,
    };
    let socket = daemon.socket.clone();
    wait_for("the daemon's socket", Duration::from_secs(20), || {
        if let Ok(Some(status)) = daemon.child.try_wait() {
            panic!("the daemon exited with {status}: {}", daemon.log_text());
        }
        UnixStream::connect(&socket).ok().map(|_| ())
    });
    daemon
}

/// Every file of the database (the file itself, `-wal`, `-shm`, `-journal`), with its bytes.
fn database_files(database: &Path) -> Vec<(String, Vec<u8>)> {
    let directory = database.parent().expect("database directory");
    let stem = database.file_name().expect("file name").to_string_lossy();
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(directory)
        .expect("read the database directory")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&*stem))
        .map(|entry| {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn an_env_value_never_reaches_logs_status_or_the_database() {
    const API_KEY: &str = "sk-envkey-4d1c8e2f-DO-NOT-LEAK";
    let scratch = Scratch::new();
    let script = scratch.write("echoing-server.sh", ECHOING_SERVER);
    let database = scratch.path("catalog.db");
    let config = scratch.write(
        "daemon.toml",
        &format!(
            "[daemon]\ndatabase = {:?}\nsocket = {:?}\nrequest_timeout = \"5s\"\n\n\
             [servers.echo]\ncommand = \"/bin/sh\"\nargs = [{:?}]\nera = \"legacy\"\n\
             env = {{ MIRROR_TEST_API_KEY = {API_KEY:?} }}\n",
            database.display().to_string(),
            scratch.path("mirror.sock").display().to_string(),
            script.display().to_string(),
        ),
    );
    let mut daemon = start_with_umask_022(&scratch, &config, &database);
    let failed = wait_for(
        "the echoing server's error",
        Duration::from_secs(20),
        || {
            let status = daemon.server_status("echo");
            status["lastError"].is_string().then_some(status)
        },
    );
    // The key went through every path, scrubbed: the test would see a leak.
    assert!(
        failed["lastError"]
            .as_str()
            .is_some_and(|error| error.contains("<redacted>")),
        "{failed}"
    );
    wait_for(
        "the stderr line in the log",
        Duration::from_secs(10),
        || {
            daemon
                .log_text()
                .contains("starting with key <redacted>")
                .then_some(())
        },
    );
    let stored_info: String = open_database(&database)
        .query_row(
            "SELECT server_info FROM servers WHERE name = 'echo'",
            [],
            |row| row.get(0),
        )
        .expect("server_info");
    assert!(stored_info.contains("<redacted>"), "{stored_info}");

    let status = daemon.call("catalog/status", json!({}));
    let cli_json = run_cli(&daemon.socket, &["status", "--json"]);
    let cli_text = run_cli(&daemon.socket, &["status"]);
    let mut texts = vec![
        ("catalog/status".to_string(), status.to_string()),
        (
            "status --json".to_string(),
            String::from_utf8_lossy(&cli_json.stdout).into_owned(),
        ),
        (
            "status".to_string(),
            String::from_utf8_lossy(&cli_text.stdout).into_owned(),
        ),
    ];
    let mut files = database_files(&database);
    assert!(
        files.iter().any(|(name, _)| name.ends_with("-wal")),
        "no WAL to search: {:?}",
        files.iter().map(|(name, _)| name).collect::<Vec<_>>()
    );
    daemon.stop();
    files.extend(database_files(&database));
    texts.push(("daemon log".to_string(), daemon.log_text()));
    for (what, text) in &texts {
        assert!(
            !text.contains(API_KEY),
            "{what} holds the env value: {text}"
        );
    }
    for (name, bytes) in &files {
        assert!(!contains(bytes, API_KEY), "{name} holds the env value");
    }
}

#[test]
fn the_state_directory_and_database_files_are_owner_only() {
    let scratch = Scratch::new();
    let state = scratch.path("state");
    let database = state.join("nested").join("catalog.db");
    let server = stdio_server("docs", &["--name", "docs", "--generate", "3"]);
    let config = scratch.write(
        "daemon.toml",
        &format!(
            "[daemon]\ndatabase = {:?}\nsocket = {:?}\n\n{server}",
            database.display().to_string(),
            scratch.path("mirror.sock").display().to_string(),
        ),
    );
    let mut daemon = start_with_umask_022(&scratch, &config, &database);
    daemon.wait_for_walks("docs", 1);
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    for directory in [&state, &state.join("nested")] {
        assert_eq!(mode(directory), 0o700, "{}", directory.display());
    }
    let files = database_files(&database);
    for suffix in ["", "-wal", "-shm"] {
        assert!(
            files
                .iter()
                .any(|(name, _)| *name == format!("catalog.db{suffix}")),
            "catalog.db{suffix} is missing"
        );
    }
    for (name, _) in &files {
        assert_eq!(mode(&database.with_file_name(name)), 0o600, "{name}");
    }
    daemon.stop();
}

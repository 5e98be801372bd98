//! `mcp-mirror check`: the validation `serve` runs, printed as `file:line: key: what is wrong`,
//! on the shipped file, the package's file and broken ones, touching nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::install::repository;
use crate::support::{Scratch, MIRROR};

/// Runs `mcp-mirror ARGS --config CONFIG`: exit code, stdout, stderr.
fn run(command: &str, config: &Path) -> (i32, String, String) {
    let output = Command::new(MIRROR)
        .args([command, "--config"])
        .arg(config)
        .env_remove("CREDENTIALS_DIRECTORY")
        .output()
        .expect("run mcp-mirror");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_shipped_config_checks_clean() {
    let (code, stdout, stderr) = run("check", &repository().join("daemon.toml"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.ends_with("daemon.toml: ok (1 server)\n"), "{stdout}");
}

#[test]
fn the_package_config_checks_clean() {
    let scratch = Scratch::new();
    let output = Command::new(repository().join("packaging/debian/example-config"))
        .output()
        .expect("run packaging/debian/example-config");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(text.contains("# [servers.demo]"), "{text}");
    let config = scratch.write("daemon.toml", &text);
    let (code, stdout, stderr) = run("check", &config);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.ends_with("daemon.toml: ok (0 servers)\n"),
        "{stdout}"
    );
}

/// A problem `check` should print: its line, its key and words of its message.
type Problem = (usize, &'static str, &'static str);

/// Each broken file's problems, every one with its file, line and key, in one run; `serve`
/// refuses the same file with the same words.
#[test]
fn broken_configs_name_every_problem_with_file_line_and_key() {
    let scratch = Scratch::new();
    let file = scratch.path("daemon.toml").display().to_string();
    let occupied = scratch.write("occupied", "not a socket");
    let open_token = scratch.write("open-token", "tok-open\n");
    std::fs::set_permissions(&open_token, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let shared = scratch.path("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let cases: Vec<(String, Vec<Problem>)> = vec![
        (
            "[daemon]\nresync_interval = \"soonish\"\n\n[servers.a]\n\n[servers.b]\ncommand = \"x\"\nmax_pages = -1\n"
                .to_string(),
            vec![
                (2, "daemon.resync_interval", "not a duration"),
                (4, "servers.a", "set `url`"),
                (8, "servers.b.max_pages", ""),
            ],
        ),
        (
            format!(
                "[daemon]\ndatabase = {:?}\nsocket = {:?}\n",
                occupied.join("catalog.db").display().to_string(),
                occupied.display().to_string()
            ),
            vec![
                (2, "daemon.database", "is not a directory"),
                (3, "daemon.socket", "exists and is not a socket"),
            ],
        ),
        (
            format!(
                "[daemon]\ndatabase = {:?}\n\n[http]\nlisten = \"127.0.0.1:0\"\ntokens = {{ fleet = {:?} }}\n",
                scratch.path("catalog.db").display().to_string(),
                open_token.display().to_string()
            ),
            vec![
                (6, "http.tokens.fleet", "open to group or others (mode 0644)"),
            ],
        ),
        (
            format!(
                "[daemon]\ndatabase = {:?}\n",
                shared.join("catalog.db").display().to_string()
            ),
            vec![(2, "daemon.database", "writable by group or others (mode 0777)")],
        ),
        (
            format!("[daemon]\nsocket = \"{}/s.sock\"\n", "x".repeat(120)),
            vec![(2, "daemon.socket", "at most 107")],
        ),
    ];
    for (text, problems) in cases {
        let config = scratch.write("daemon.toml", &text);
        let (code, stdout, _) = run("check", &config);
        assert_eq!(code, 2, "{text}\n{stdout}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), problems.len() + 1, "{text}\n{stdout}");
        for (printed, (line, key, words)) in lines.iter().zip(&problems) {
            let start = format!("{file}:{line}: {key}: ");
            assert!(printed.starts_with(&start), "{text}\n{stdout}");
            assert!(printed.contains(words), "{text}\n{stdout}");
        }
        let summary = format!("{} problem", problems.len());
        assert!(lines[problems.len()].contains(&summary), "{stdout}");
        let (code, _, stderr) = run("serve", &config);
        assert_eq!(code, 2, "{text}\n{stderr}");
        for printed in &lines[..problems.len()] {
            let said = format!("mcp-mirror: invalid configuration: {printed}\n");
            assert!(
                stderr.contains(&said),
                "serve said other words:\n{stderr}\ncheck:\n{stdout}"
            );
        }
    }
}

/// What serve runs with anyway is a warning: printed with its place, exit 0.
#[test]
fn a_missing_model_directory_is_a_warning() {
    let scratch = Scratch::new();
    let database = scratch.path("catalog.db").display().to_string();
    let config = scratch.write(
        "daemon.toml",
        &format!("[daemon]\ndatabase = {database:?}\n\n[search]\nsemantic_model = \"no-model\"\n"),
    );
    let (code, stdout, stderr) = run("check", &config);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let expected = format!(
        "{}:5: search.semantic_model: {} is not a directory: serve starts, and search stays lexical (a warning)\n",
        config.display(),
        scratch.path("no-model").display()
    );
    assert!(stdout.starts_with(&expected), "{stdout}");
    assert!(
        stdout.ends_with("ok (0 servers, with warnings)\n"),
        "{stdout}"
    );
}

/// `check` opens no database and creates no directory or socket.
#[test]
fn check_touches_nothing() {
    let scratch = Scratch::new();
    let state = scratch.path("state");
    let config = scratch.write(
        "daemon.toml",
        &format!(
            "[daemon]\ndatabase = {:?}\nsocket = {:?}\n",
            state.join("catalog.db").display().to_string(),
            scratch.path("run/mirror.sock").display().to_string()
        ),
    );
    let (code, stdout, stderr) = run("check", &config);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!state.exists(), "check created the state directory");
    assert!(
        !scratch.path("run").exists(),
        "check created the socket's directory"
    );
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(state.join("catalog.db"), b"not yet a database").expect("write");
    let (code, stdout, stderr) = run("check", &config);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let names: Vec<_> = std::fs::read_dir(&state)
        .expect("list")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert_eq!(
        names,
        vec!["catalog.db"],
        "check left files beside the database"
    );
    let bytes = std::fs::read(state.join("catalog.db")).expect("read");
    assert_eq!(bytes, b"not yet a database");
}

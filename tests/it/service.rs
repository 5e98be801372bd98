//! The daemon as a systemd service: readiness, watchdog, socket activation, reload, stop, secrets.

use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{
    free_port, open_database, stdio_server, wait_for, Daemon, HttpFixture, Scratch, SocketClient,
    MIRROR,
};

/// How long a SIGTERM may take to stop the daemon: sessions get 10 s, the rest is quick.
const STOP_BOUND: Duration = Duration::from_secs(15);

/// Starts `command` (which runs the daemon) with its stderr in the scratch log, without waiting.
fn spawn(scratch: &Scratch, mut command: Command) -> Daemon {
    let log = scratch.path("daemon.log");
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .expect("log file");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .expect("start the daemon");
    Daemon {
        child,
        socket: scratch.path("mirror.sock"),
        database: scratch.path("catalog.db"),
        log,
    }
}

fn serve_command(config: &Path) -> Command {
    let mut command = Command::new(MIRROR);
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "info,mcp_mirror=debug");
    command
}

fn signal(daemon: &Daemon, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(daemon.child.id() as libc::pid_t, signal);
    }
}

/// Whether `path` accepts a connection and answers `ping`.
fn answers_ping(path: &Path) -> bool {
    if UnixStream::connect(path).is_err() {
        return false;
    }
    SocketClient::connect(path)
        .request("ping", json!({}))
        .get("result")
        .is_some()
}

/// Pids of the processes whose parent is `parent`, with their command lines.
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses; the fields after the last ')' do not.
        let Some((_, after_name)) = stat.rsplit_once(')') else {
            continue;
        };
        let parent_pid = after_name.split_whitespace().nth(1);
        if parent_pid == Some(parent.to_string().as_str()) {
            let command_line = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
                .unwrap_or_default();
            children.push((pid, command_line));
        }
    }
    children
}

/// A process is gone when /proc no longer has it, or it is a zombie waiting for its reaper.
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, after_name)| after_name.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

fn read_stats(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn server_names(daemon: &Daemon) -> Vec<String> {
    let status = daemon.call("catalog/status", json!({}));
    status["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|server| server["name"].as_str().expect("name").to_string())
        .collect()
}

/// Receives datagrams until one satisfies `done`, returning it and everything before it.
fn receive_until(
    receiver: &UnixDatagram,
    limit: Duration,
    mut done: impl FnMut(&str) -> bool,
) -> Vec<(Instant, String)> {
    let deadline = Instant::now() + limit;
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no matching notification within {limit:?}; got {received:?}"
        );
        receiver.set_read_timeout(Some(left)).expect("timeout");
        if let Ok(length) = receiver.recv(&mut buffer) {
            let message = String::from_utf8_lossy(&buffer[..length]).to_string();
            let finished = done(&message);
            received.push((Instant::now(), message));
            if finished {
                return received;
            }
        }
    }
}

/// The daemon serving `generate` fixture resources under a service manager's eye: its
/// notifications go to the returned socket, and it should pet a 1 s watchdog about every 500 ms.
fn watched_daemon(scratch: &Scratch, generate: &str) -> (Daemon, UnixDatagram) {
    let config = scratch.config(&stdio_server(
        "docs",
        &["--name", "docs", "--generate", generate],
    ));
    let notify_path = scratch.path("notify.sock");
    let receiver = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    let mut command = serve_command(&config);
    command
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "1000000");
    (spawn(scratch, command), receiver)
}

#[test]
fn ready_after_the_socket_answers_then_status_and_watchdog_rhythm() {
    let scratch = Scratch::new();
    let (mut daemon, receiver) = watched_daemon(&scratch, "1234");

    let before_ready = receive_until(&receiver, Duration::from_secs(20), |message| {
        message.lines().any(|line| line == "READY=1")
    });
    // READY=1 was the first thing the daemon said, and by then the socket answered.
    assert_eq!(before_ready.len(), 1, "{before_ready:?}");
    assert!(
        answers_ping(&daemon.socket),
        "READY=1 arrived before the socket answered"
    );

    let status_seen = receive_until(&receiver, Duration::from_secs(30), |message| {
        message == "STATUS=1 server, 1 in sync, 1,234 resources"
    });
    assert!(status_seen
        .iter()
        .all(|(_, message)| !message.contains("READY=1")));

    let pets: Vec<Instant> = {
        let mut pets = Vec::new();
        receive_until(&receiver, Duration::from_secs(10), |message| {
            if message == "WATCHDOG=1" {
                pets.push(Instant::now());
            }
            pets.len() >= 6
        });
        pets
    };
    let gaps: Vec<Duration> = pets.windows(2).map(|pair| pair[1] - pair[0]).collect();
    let average = gaps.iter().sum::<Duration>() / gaps.len() as u32;
    assert!(
        average >= Duration::from_millis(400) && average <= Duration::from_millis(700),
        "WATCHDOG=1 should come every ~500 ms, came every {average:?} ({gaps:?})"
    );
    assert!(
        gaps.iter().all(|gap| *gap < Duration::from_secs(1)),
        "a gap reached the watchdog timeout: {gaps:?}"
    );

    signal(&daemon, libc::SIGHUP);
    let reload = receive_until(&receiver, Duration::from_secs(10), |message| {
        message.contains("READY=1")
    });
    let reloading = reload
        .iter()
        .find(|(_, message)| message.contains("RELOADING=1"))
        .unwrap_or_else(|| panic!("no RELOADING=1 before READY=1: {reload:?}"));
    assert!(reloading.1.contains("MONOTONIC_USEC="), "{reloading:?}");

    signal(&daemon, libc::SIGTERM);
    receive_until(&receiver, Duration::from_secs(10), |message| {
        message.contains("STOPPING=1")
    });
    daemon.stop();
}

#[test]
fn socket_activation_serves_on_the_passed_socket_and_leaves_its_file() {
    let scratch = Scratch::new();
    let config = scratch.config(&stdio_server(
        "docs",
        &["--name", "docs", "--generate", "7"],
    ));
    let activated = scratch.path("activated.sock");
    let mut command = Command::new("systemd-socket-activate");
    command
        .arg("--listen")
        .arg(&activated)
        .arg("--setenv=RUST_LOG=info,mcp_mirror=debug")
        .args([MIRROR, "serve", "--config"])
        .arg(&config);
    let mut daemon = spawn(&scratch, command);
    wait_for("the activation socket", Duration::from_secs(10), || {
        activated.exists().then_some(())
    });
    // The first connection starts the daemon; it is answered once the daemon took the socket.
    let mut client = SocketClient::connect(&activated);
    let status = client.request("catalog/status", json!({}));
    assert_eq!(
        status["result"]["daemon"]["socket"],
        json!(activated),
        "{status}"
    );
    assert!(
        !daemon.socket.exists(),
        "the daemon bound its own socket as well"
    );
    drop(client);
    wait_for(
        "the catalog through the passed socket",
        Duration::from_secs(30),
        || {
            let status = SocketClient::connect(&activated).request("catalog/status", json!({}));
            (status["result"]["daemon"]["resources"] == 7).then_some(())
        },
    );

    daemon.stop();
    assert!(
        activated.exists(),
        "the daemon removed a socket file it did not create"
    );
    assert!(daemon
        .log_text()
        .contains("serving on the socket systemd passed"));
}

#[test]
fn sighup_applies_exactly_the_diff_and_leaves_unchanged_sessions_alone() {
    let scratch = Scratch::new();
    let stats = scratch.path("keep-stats.json");
    let keep = HttpFixture::start(&[
        // The handshake era, so the test server counts sessions.
        "--era",
        "legacy",
        "--name",
        "keep",
        "--generate",
        "4",
        "--stats",
        stats.to_str().expect("utf-8"),
    ]);
    let keep_table = format!("[servers.keep]\nurl = {:?}\n\n", keep.url);
    let config = scratch.config(&format!(
        "{keep_table}{}{}",
        stdio_server("gone", &["--name", "gone", "--generate", "5"]),
        stdio_server("changes", &["--name", "changes", "--generate", "5"]),
    ));
    let daemon = Daemon::start(&scratch, &config);
    for server in ["keep", "gone", "changes"] {
        daemon.wait_for_walks(server, 1);
    }
    let keep_before = daemon.server_status("keep");
    let stats_before = read_stats(&stats).expect("keep's stats");
    assert_eq!(stats_before["initialize"], 1, "{stats_before}");
    let loaded_before = daemon.call("catalog/status", json!({}))["daemon"]["configLoadedAt"]
        .as_i64()
        .expect("configLoadedAt");
    let gone_child = children_of(daemon.child.id())
        .into_iter()
        .find(|(_, command_line)| command_line.contains("--name gone"))
        .expect("the stdio child of `gone`")
        .0;

    scratch.config(&format!(
        "{keep_table}{}{}",
        stdio_server("changes", &["--name", "changes", "--generate", "8"]),
        stdio_server("added", &["--name", "added", "--generate", "3"]),
    ));
    signal(&daemon, libc::SIGHUP);
    wait_for("the reload to apply", Duration::from_secs(30), || {
        let names = server_names(&daemon);
        (names == ["added", "changes", "keep"]
            && daemon.server_status("changes")["resources"] == 8
            && daemon.server_status("added")["resources"] == 3)
            .then_some(())
    });
    let uris = daemon.uris();
    assert!(uris.iter().all(|uri| !uri.starts_with("fixture://gone/")));
    assert_eq!(uris.len(), 4 + 8 + 3);

    // The unchanged server's session carried on: no new handshake, no new session, no new walk.
    let stats_after = read_stats(&stats).expect("keep's stats");
    assert_eq!(stats_after["initialize"], 1, "{stats_after}");
    assert_eq!(stats_after["sessions"], stats_before["sessions"]);
    let keep_after = daemon.server_status("keep");
    assert_eq!(keep_after["walksOk"], keep_before["walksOk"]);
    assert_eq!(keep_after["connectedAtMs"], keep_before["connectedAtMs"]);
    assert_eq!(keep_after["state"], "synced");

    wait_for(
        "the removed server's child to exit",
        Duration::from_secs(10),
        || process_gone(gone_child).then_some(()),
    );
    let status = daemon.call("catalog/status", json!({}));
    assert!(status["daemon"]["configLoadedAt"].as_i64().expect("loaded") >= loaded_before);
    assert_eq!(status["daemon"]["configError"], Value::Null);
    assert!(daemon.log_text().contains(
        r#"configuration reloaded added=["added"] removed=["gone"] changed=["changes"] unchanged=1"#
    ));
}

#[test]
fn sighup_can_keep_removed_servers_offline() {
    let scratch = Scratch::new();
    let keep_removed = |servers: &str| {
        let text = format!(
            "[daemon]\ndatabase = \"{}\"\nsocket = \"{}\"\nkeep_removed = true\n\n{servers}",
            scratch.path("catalog.db").display(),
            scratch.path("mirror.sock").display(),
        );
        scratch.write("daemon.toml", &text)
    };
    let config = keep_removed(&format!(
        "{}{}",
        stdio_server("stays", &["--name", "stays", "--generate", "2"]),
        stdio_server("leaves", &["--name", "leaves", "--generate", "3"]),
    ));
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("stays", 1);
    daemon.wait_for_walks("leaves", 1);
    keep_removed(&stdio_server(
        "stays",
        &["--name", "stays", "--generate", "2"],
    ));
    signal(&daemon, libc::SIGHUP);
    let leaves = wait_for("leaves to go offline", Duration::from_secs(20), || {
        let status = daemon.server_status("leaves");
        (status["state"] == "offline").then_some(status)
    });
    assert_eq!(leaves["resources"], 3, "{leaves}");
    assert_eq!(daemon.uris().len(), 5, "the kept snapshot is still served");
}

#[test]
fn sighup_with_a_broken_config_keeps_the_old_one_and_reports_why() {
    let scratch = Scratch::new();
    let good = stdio_server("docs", &["--name", "docs", "--generate", "6"]);
    let config = scratch.config(&good);
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);

    scratch.config(&format!("{good}[servers.broken]\nurl = \"not a url\"\n"));
    signal(&daemon, libc::SIGHUP);
    let status = wait_for(
        "the reload error in status",
        Duration::from_secs(20),
        || {
            let status = daemon.call("catalog/status", json!({}));
            status["daemon"]["configError"]
                .is_string()
                .then_some(status)
        },
    );
    let error = status["daemon"]["configError"].as_str().expect("error");
    assert!(
        error.contains("daemon.toml:") && error.contains("servers.broken.url"),
        "{error}"
    );
    assert_eq!(server_names(&daemon), ["docs"]);
    assert_eq!(daemon.uris().len(), 6);
    assert!(daemon
        .log_text()
        .contains("the new configuration is invalid; the previous one stays in force"));

    let output = Command::new(MIRROR)
        .arg("status")
        .arg("--socket")
        .arg(&daemon.socket)
        .output()
        .expect("mcp-mirror status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("config reload rejected"), "{text}");
    assert!(text.contains(" · loaded "), "{text}");

    // A fixed file clears the error on the next reload.
    scratch.config(&good);
    signal(&daemon, libc::SIGHUP);
    wait_for("the error to clear", Duration::from_secs(20), || {
        let status = daemon.call("catalog/status", json!({}));
        status["daemon"]["configError"].is_null().then_some(())
    });
}

#[test]
fn sigterm_during_a_walk_stops_everything_in_order_within_the_bound() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario(
        "slow.json",
        &json!({"generate": 20000, "page_size": 100, "faults": {"page_delay_ms": 40}}),
    );
    let slow_stats = scratch.path("slow-stats.json");
    let http_stats = scratch.path("http-stats.json");
    let http = HttpFixture::start(&[
        // The handshake era, so the test server counts sessions.
        "--era",
        "legacy",
        "--name",
        "remote",
        "--generate",
        "3",
        "--stats",
        http_stats.to_str().expect("utf-8"),
    ]);
    let config = scratch.config(&format!(
        "{}[servers.remote]\nurl = {:?}\n\n",
        stdio_server(
            "slow",
            &[
                "--name",
                "slow",
                "--scenario",
                scenario.to_str().expect("utf-8"),
                "--stats",
                slow_stats.to_str().expect("utf-8"),
            ],
        ),
        http.url,
    ));
    let mut daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("remote", 1);
    wait_for(
        "the slow walk to be under way",
        Duration::from_secs(30),
        || {
            let stats = read_stats(&slow_stats)?;
            (stats["pages"].as_u64()? >= 5).then_some(())
        },
    );
    assert_eq!(read_stats(&http_stats).expect("stats")["sessions"], 1);
    let children = children_of(daemon.child.id());
    assert!(
        children
            .iter()
            .any(|(_, command_line)| command_line.contains("--name slow")),
        "{children:?}"
    );

    let asked = Instant::now();
    signal(&daemon, libc::SIGTERM);
    let status = wait_for("the daemon to exit", STOP_BOUND, || {
        daemon.child.try_wait().expect("try_wait")
    });
    let took = asked.elapsed();
    assert!(
        status.success(),
        "exit status {status}: {}",
        daemon.log_text()
    );
    assert!(took < STOP_BOUND, "stopping took {took:?}");

    for (pid, command_line) in &children {
        assert!(
            process_gone(*pid),
            "child {pid} ({command_line}) outlived the daemon"
        );
    }
    assert!(!daemon.socket.exists(), "the socket file was left behind");
    assert_eq!(
        read_stats(&http_stats).expect("stats")["sessions"],
        0,
        "the HTTP session was not deleted"
    );
    let database = open_database(&daemon.database);
    let integrity: String = database
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity_check");
    assert_eq!(integrity, "ok");
    let slow_rows: i64 = database
        .query_row(
            "SELECT count(*) FROM resources r JOIN servers s ON s.id = r.server_id WHERE s.name = 'slow'",
            [],
            |row| row.get(0),
        )
        .expect("count");
    assert_eq!(slow_rows, 0, "the abandoned walk was half applied");
    let log = daemon.log_text();
    let order = ["shutting down", "stopped"].map(|line| log.find(line).unwrap_or(usize::MAX));
    assert!(order[0] < order[1] && order[1] < usize::MAX, "{log}");
}

#[test]
fn configured_tokens_never_reach_logs_status_or_errors() {
    const TOKEN: &str = "tok-7f3a9c41-DO-NOT-LEAK";
    const ENV_TOKEN: &str = "envtok-0b7e55d2-DO-NOT-LEAK";
    const HEADER_VALUE: &str = "hdr-5e1d9b83-DO-NOT-LEAK";
    let scratch = Scratch::new();
    let credentials = scratch.path("credentials");
    std::fs::create_dir(&credentials).expect("credentials directory");
    std::fs::write(credentials.join("docs-token"), format!("{TOKEN}\n")).expect("token");
    let http = HttpFixture::start(&["--name", "secure", "--generate", "5"]);
    let servers = format!(
        "[servers.secure]\nurl = {:?}\nbearer_token_file = \"%d/docs-token\"\nheaders = {{ \"X-Api-Key\" = {HEADER_VALUE:?} }}\n\n\
         [servers.unreachable]\nurl = \"http://127.0.0.1:9/mcp\"\nbearer_token_env = \"MIRROR_TEST_TOKEN\"\nheaders = {{ \"X-Api-Key\" = {HEADER_VALUE:?} }}\n\n",
        http.url
    );
    let config = scratch.config(&servers);
    let mut command = serve_command(&config);
    // Everything at debug, our own code at trace: the most a log could ever say.
    command
        .env("RUST_LOG", "debug,mcp_mirror=trace")
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .env("MIRROR_TEST_TOKEN", ENV_TOKEN);
    let mut daemon = spawn(&scratch, command);
    wait_for("the daemon's socket", Duration::from_secs(20), || {
        answers_ping(&daemon.socket).then_some(())
    });
    daemon.wait_for_walks("secure", 1);
    wait_for(
        "the unreachable server to fail",
        Duration::from_secs(20),
        || {
            daemon.server_status("unreachable")["lastError"]
                .is_string()
                .then_some(())
        },
    );
    let refreshed = daemon.call("catalog/refresh", json!({"wait": true}));

    // A broken file whose bad value is the header value itself, left unquoted.
    scratch.config(&format!(
        "{servers}[servers.broken]\nurl = \"http://127.0.0.1:9/\"\nheaders = {{ \"X-Api-Key\" = {HEADER_VALUE} }}\n"
    ));
    signal(&daemon, libc::SIGHUP);
    let status = wait_for("the reload error", Duration::from_secs(20), || {
        let status = daemon.call("catalog/status", json!({}));
        status["daemon"]["configError"]
            .is_string()
            .then_some(status)
    });
    let cli_output = |json_flag: bool| {
        let mut command = Command::new(MIRROR);
        command.arg("status").arg("--socket").arg(&daemon.socket);
        if json_flag {
            command.arg("--json");
        }
        let output = command.output().expect("mcp-mirror status");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    let texts = [
        ("status", status.to_string()),
        ("refresh", refreshed.to_string()),
        ("cli status", cli_output(false)),
        ("cli status --json", cli_output(true)),
    ];
    daemon.stop();
    let log = daemon.log_text();
    assert!(
        log.contains("walk committed"),
        "the log is not the verbose one: {log}"
    );
    for (what, text) in texts.iter().chain([&("daemon log", log)]) {
        for secret in [TOKEN, ENV_TOKEN, HEADER_VALUE] {
            assert!(!text.contains(secret), "{what} contains a secret: {text}");
        }
    }
}

#[test]
fn socket_activation_serves_the_http_face_on_the_passed_tcp_socket() {
    let (passed_port, configured_port) = (free_port(), free_port());
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "{}[http]\nlisten = \"127.0.0.1:{configured_port}\"\n",
        stdio_server("docs", &["--name", "docs", "--generate", "5"])
    ));
    let activated = scratch.path("activated.sock");
    let mut command = Command::new("systemd-socket-activate");
    command
        .arg("--listen")
        .arg(&activated)
        .arg(format!("--listen=127.0.0.1:{passed_port}"))
        .arg("--setenv=RUST_LOG=info,mcp_mirror=debug")
        .args([MIRROR, "serve", "--config"])
        .arg(&config);
    let mut daemon = spawn(&scratch, command);
    let address = format!("127.0.0.1:{passed_port}");
    // systemd-socket-activate binds both before the daemon runs; the first request starts it.
    let mut stream = wait_for("the passed TCP socket", Duration::from_secs(10), || {
        std::net::TcpStream::connect(&address).ok()
    });
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"catalog/status","params":{}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    std::io::Write::write_all(&mut stream, request.as_bytes()).expect("send");
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"servers\""), "{answer}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", configured_port)).is_err(),
        "the daemon bound [http] listen as well as serving the passed socket"
    );
    let answered = SocketClient::connect(&activated).request("ping", json!({}));
    assert!(answered.get("result").is_some(), "{answered}");
    daemon.stop();
    assert!(daemon
        .log_text()
        .contains("serving HTTP on the socket systemd passed"));
}

#[test]
fn the_reload_command_returns_after_the_file_is_applied_and_fails_on_a_refused_one() {
    let scratch = Scratch::new();
    let good = stdio_server("docs", &["--name", "docs", "--generate", "3"]);
    let config = scratch.config(&good);
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);
    // What the units' ExecReload= runs (there with --pid $MAINPID).
    let reload = |pid: Option<u32>| {
        let mut command = Command::new(MIRROR);
        command.arg("reload").arg("--socket").arg(&daemon.socket);
        if let Some(pid) = pid {
            command.arg("--pid").arg(pid.to_string());
        }
        command.output().expect("mcp-mirror reload")
    };

    let more = stdio_server("more", &["--name", "more", "--generate", "2"]);
    scratch.config(&format!("{good}{more}"));
    let output = reload(None);
    assert!(output.status.success(), "{output:?}");
    // It returned only once the daemon had applied the file: no wait needed here.
    assert_eq!(server_names(&daemon), ["docs", "more"]);

    scratch.config(&format!("{good}[servers.broken]\nurl = \"not a url\"\n"));
    let output = reload(Some(daemon.child.id()));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("refused the new configuration") && said.contains("servers.broken.url"),
        "{said}"
    );
    assert_eq!(server_names(&daemon), ["docs", "more"]);
}

/// In a storm of reloads (SIGHUPs and socket requests from others, all the time), each
/// `mcp-mirror reload` reports the outcome of a reload that read the file as it wrote it: a
/// refused file names the key it broke, an applied one is applied. Watching the status after a
/// signal heard another reload's outcome.
#[test]
fn in_a_reload_storm_each_reload_command_reports_its_own_file() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let scratch = Scratch::new();
    let good = stdio_server("docs", &["--name", "docs", "--generate", "3"]);
    let config = scratch.config(&good);
    let daemon = Daemon::start(&scratch, &config);
    daemon.wait_for_walks("docs", 1);
    // A long file makes each reload take a while to read, so reloads overlap the commands.
    let good = format!(
        "{good}{}",
        "# a comment that makes the file long\n".repeat(40_000)
    );
    let stop = Arc::new(AtomicBool::new(false));
    let pid = daemon.child.id() as libc::pid_t;
    let signals = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: kill(2) only sends a signal.
                unsafe { libc::kill(pid, libc::SIGHUP) };
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    let requests = {
        let (stop, socket) = (stop.clone(), daemon.socket.clone());
        std::thread::spawn(move || {
            let mut client = SocketClient::connect(&socket);
            let mut answered = 0;
            while !stop.load(Ordering::Relaxed) {
                let answer = client.request("daemon/reload", json!({}));
                assert!(answer["result"]["outcome"].is_string(), "{answer}");
                answered += 1;
            }
            answered
        })
    };
    for round in 0..16 {
        let broken = format!("servers.broken{round}.url");
        let text = match round % 2 {
            0 => good.clone(),
            _ => format!("{good}[servers.broken{round}]\nurl = \"not a url\"\n"),
        };
        scratch.config(&text);
        let output = Command::new(MIRROR)
            .arg("reload")
            .arg("--socket")
            .arg(&daemon.socket)
            .arg("--json")
            .output()
            .expect("mcp-mirror reload");
        let said = String::from_utf8_lossy(&output.stdout);
        if round % 2 == 0 {
            assert!(output.status.success(), "round {round}: {output:?}");
            assert!(said.contains("\"reloaded\""), "round {round}: {said}");
        } else {
            assert_eq!(output.status.code(), Some(1), "round {round}: {output:?}");
            assert!(said.contains(&broken), "round {round}: {said}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    signals.join().expect("signals");
    assert!(requests.join().expect("requests") > 0);
    // Asked on the socket, as `socat` would (the HTTP face never answers it:
    // `tests/it/scope.rs` asks every method there).
    scratch.config(&good);
    let answer = SocketClient::connect(&daemon.socket).request("daemon/reload", json!({}));
    assert_eq!(answer["result"]["outcome"], "applied", "{answer}");
}

#[test]
fn a_deleted_socket_file_stops_the_watchdog_so_systemd_restarts_the_daemon() {
    let scratch = Scratch::new();
    let (daemon, receiver) = watched_daemon(&scratch, "3");
    receive_until(&receiver, Duration::from_secs(20), |message| {
        message == "WATCHDOG=1"
    });

    std::fs::remove_file(&daemon.socket).expect("remove the socket file");
    wait_for(
        "the health check to notice",
        Duration::from_secs(20),
        || daemon.log_text().contains("is gone").then_some(()),
    );
    // Pets sent before the failing check may still be queued; after them, none may come.
    receiver.set_nonblocking(true).expect("nonblocking");
    let mut buffer = vec![0u8; 4096];
    while receiver.recv(&mut buffer).is_ok() {}
    receiver.set_nonblocking(false).expect("blocking");
    receiver
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let quiet_until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < quiet_until {
        if let Ok(length) = receiver.recv(&mut buffer) {
            let message = String::from_utf8_lossy(&buffer[..length]).to_string();
            assert_ne!(
                message, "WATCHDOG=1",
                "petted the watchdog without a socket file"
            );
        }
    }
}

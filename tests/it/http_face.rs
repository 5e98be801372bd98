//! The HTTP face: a second daemon mirrors the first's `/mcp` in both eras, changes arrive by
//! push, tokens and origins guard it, `private` entries stay home unless shared, and the
//! official Python SDK client lists and reads over it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{
    free_port, run_cli, stdio_server, wait_for, Daemon, HttpFixture, Scratch, SocketClient,
    StopOnDrop, FIXTURE, MIRROR,
};

pub(crate) const TOKEN: &str = "tok-fleet-7f3a9c";

/// An HTTP address in use fails the start before anything is served: the daemon exits with
/// the address in its error and never opened its socket, so no client (nor a test's start)
/// meets a daemon that is about to exit, and no session reached its upstream.
#[test]
fn an_http_address_in_use_fails_the_start_before_the_socket_opens() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let address = holder.local_addr().expect("its address");
    let scratch = Scratch::new();
    let config = scratch.config(&format!(
        "{}[http]\nlisten = \"{address}\"\n",
        stdio_server("demo", &["--name", "demo"])
    ));
    let mut daemon = Command::new(MIRROR)
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the daemon");
    let status = wait_for("the daemon to exit", Duration::from_secs(20), || {
        daemon.try_wait().expect("wait")
    });
    let mut stderr = String::new();
    daemon
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {address} for the HTTP face")),
        "{stderr}"
    );
    assert!(!scratch.path("mirror.sock").exists(), "{stderr}");
    assert!(!stderr.contains("connected"), "a session started: {stderr}");
}

/// An upstream daemon: the given servers, and the HTTP face with one token named `fleet`.
pub(crate) struct Upstream {
    pub(crate) daemon: Daemon,
    pub(crate) address: String,
    pub(crate) scratch: Scratch,
}

impl Upstream {
    pub(crate) fn start(servers: &str, http_extra: &str) -> Upstream {
        Upstream::start_tuned(servers, http_extra, "")
    }

    /// `start`, with more `[daemon]` settings (`daemon_extra`: lines of TOML).
    pub(crate) fn start_tuned(servers: &str, http_extra: &str, daemon_extra: &str) -> Upstream {
        let scratch = Scratch::new();
        let token = scratch.write_private("fleet.token", &format!("{TOKEN}\n"));
        let address = format!("127.0.0.1:{}", free_port());
        let config = scratch.config(&format!(
            "{servers}[http]\nlisten = \"{address}\"\ntokens = {{ fleet = {:?} }}\n{http_extra}\n",
            token.display().to_string()
        ));
        fast_daemon_settings(&config);
        more_daemon_settings(&config, daemon_extra);
        let daemon = Daemon::start(&scratch, &config);
        let upstream = Upstream {
            daemon,
            address,
            scratch,
        };
        wait_for("the HTTP face", Duration::from_secs(20), || {
            TcpStream::connect(&upstream.address).ok().map(|_| ())
        });
        upstream
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    pub(crate) fn post(&self, headers: &[(&str, &str)], body: &Value) -> Answer {
        http_exchange(&self.address, "POST", headers, &body.to_string())
    }
}

/// Short debounce and poll floor, so pushes travel fast.
pub(crate) fn fast_daemon_settings(config: &Path) {
    let text = std::fs::read_to_string(config).expect("config");
    let text = text.replacen(
        "[daemon]\n",
        "[daemon]\ndebounce = \"50ms\"\npoll_floor = \"200ms\"\n",
        1,
    );
    std::fs::write(config, text).expect("write config");
}

/// More `[daemon]` settings (lines of TOML) at the top of that table, each in place of the
/// setting of that key the config had.
pub(crate) fn more_daemon_settings(config: &Path, lines: &str) {
    let text = std::fs::read_to_string(config).expect("config");
    let keys: Vec<String> = lines
        .lines()
        .filter_map(|line| Some(format!("{} =", line.split_once('=')?.0.trim())))
        .collect();
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| !keys.iter().any(|key| line.starts_with(key.as_str())))
        .collect();
    let text = format!("{}\n", kept.join("\n"));
    let text = text.replacen("[daemon]\n", &format!("[daemon]\n{lines}"), 1);
    std::fs::write(config, text).expect("write config");
}

/// A downstream daemon mirroring `upstream` (named `upstream` in its config) in `era`.
pub(crate) fn downstream(scratch: &Scratch, upstream: &Upstream, era: &str) -> Daemon {
    downstream_tuned(scratch, upstream, era, "")
}

/// `downstream`, with more `[daemon]` settings (`daemon_extra`: lines of TOML).
pub(crate) fn downstream_tuned(
    scratch: &Scratch,
    upstream: &Upstream,
    era: &str,
    daemon_extra: &str,
) -> Daemon {
    let token = scratch.write("upstream.token", TOKEN);
    let config = scratch.config(&format!(
        "[servers.upstream]\nurl = \"{}\"\nbearer_token_file = {:?}\nera = \"{era}\"\n",
        upstream.url(),
        token.display().to_string()
    ));
    fast_daemon_settings(&config);
    more_daemon_settings(&config, daemon_extra);
    Daemon::start(scratch, &config)
}

/// One HTTP answer, read to the end (the request says `Connection: close`).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }

    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    }
}

pub(crate) fn http_exchange(
    address: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    http_exchange_at(address, method, "/mcp", headers, body)
}

pub(crate) fn http_exchange_at(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(address).expect("connect to the HTTP face");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let _ = stream.write_all(request.as_bytes());
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "1"},
    })
}

pub(crate) fn modern_request(method: &str, mut params: Value) -> Value {
    params["_meta"] = modern_meta();
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// Every resource of a daemon's merged catalog, without the `via` note and the chain of
/// mirrors (what a downstream adds), sorted by URI.
pub(crate) fn catalog_without_via(daemon: &Daemon) -> Vec<Value> {
    let mut all = daemon.list_all();
    for resource in &mut all {
        if let Some(meta) = resource["_meta"].as_object_mut() {
            meta.remove("io.mcp-mirror/via");
            meta.remove("io.mcp-mirror/mirrors");
        }
    }
    all.sort_by(|a, b| a["uri"].as_str().cmp(&b["uri"].as_str()));
    all
}

pub(crate) fn count_from(daemon: &Daemon, origin: &str) -> usize {
    daemon
        .list_all()
        .iter()
        .filter(|resource| resource["_meta"]["io.mcp-mirror/server"] == origin)
        .count()
}

#[test]
fn a_downstream_mirror_holds_the_upstream_catalog_and_gets_changes_by_push() {
    let origin = Scratch::new();
    let scenario = origin.write_scenario("demo.json", &json!({"generate": 30, "page_size": 10}));
    let scenario_text = scenario.display().to_string();
    let servers = format!(
        "{}{}",
        stdio_server("demo", &["--name", "demo", "--scenario", &scenario_text]),
        stdio_server(
            "docs",
            &["--name", "docs", "--generate", "520", "--page-size", "100"]
        ),
    );
    let upstream = Upstream::start(&servers, "");
    upstream.daemon.wait_for_walks("demo", 1);
    upstream.daemon.wait_for_walks("docs", 1);
    let expected = catalog_without_via(&upstream.daemon);
    assert_eq!(expected.len(), 550);

    for (era, push) in [("modern", "subscriptions/listen"), ("legacy", "GET stream")] {
        let scratch = Scratch::new();
        let mirror = downstream(&scratch, &upstream, era);
        mirror.wait_for_walks("upstream", 1);
        let held = catalog_without_via(&mirror);
        assert_eq!(held.len(), expected.len(), "{era}");
        assert_eq!(
            held, expected,
            "{era}: the downstream holds the upstream's merged catalog"
        );
        let listed = mirror.list_all();
        assert!(
            listed
                .iter()
                .all(|resource| resource["_meta"]["io.mcp-mirror/via"] == "upstream"),
            "{era}: every entry names the mirror it came through"
        );
        let status = wait_for(
            &format!("{era}: the push channel {push}"),
            Duration::from_secs(20),
            || {
                let status = mirror.server_status("upstream");
                (status["live"]["push"] == push).then_some(status)
            },
        );
        assert_eq!(status["live"]["era"], era, "{status}");

        let shown = run_cli(&mirror.socket, &["show", "fixture://demo/docs/000003.md"]);
        let shown = String::from_utf8_lossy(&shown.stdout).to_string();
        assert!(shown.contains("demo via upstream"), "{shown}");
        let read = mirror.call(
            "resources/read",
            json!({"uri": "fixture://docs/docs/000007.md"}),
        );
        assert_eq!(
            read["contents"][0]["text"],
            "contents of fixture://docs/docs/000007.md"
        );
    }

    // A change at the origin reaches a downstream mirror through the upstream's push: the
    // backstop walk is 15 minutes away and the upstream can push, so nothing polls.
    let scratch = Scratch::new();
    let mirror = downstream(&scratch, &upstream, "modern");
    mirror.wait_for_walks("upstream", 1);
    wait_for("the listen stream", Duration::from_secs(20), || {
        (mirror.server_status("upstream")["live"]["push"] == "subscriptions/listen").then_some(())
    });
    origin.write_scenario("demo.json", &json!({"generate": 37, "page_size": 10}));
    wait_for(
        "the origin's change at the downstream mirror",
        Duration::from_secs(15),
        || (count_from(&mirror, "demo") == 37).then_some(()),
    );
    let status = mirror.server_status("upstream");
    assert!(
        status["live"]["notifications"].as_u64().unwrap_or(0) >= 1,
        "the change came by push: {status}"
    );
    assert_eq!(
        catalog_without_via(&mirror),
        catalog_without_via(&upstream.daemon)
    );
}

#[test]
fn tokens_origins_and_headers_guard_the_face() {
    let servers = stdio_server("demo", &["--name", "demo", "--generate", "3"]);
    let upstream = Upstream::start(&servers, "allowed_origins = [\"http://app.example\"]\n");
    upstream.daemon.wait_for_walks("demo", 1);
    let list = modern_request("resources/list", json!({}));
    let bearer = format!("Bearer {TOKEN}");

    let missing = upstream.post(&[], &list);
    assert_eq!(missing.status, 401, "{}", missing.body);
    let challenge = missing
        .header("www-authenticate")
        .expect("WWW-Authenticate");
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    let wrong = upstream.post(&[("Authorization", "Bearer tok-fleet-7f3a9d")], &list);
    assert_eq!(wrong.status, 401);
    assert!(wrong
        .header("www-authenticate")
        .is_some_and(|challenge| challenge.contains("invalid_token")));

    let good = upstream.post(&[("Authorization", &bearer)], &list);
    assert_eq!(good.status, 200, "{}", good.body);
    let result = &good.json()["result"];
    assert_eq!(result["resources"].as_array().map(Vec::len), Some(3));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");

    let foreign = upstream.post(
        &[
            ("Authorization", &bearer),
            ("Origin", "http://evil.example"),
        ],
        &list,
    );
    assert_eq!(foreign.status, 403);
    let allowed = upstream.post(
        &[("Authorization", &bearer), ("Origin", "http://app.example")],
        &list,
    );
    assert_eq!(allowed.status, 200);

    // The 2026-07-28 headers must agree with the body.
    let mismatch = upstream.post(
        &[("Authorization", &bearer), ("Mcp-Method", "resources/read")],
        &list,
    );
    assert_eq!(mismatch.status, 400);
    assert_eq!(mismatch.json()["error"]["code"], -32020);
    let read = modern_request(
        "resources/read",
        json!({"uri": "fixture://demo/docs/000001.md"}),
    );
    let wrong_name = upstream.post(
        &[
            ("Authorization", &bearer),
            ("Mcp-Name", "fixture://demo/docs/000002.md"),
        ],
        &read,
    );
    assert_eq!(wrong_name.json()["error"]["code"], -32020);
    let mut future = list.clone();
    future["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let unsupported = upstream.post(&[("Authorization", &bearer)], &future);
    assert_eq!(unsupported.status, 400);
    let error = &unsupported.json()["error"];
    assert_eq!(error["code"], -32022);
    assert_eq!(error["data"]["requested"], "2099-01-01");
    assert!(error["data"]["supported"]
        .as_array()
        .is_some_and(|supported| supported.contains(&json!("2026-07-28"))));
    let discover = upstream.post(
        &[("Authorization", &bearer)],
        &modern_request("server/discover", json!({})),
    );
    let discovered = &discover.json()["result"];
    assert_eq!(discovered["supportedVersions"][0], "2026-07-28");
    assert_eq!(discovered["capabilities"]["resources"]["listChanged"], true);
    assert_eq!(
        discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-mirror"
    );

    // A handshake-era session that the face does not know is answered 404.
    let gone = upstream.post(
        &[("Authorization", &bearer), ("Mcp-Session-Id", "0123")],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"}),
    );
    assert_eq!(gone.status, 404);
    // Bodies are bounded.
    let huge = json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"pad": "x".repeat(2 << 20)}});
    assert_eq!(
        upstream.post(&[("Authorization", &bearer)], &huge).status,
        413
    );

    let log = upstream.daemon.log_text();
    assert!(
        log.contains("token=\"fleet\""),
        "requests are logged by token name"
    );
    assert!(!log.contains(TOKEN), "the token's value is never logged");
}

#[test]
fn a_public_address_without_tokens_refuses_to_start() {
    let scratch = Scratch::new();
    let config = scratch.config("[http]\nlisten = \"0.0.0.0:0\"\n");
    let output = Command::new(MIRROR)
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("run mcp-mirror");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("http.listen") && said.contains("tokens"),
        "{said}"
    );
}

#[test]
fn private_entries_reach_token_clients_only_when_shared() {
    let secret = HttpFixture::start(&[
        "--era",
        "modern",
        "--cache-scope",
        "private",
        "--name",
        "secret",
        "--generate",
        "4",
    ]);
    let shared = HttpFixture::start(&[
        "--era",
        "modern",
        "--cache-scope",
        "private",
        "--name",
        "shared",
        "--generate",
        "5",
    ]);
    let servers = format!(
        "[servers.secret]\nurl = \"{}\"\n\n[servers.shared]\nurl = \"{}\"\nshare = true\n\n{}",
        secret.url,
        shared.url,
        stdio_server("open", &["--name", "open", "--generate", "6"]),
    );
    let upstream = Upstream::start(&servers, "");
    for server in ["secret", "shared", "open"] {
        upstream.daemon.wait_for_walks(server, 1);
    }
    wait_for("the private scopes", Duration::from_secs(20), || {
        let private = ["secret", "shared"]
            .iter()
            .all(|server| upstream.daemon.server_status(server)["live"]["cacheScope"] == "private");
        private.then_some(())
    });
    // The socket is the mirror's own context: it holds everything.
    assert_eq!(upstream.daemon.list_all().len(), 15);

    let bearer = format!("Bearer {TOKEN}");
    let answer = upstream.post(
        &[("Authorization", &bearer)],
        &modern_request("resources/list", json!({})),
    );
    let result = &answer.json()["result"];
    let origins: Vec<&str> = result["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|resource| resource["_meta"]["io.mcp-mirror/server"].as_str())
        .collect();
    assert_eq!(origins.len(), 11, "{result}");
    assert!(!origins.contains(&"secret"));
    assert!(origins.contains(&"shared") && origins.contains(&"open"));
    assert_eq!(
        result["cacheScope"], "private",
        "shared private entries say so"
    );

    let read_secret = upstream.post(
        &[("Authorization", &bearer)],
        &modern_request(
            "resources/read",
            json!({"uri": "fixture://secret/docs/000001.md"}),
        ),
    );
    assert!(
        read_secret.json()["error"].is_object(),
        "{}",
        read_secret.body
    );
    let read_shared = upstream.post(
        &[("Authorization", &bearer)],
        &modern_request(
            "resources/read",
            json!({"uri": "fixture://shared/docs/000001.md"}),
        ),
    );
    assert_eq!(
        read_shared.json()["result"]["contents"][0]["text"],
        "contents of fixture://shared/docs/000001.md"
    );
    let search = upstream.post(
        &[("Authorization", &bearer)],
        &json!({"jsonrpc": "2.0", "id": 9, "method": "catalog/search", "params": {"query": "document"}}),
    );
    let hits = search.json()["result"]["results"].clone();
    assert!(
        hits.as_array().is_some_and(
            |hits| !hits.is_empty() && hits.iter().all(|hit| hit["server"] != "secret")
        ),
        "{hits}"
    );
}

#[test]
fn the_python_sdk_client_lists_and_reads_over_the_http_face() {
    let python = crate::install::python_sdk();
    let servers = stdio_server("docs", &["--name", "docs", "--generate", "620"]);
    let upstream = Upstream::start(&servers, "");
    upstream.daemon.wait_for_walks("docs", 1);
    let script = crate::install::repository().join("tests/interop/http_client.py");
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let output = Command::new(&python)
            .arg(&script)
            .arg(upstream.url())
            .arg(TOKEN)
            .arg(mode)
            .arg("fixture://docs/docs/000007.md")
            .output()
            .expect("run the Python client");
        assert!(
            output.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let seen: Value = serde_json::from_slice(&output.stdout).expect("the client's JSON");
        assert_eq!(seen["protocolVersion"], version, "{mode}");
        assert_eq!(seen["pages"], 2, "{mode}: 500 per page");
        let resources = seen["resources"].as_array().expect("resources");
        assert_eq!(resources.len(), 620, "{mode}");
        assert!(resources
            .iter()
            .all(|resource| resource["_meta"]["io.mcp-mirror/server"] == "docs"));
        assert_eq!(
            seen["reads"]["fixture://docs/docs/000007.md"][0]["text"],
            "contents of fixture://docs/docs/000007.md",
            "{mode}"
        );
    }
}

/// Samples by name and sorted labels.
type Samples = std::collections::BTreeMap<(String, Vec<(String, String)>), f64>;

/// A strict reader of the OpenMetrics text format as `/metrics` serves it: every family
/// declared by HELP and TYPE before its samples, every sample of a declared family, names and
/// labels well formed, values numbers, `# EOF` last. Samples keyed by name and sorted labels.
fn parse_metrics(text: &str) -> Samples {
    let mut families: std::collections::BTreeMap<String, String> = Default::default();
    let mut samples = std::collections::BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.last(),
        Some(&"# EOF"),
        "the exposition ends with # EOF"
    );
    let name_ok = |name: &str| {
        name.starts_with("mcp_mirror_")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let (kind, name, rest) = (parts.next(), parts.next(), parts.next());
            let name = name.unwrap_or_else(|| panic!("bad comment line {line:?}"));
            assert!(name_ok(name), "metric name {name:?}");
            match kind {
                Some("HELP") => assert!(rest.is_some_and(|help| !help.is_empty()), "{line}"),
                Some("TYPE") => {
                    let kind = rest.expect("a type");
                    assert!(
                        ["counter", "gauge", "histogram"].contains(&kind),
                        "type {kind:?}"
                    );
                    families.insert(name.to_string(), kind.to_string());
                }
                Some("UNIT") => assert!(name.ends_with(&format!("_{}", rest.expect("unit")))),
                _ => panic!("unknown comment line {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value in {line:?}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("{line:?}"));
                let mut pairs: Vec<(String, String)> = labels
                    .split(',')
                    .map(|pair| {
                        let (key, quoted) =
                            pair.split_once('=').unwrap_or_else(|| panic!("{line:?}"));
                        let value = quoted
                            .strip_prefix('"')
                            .and_then(|rest| rest.strip_suffix('"'))
                            .unwrap_or_else(|| panic!("label value in {line:?}"));
                        (key.to_string(), value.to_string())
                    })
                    .collect();
                pairs.sort();
                (name, pairs)
            }
            None => (series, Vec::new()),
        };
        assert!(name_ok(name), "sample name {name:?}");
        let family = families
            .iter()
            .filter(|(family, kind)| {
                let suffixes: &[&str] = match kind.as_str() {
                    "counter" => &["_total"],
                    "histogram" => &["_sum", "_count", "_bucket"],
                    _ => &[""],
                };
                suffixes
                    .iter()
                    .any(|suffix| name == format!("{family}{suffix}"))
            })
            .count();
        assert_eq!(family, 1, "{name} belongs to one declared family");
        samples.insert((name.to_string(), labels), value);
    }
    samples
}

/// The same exposition read by the official Prometheus Python client's OpenMetrics parser
/// (tests/interop/parse_metrics.py), as samples keyed like [`parse_metrics`]'s.
fn parse_metrics_in_python(text: &str) -> Samples {
    let python = crate::install::python_prometheus_client();
    let script = crate::install::repository().join("tests/interop/parse_metrics.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the Python parser");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("send the exposition");
    let output = child.wait_with_output().expect("the Python parser");
    assert!(
        output.status.success(),
        "the Prometheus client rejects /metrics: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Value = serde_json::from_slice(&output.stdout).expect("the parser's JSON");
    let mut samples = Samples::new();
    for family in parsed["families"].as_array().expect("families") {
        let kind = family["type"].as_str().expect("type");
        assert!(
            ["counter", "gauge", "histogram"].contains(&kind),
            "{family}"
        );
        for sample in family["samples"].as_array().expect("samples") {
            let mut labels: Vec<(String, String)> = sample["labels"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(key, value)| (key.clone(), value.as_str().expect("label").to_string()))
                .collect();
            labels.sort();
            let name = sample["name"].as_str().expect("name").to_string();
            let value = sample["value"].as_f64().expect("a finite value");
            samples.insert((name, labels), value);
        }
    }
    samples
}

#[test]
fn metrics_parse_and_match_the_status() {
    let servers = format!(
        "{}{}",
        stdio_server("demo", &["--name", "demo", "--generate", "12"]),
        stdio_server("docs", &["--name", "docs", "--generate", "30"]),
    );
    let metrics_address = format!("127.0.0.1:{}", free_port());
    let upstream = Upstream::start(
        &servers,
        &format!("metrics_listen = \"{metrics_address}\"\n"),
    );
    upstream.daemon.wait_for_walks("demo", 1);
    upstream.daemon.wait_for_walks("docs", 1);
    let bearer = format!("Bearer {TOKEN}");
    let scrape = |address: &str| {
        let answer = http_exchange_at(
            address,
            "GET",
            "/metrics",
            &[("Authorization", &bearer)],
            "",
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        let samples = parse_metrics(&answer.body);
        // The official parser accepts it and reads the same samples with the same values.
        let official = parse_metrics_in_python(&answer.body);
        // Equal up to the last bit serde_json may round differently when reading the JSON.
        let same = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(1.0);
        let differing: Vec<_> = official
            .iter()
            .filter(|(key, value)| !samples.get(*key).is_some_and(|ours| same(*ours, **value)))
            .chain(
                samples
                    .iter()
                    .filter(|(key, _)| !official.contains_key(*key)),
            )
            .collect();
        assert!(
            differing.is_empty(),
            "the parsers disagree on {differing:?}"
        );
        samples
    };
    // Once the search index has applied both walks, nothing moves until the searches below.
    let status = wait_for(
        "the search index to catch up",
        Duration::from_secs(20),
        || {
            let status = upstream.daemon.call("catalog/status", json!({}));
            let index = &status["daemon"]["searchIndex"];
            (index["state"] == "ready" && index["generation"] == status["daemon"]["changeSeq"])
                .then_some(status)
        },
    );
    let metrics = scrape(&upstream.address);
    let value = |name: &str, labels: &[(&str, &str)]| {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        labels.sort();
        *metrics
            .get(&(name.to_string(), labels.clone()))
            .unwrap_or_else(|| panic!("no {name} {labels:?}"))
    };
    for server in status["servers"].as_array().expect("servers") {
        let name = server["name"].as_str().expect("name");
        let resources = server["resources"].as_f64().expect("resources");
        assert_eq!(
            value(
                "mcp_mirror_server_entries",
                &[("server", name), ("kind", "resource")]
            ),
            resources
        );
        assert_eq!(
            value(
                "mcp_mirror_walks_total",
                &[("server", name), ("outcome", "ok")]
            ),
            server["walksOk"].as_f64().expect("walksOk")
        );
        let state = server["state"].as_str().expect("state");
        assert_eq!(
            value(
                "mcp_mirror_server_state",
                &[("server", name), ("state", state)]
            ),
            1.0
        );
        assert_eq!(
            value("mcp_mirror_notifications_total", &[("server", name)]),
            server["live"]["notifications"]
                .as_f64()
                .expect("notifications")
        );
        assert!(
            value(
                "mcp_mirror_walk_duration_seconds_count",
                &[("server", name)]
            ) >= 1.0
        );
    }
    assert_eq!(
        value("mcp_mirror_change_feed_seq", &[]),
        status["daemon"]["changeSeq"].as_f64().expect("changeSeq")
    );
    assert_eq!(value("mcp_mirror_resources", &[]), 42.0);
    // The search index: the same state, generation and size as status, and its lag the feed's
    // sequence numbers it has not applied.
    let index = &status["daemon"]["searchIndex"];
    let generation = index["generation"].as_f64().expect("the index generation");
    assert_eq!(value("mcp_mirror_search_index_generation", &[]), generation);
    assert_eq!(
        value("mcp_mirror_search_index_lag_generations", &[]),
        status["daemon"]["changeSeq"].as_f64().expect("changeSeq") - generation
    );
    assert_eq!(
        value("mcp_mirror_search_index_documents", &[]),
        index["documents"].as_f64().expect("documents")
    );
    assert_eq!(
        value("mcp_mirror_search_index_pinned", &[]),
        f64::from(u8::from(index.get("pinnedGeneration").is_some())),
        "pinned while status shows pinnedGeneration"
    );
    for state in ["opening", "ready", "catching-up", "rebuilding", "failed"] {
        assert_eq!(
            value("mcp_mirror_search_index_state", &[("state", state)]),
            f64::from(u8::from(index["state"] == state)),
            "{state}"
        );
    }
    assert!(value("mcp_mirror_swap_hold_seconds_count", &[]) >= 2.0);
    assert!(value("mcp_mirror_clients", &[("face", "http")]) >= 1.0);

    // Each search is observed in the latency histogram.
    let searches = |metrics: &Samples| {
        metrics
            .get(&(
                "mcp_mirror_search_duration_seconds_count".to_string(),
                Vec::new(),
            ))
            .copied()
            .expect("the search latency histogram")
    };
    let before = searches(&metrics);
    upstream
        .daemon
        .call("catalog/search", json!({"query": "docs"}));
    upstream
        .daemon
        .call("catalog/search", json!({"query": "demo", "limit": 3}));
    // The MCP face's search tool comes through the same door (it skipped the histogram).
    let tool = upstream.daemon.call(
        "tools/call",
        json!({"name": "search_catalog", "arguments": {"query": "docs"}}),
    );
    assert!(tool.get("content").is_some(), "{tool:.300}");
    let after = searches(&scrape(&upstream.address));
    assert_eq!(after, before + 3.0, "three searches, three observations");

    // metrics_listen serves the same metrics, and nothing else.
    let alone = scrape(&metrics_address);
    assert!(alone.contains_key(&("mcp_mirror_change_feed_seq".to_string(), Vec::new())));
    let no_mcp = http_exchange_at(
        &metrics_address,
        "POST",
        "/mcp",
        &[("Authorization", &bearer)],
        "{}",
    );
    assert_eq!(no_mcp.status, 404);
    let no_token = http_exchange_at(&metrics_address, "GET", "/metrics", &[], "");
    assert_eq!(no_token.status, 401);
}

/// Runs the real CLI against a remote mirror: `--url`, then `args`; the socket it would
/// otherwise use does not exist, so nothing can come from a local daemon or database.
fn remote_cli(url: &str, token_file: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(MIRROR);
    command
        .args(args)
        .arg("--url")
        .arg(url)
        .env_remove("MCP_MIRROR_URL")
        .env_remove("MCP_MIRROR_TOKEN_FILE")
        .env_remove("MCP_MIRROR_DATABASE")
        .env("MCP_MIRROR_SOCKET", "/nonexistent/mcp-mirror.sock");
    if let Some(token_file) = token_file {
        command.arg("--token-file").arg(token_file);
    }
    command.output().expect("run mcp-mirror")
}

fn stdout_of(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

#[test]
fn the_cli_speaks_to_a_remote_mirror_with_a_token() {
    let scratch = Scratch::new();
    let scenario = scratch.write_scenario("demo.json", &json!({"generate": 12}));
    let scenario_text = scenario.display().to_string();
    let servers = format!(
        "{}{}",
        stdio_server("demo", &["--name", "demo", "--scenario", &scenario_text]),
        stdio_server("docs", &["--name", "docs", "--generate", "30"]),
    );
    let upstream = Upstream::start(&servers, "");
    upstream.daemon.wait_for_walks("demo", 1);
    upstream.daemon.wait_for_walks("docs", 1);
    let token = scratch.write("cli.token", &format!("  {TOKEN}\n"));
    let url = upstream.url();
    let socket = upstream.daemon.socket.clone();

    // The same answers as on the daemon's own socket, byte for byte.
    let first_uri = upstream.daemon.call("resources/list", json!({}))["resources"][0]["uri"]
        .as_str()
        .expect("a uri")
        .to_string();
    let commands: [&[&str]; 4] = [
        &["ls", "--json"],
        &["search", "docs", "--json"],
        &["show", &first_uri, "--json"],
        &["ls", "--server", "demo"],
    ];
    for args in commands {
        let remote = stdout_of(&remote_cli(&url, Some(&token), args));
        let local = stdout_of(&run_cli(&socket, args));
        assert_eq!(remote, local, "{args:?} over --url and over the socket");
    }
    let listed: Value = serde_json::from_str(&stdout_of(&remote_cli(
        &url,
        Some(&token),
        &["ls", "--json"],
    )))
    .expect("ls --json");
    assert_eq!(listed.as_array().map(Vec::len), Some(42), "{listed}");

    let status: Value = serde_json::from_str(&stdout_of(&remote_cli(
        &url,
        Some(&token),
        &["status", "--json"],
    )))
    .expect("status --json");
    let names: Vec<&str> = status["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .filter_map(|server| server["name"].as_str())
        .collect();
    assert_eq!(names, ["demo", "docs"]);
    let human = stdout_of(&remote_cli(&url, Some(&token), &["status"]));
    assert!(human.contains("demo") && human.contains("docs"), "{human}");

    // The token file may also come from the environment.
    let output = Command::new(MIRROR)
        .args(["ls", "--json"])
        .env("MCP_MIRROR_URL", &url)
        .env("MCP_MIRROR_TOKEN_FILE", &token)
        .env("MCP_MIRROR_SOCKET", "/nonexistent/mcp-mirror.sock")
        .env_remove("MCP_MIRROR_DATABASE")
        .output()
        .expect("run mcp-mirror");
    assert_eq!(
        stdout_of(&output),
        stdout_of(&run_cli(&socket, &["ls", "--json"]))
    );

    // A URI nobody lists is "not found" over HTTP too.
    let missing = remote_cli(&url, Some(&token), &["show", "fixture://nobody/lists/this"]);
    assert_eq!(missing.status.code(), Some(4));

    // A token changes nothing of the owner's unless it may (`mutate = true`), and says so.
    let refused = remote_cli(&url, Some(&token), &["refresh", "docs", "--wait"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("mutate = true"), "{said}");

    // `watch` over HTTP follows the change feed from where it is told to start.
    let since = upstream.daemon.call("catalog/status", json!({}))["daemon"]["changeSeq"]
        .as_i64()
        .expect("changeSeq")
        .to_string();
    let mut watcher = Command::new(MIRROR)
        .args([
            "watch",
            "--json",
            "--since",
            &since,
            "--url",
            &url,
            "--token-file",
        ])
        .arg(&token)
        .env("MCP_MIRROR_SOCKET", "/nonexistent/mcp-mirror.sock")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run mcp-mirror watch");
    let stdout = watcher.stdout.take().expect("stdout");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    scratch.write_scenario("demo.json", &json!({"generate": 14}));
    let mut added = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while added.len() < 2 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = received
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("watch printed only {added:?}"));
        let change: Value = serde_json::from_str(&line).expect("a change as JSON");
        if change["server"] == "demo" && change["kind"] == "added" {
            added.push(change["uri"].as_str().unwrap_or_default().to_string());
        }
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert_eq!(added.len(), 2, "{added:?}");
}

#[test]
fn the_remote_cli_says_when_the_token_is_wrong_or_missing_or_the_mirror_is_away() {
    let upstream = Upstream::start(
        &stdio_server("demo", &["--name", "demo", "--generate", "3"]),
        "",
    );
    upstream.daemon.wait_for_walks("demo", 1);
    let scratch = Scratch::new();
    let wrong = scratch.write("wrong.token", "not-the-token\n");
    let url = upstream.url();

    let output = remote_cli(&url, Some(&wrong), &["ls"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert!(
        !stderr.contains("not-the-token"),
        "the token is never echoed: {stderr}"
    );
    assert!(output.stdout.is_empty());

    let output = remote_cli(&url, None, &["status"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("--token-file"), "{stderr}");

    // Nobody listens there: exit 3, and no offline fallback to any database.
    let away = format!("http://127.0.0.1:{}/mcp", free_port());
    let output = remote_cli(&away, Some(&wrong), &["ls"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("cannot reach the mirror at"), "{stderr}");
    assert!(!stderr.contains("reading the database"), "{stderr}");

    // A token never goes on the command line, and a URL must be one.
    let output = remote_cli("ftp://example/mcp", None, &["ls"]);
    assert_eq!(output.status.code(), Some(2));
    let empty = scratch.write("empty.token", "\n");
    let output = remote_cli(&url, Some(&empty), &["ls"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is empty"));
}

/// `BUSY` of the socket protocol, which the HTTP face answers with too.
const BUSY: i64 = -32003;
const SEARCH_TIMED_OUT: i64 = -32004;
/// A raw FTS5 query that runs into `search_timeout` on 65,000 entries (on fewer, some end
/// sooner, and a flood of them would not always count as heavy).
const HEAVY_QUERY: &str = "d* OR f* OR s* OR t* OR a* OR n* OR m* OR c* OR e* OR p*";

#[test]
fn an_http_client_flooding_heavy_searches_starves_neither_a_socket_client_nor_another_http_client()
{
    let scratch = Scratch::new();
    let abuser_token = scratch.write_private("abuser.token", "tok-abuser-51c2\n");
    let gentle_token = scratch.write_private("gentle.token", "tok-gentle-9e0d\n");
    let address = format!("127.0.0.1:{}", free_port());
    let config = scratch.write(
        "daemon.toml",
        &format!(
            "[daemon]\ndatabase = {:?}\nsocket = {:?}\nrequest_timeout = \"5s\"\n\
             search_timeout = \"300ms\"\nmax_concurrent_searches = 2\n\n\
             [servers.big]\ncommand = {FIXTURE:?}\n\
             args = [\"--name\", \"big\", \"--generate\", \"65000\", \"--page-size\", \"5000\"]\n\n\
             [http]\nlisten = \"{address}\"\ntokens = {{ abuser = {:?}, gentle = {:?} }}\n",
            scratch.path("catalog.db").display().to_string(),
            scratch.path("mirror.sock").display().to_string(),
            abuser_token.display().to_string(),
            gentle_token.display().to_string(),
        ),
    );
    let daemon = Daemon::start(&scratch, &config);
    wait_for("the big walk", Duration::from_secs(600), || {
        (daemon.server_status("big")["resources"] == 65_000).then_some(())
    });
    // The gentle searches are the index's (fast); only the flood reaches SQLite.
    wait_for("the search index", Duration::from_secs(600), || {
        let index = &daemon.call("catalog/status", json!({}))["daemon"]["searchIndex"];
        // The fixture's 3 templates are indexed beside the resources.
        (index["state"] == "ready" && index["documents"] == 65_003).then_some(())
    });
    let search = |token: &str, query: &str, raw: bool, limit: u64| {
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "catalog/search",
            "params": {"query": query, "raw": raw, "limit": limit},
        });
        let bearer = format!("Bearer {token}");
        let answer = http_exchange(
            &address,
            "POST",
            &[("Authorization", &bearer)],
            &body.to_string(),
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.json()
    };
    // The gentle clients are established before the flood: a client that has finished no
    // search yet counts with the heavy ones (src/search/gate.rs), and its first search could
    // wait the whole search_timeout behind a heavy one and be refused busy.
    let mut socket = SocketClient::connect(&daemon.socket);
    for answer in [
        socket.request(
            "catalog/search",
            json!({"query": "document 1", "limit": 10}),
        ),
        search("tok-gentle-9e0d", "document 1", false, 10),
    ] {
        assert_eq!(answer["result"]["engine"], "index", "{answer:.300}");
    }
    let stop = AtomicBool::new(false);
    // The flood's heavy searches answered so far (cancelled at search_timeout, not refused).
    let finished = AtomicU64::new(0);
    let timed_out = AtomicU64::new(0);
    std::thread::scope(|scope| {
        // One HTTP client (one token) asking twelve searches at once, each on a new
        // connection: more than the gate's whole queue (4 places per slot).
        for _ in 0..12 {
            let (stop, finished, timed_out, search) = (&stop, &finished, &timed_out, &search);
            scope.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let answer = search("tok-abuser-51c2", HEAVY_QUERY, true, 1000);
                    if answer["error"]["code"] == SEARCH_TIMED_OUT {
                        timed_out.fetch_add(1, Ordering::SeqCst);
                    }
                    if answer["error"]["code"] == BUSY {
                        // Refused at once: ask again soon, as a flooding client does.
                        std::thread::sleep(Duration::from_millis(50));
                    } else {
                        finished.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        // Whatever happens below, the flood stops, so the scope ends.
        let _stop_flood = StopOnDrop(&stop);
        // The flood has used its share: several heavy searches answered.
        wait_for("the flood's searches", Duration::from_secs(60), || {
            (finished.load(Ordering::SeqCst) >= 6).then_some(())
        });
        // Ten plain searches from a socket client, then ten from a second HTTP client, each
        // one after the other. If every request were a client of its own, each would wait
        // behind the flood's searches queued ahead of it, so at least two heavy searches
        // would end during each (20 in all); with the flood one client of the gate, a slot is
        // kept from it, each gets it at once, and a heavy search (300 ms) ends during one
        // only by chance.
        gentle_searches("socket", &finished, |query| {
            socket.request("catalog/search", json!({"query": query, "limit": 10}))
        });
        gentle_searches("http", &finished, |query| {
            search("tok-gentle-9e0d", query, false, 10)
        });
    });
    eprintln!(
        "the flood: {} heavy searches answered, {} of them cancelled at search_timeout",
        finished.load(Ordering::SeqCst),
        timed_out.load(Ordering::SeqCst)
    );
    let status = daemon.call("catalog/status", json!({}));
    let limits = &status["daemon"]["socketLimits"];
    assert_eq!(limits["searchesPeak"], 2, "{limits}");
}

/// Ten plain searches of one gentle client, one after the other, while a flood runs: each
/// answered by the index with hits, and fewer than ten of the flood's heavy searches
/// (`finished`) ending meanwhile.
fn gentle_searches(who: &str, finished: &AtomicU64, mut ask: impl FnMut(&str) -> Value) {
    let mut heavy_during = 0;
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let before = finished.load(Ordering::SeqCst);
        let started = Instant::now();
        let answer = ask(&format!("document {}", 64_000 + i));
        slowest = slowest.max(started.elapsed());
        heavy_during += finished.load(Ordering::SeqCst) - before;
        assert_eq!(answer["result"]["engine"], "index", "{who}: {answer:.300}");
        assert!(
            answer["result"]["results"]
                .as_array()
                .is_some_and(|hits| !hits.is_empty()),
            "{who}: {answer:.300}"
        );
    }
    eprintln!(
        "10 gentle {who} searches: {heavy_during} heavy searches ended meanwhile, slowest {slowest:?}"
    );
    assert!(
        heavy_during < 10,
        "{who}: {heavy_during} heavy searches ended while 10 gentle ones waited"
    );
}

/// Issue 21 item 14: after reloads that remove servers, `/metrics` has series of the
/// configured servers only (the walk-duration histogram kept every removed server's).
#[test]
fn metrics_forget_the_servers_a_reload_removed() {
    let server = |name: &str| stdio_server(name, &["--name", name, "--generate", "2"]);
    let upstream = Upstream::start(&format!("{}{}", server("keep"), server("gone0")), "");
    upstream.daemon.wait_for_walks("keep", 1);
    upstream.daemon.wait_for_walks("gone0", 1);
    let config = upstream.scratch.path("daemon.toml");
    let first = std::fs::read_to_string(&config).expect("config");
    let rounds = 5;
    for round in 1..=rounds {
        let text = first.replace(&server("gone0"), &server(&format!("gone{round}")));
        std::fs::write(&config, text).expect("write config");
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(upstream.daemon.child.id() as libc::pid_t, libc::SIGHUP);
        }
        let name = format!("gone{round}");
        wait_for(
            &format!("the reload to {name}"),
            Duration::from_secs(30),
            || {
                let status = upstream.daemon.call("catalog/status", json!({}));
                let servers = status["servers"].as_array().cloned().unwrap_or_default();
                let walked = servers.iter().any(|entry| {
                    entry["name"] == name.as_str() && entry["walksOk"].as_u64() >= Some(1)
                });
                (walked && servers.len() == 2).then_some(())
            },
        );
    }
    let bearer = format!("Bearer {TOKEN}");
    let answer = http_exchange_at(
        &upstream.address,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mut named: Vec<&str> = answer
        .body
        .lines()
        .filter_map(|line| line.split("server=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    named.sort_unstable();
    named.dedup();
    assert_eq!(named, ["gone5", "keep"], "{}", answer.body);
    assert!(
        answer
            .body
            .contains("mcp_mirror_walk_duration_seconds_count{server=\"gone5\"}"),
        "{}",
        answer.body
    );
}

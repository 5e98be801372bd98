//! The HTTP face cannot be locked up: hostile raw-TCP clients (stalled bodies, a byte now and
//! then, `initialize` floods, stream hoarding, a rebinding `Host`, bad-token floods), each
//! while a good client keeps getting answers. Attackers connect from 127.0.0.2 and up (Linux
//! routes all of 127/8 to lo), the good client from 127.0.0.1, so each is a peer of its own.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{free_port, stdio_server, wait_for, Daemon, Scratch, StopOnDrop, MIRROR};

/// A daemon with one small fixture and the HTTP face on loopback; `http` is the rest of the
/// `[http]` table.
struct Face {
    daemon: Daemon,
    address: String,
    _scratch: Scratch,
}

impl Face {
    fn start(http: &str) -> Face {
        Face::start_with_tokens(&[], http)
    }

    /// With `[http] tokens`: each (name, value) in a file only its owner may read.
    fn start_with_tokens(tokens: &[(&str, &str)], http: &str) -> Face {
        let scratch = Scratch::new();
        let mut table = String::new();
        for (name, value) in tokens {
            let file = scratch.write_private(&format!("{name}.token"), &format!("{value}\n"));
            table.push_str(&format!("{name} = {:?}, ", file.display().to_string()));
        }
        let http = match tokens.is_empty() {
            true => http.to_string(),
            false => format!("tokens = {{ {} }}\n{http}", table.trim_end_matches(", ")),
        };
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let servers = stdio_server("demo", &["--name", "demo", "--generate", "20"]);
        let config = scratch.config(&format!(
            "{servers}[http]\nlisten = \"{address}\"\n{http}\n"
        ));
        let daemon = Daemon::start(&scratch, &config);
        wait_for("the HTTP face", Duration::from_secs(20), || {
            TcpStream::connect(&address).ok().map(|_| ())
        });
        Face {
            daemon,
            address,
            _scratch: scratch,
        }
    }
}

/// Connects to `address` from the local address `source` (port chosen by the kernel).
fn connect_from(source: &str, address: &str) -> std::io::Result<TcpStream> {
    let source: IpAddr = source.parse().expect("a source address");
    let target: std::net::SocketAddr = address.parse().expect("a target address");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let stream = runtime.block_on(async move {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((source, 0).into())?;
        socket.connect(target).await
    })?;
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// One answer: the status (0 when the connection closed or broke before one) and the text.
fn read_answer(stream: &mut TcpStream, limit: Duration) -> (u16, String) {
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).to_string();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// A request with `Connection: close` from `source`, answered in full.
fn exchange(
    source: &str,
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut stream = connect_from(source, address).expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    read_answer(&mut stream, Duration::from_secs(60))
}

fn ping(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string()
}

/// The HTTP connections the face counts open now, from `/metrics`, asked from `source`.
/// The face's open connections, and the most one peer holds, from `/metrics`.
fn open_http_connections(source: &str, address: &str) -> (u64, u64) {
    let (status, text) = exchange(source, address, "GET", "/metrics", &[], "");
    assert_eq!(status, 200, "{text}");
    let gauge = |prefix: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
    };
    (
        gauge("mcp_mirror_clients{face=\"http\"} "),
        gauge("mcp_mirror_http_peer_connections_largest "),
    )
}

/// A POST head announcing a body of `length` bytes, and none of it.
fn stalled_head(address: &str, length: usize) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

#[test]
fn stalled_bodies_hold_neither_every_connection_nor_a_good_clients_turn() {
    let face =
        Face::start("max_connections = 48\nmax_connections_per_peer = 12\nbody_timeout = \"1s\"\n");
    let address = face.address.clone();

    // One address, 1,100 connections that send a head and then nothing.
    let mut stalled = Vec::new();
    for _ in 0..1100 {
        let mut stream = connect_from("127.0.0.2", &address).expect("attacker connects");
        let _ = stream.write_all(stalled_head(&address, 100).as_bytes());
        stalled.push(stream);
    }
    // Three from another address that send one byte of their body every 300 ms.
    let trickling: Vec<_> = (0..3)
        .map(|_| {
            let address = address.clone();
            std::thread::spawn(move || {
                let mut stream = connect_from("127.0.0.3", &address).expect("connect");
                stream.write_all(stalled_head(&address, 1000).as_bytes())?;
                let started = Instant::now();
                stream.set_read_timeout(Some(Duration::from_millis(300)))?;
                let mut bytes = Vec::new();
                let mut buffer = [0u8; 4096];
                loop {
                    if stream.write_all(b" ").is_err() {
                        break;
                    }
                    match stream.read(&mut buffer) {
                        Ok(0) => break,
                        Ok(read) => bytes.extend_from_slice(&buffer[..read]),
                        Err(error)
                            if matches!(
                                error.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                    if started.elapsed() > Duration::from_secs(60) {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(String::from_utf8_lossy(&bytes).to_string())
            })
        })
        .collect();

    // Meanwhile a good client from 127.0.0.1: 11 of 11 answers, and no peer holds more than
    // its share (12), counted as the bound counts: per peer, a share taken at accept and given
    // back when the connection's task ends. (The face's total once counted 17: the good
    // client's previous connection, closed on its side, not yet ended on the face's, beside
    // the one asking for /metrics.)
    for id in 0..11 {
        let (status, text) = exchange("127.0.0.1", &address, "POST", "/mcp", &[], &ping(id));
        assert_eq!(status, 200, "good request {id}: {text}");
        let (open, largest_peer) = open_http_connections("127.0.0.1", &address);
        assert!(
            largest_peer <= 12,
            "one peer holds {largest_peer} connections"
        );
        assert!(open <= 48, "{open} connections open");
    }

    // Every stalled connection ends: past the share at once (503 naming the bound, or closed),
    // the held ones at the body deadline (408).
    let (mut held, mut refused) = (0, 0);
    for mut stream in stalled {
        let (status, text) = read_answer(&mut stream, Duration::from_secs(60));
        match status {
            408 => {
                assert!(text.contains("body_timeout"), "{text}");
                held += 1;
            }
            503 => {
                assert!(text.contains("max_connections_per_peer"), "{text}");
                refused += 1;
            }
            0 => refused += 1,
            other => panic!("a stalled connection got {other}: {text}"),
        }
    }
    eprintln!("1,100 stalled connections: {held} held until the body deadline, {refused} refused");
    assert!(held >= 12, "{held} held");
    assert!(refused >= 1000, "{refused} refused");
    // A byte every 300 ms does not keep a body alive: the whole body has its deadline.
    for trickler in trickling {
        let text = trickler.join().expect("trickler").expect("trickler io");
        assert!(text.starts_with("HTTP/1.1 408"), "{text:.200}");
    }

    // Many addresses, so the shares add up past every connection: 6 x 12 = 72 stalled
    // connections kept open (reopened as they end) against 48. The body deadline frees
    // them; the good client waits its turn and is answered, 11 of 11.
    let stop = AtomicBool::new(false);
    let reopened = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for source in 4..10 {
            for _ in 0..12 {
                let (stop, reopened, address) = (&stop, &reopened, &address);
                scope.spawn(move || {
                    let source = format!("127.0.0.{source}");
                    while !stop.load(Ordering::SeqCst) {
                        let Ok(mut stream) = connect_from(&source, address) else {
                            continue;
                        };
                        let _ = stream.write_all(stalled_head(address, 100).as_bytes());
                        let _ = read_answer(&mut stream, Duration::from_secs(30));
                        reopened.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        }
        let _stop = StopOnDrop(&stop);
        wait_for(
            "the attack to fill the face",
            Duration::from_secs(60),
            || (reopened.load(Ordering::SeqCst) >= 48).then_some(()),
        );
        for id in 0..11 {
            let (status, text) =
                exchange("127.0.0.1", &address, "POST", "/mcp", &[], &ping(100 + id));
            assert_eq!(
                status, 200,
                "good request {id} under the spread attack: {text}"
            );
        }
    });
    let log = face.daemon.log_text();
    let lines = log
        .lines()
        .filter(|line| line.contains("max_connections_per_peer"))
        .count();
    assert!(
        (1..=20).contains(&lines),
        "{lines} log lines about refused connections"
    );
}

/// `initialize` from `source`; the session id it got, or the status it was refused with.
fn initialize(source: &str, address: &str) -> Result<String, u16> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "it", "version": "1"}},
    });
    let (status, text) = exchange(source, address, "POST", "/mcp", &[], &body.to_string());
    if status != 200 {
        return Err(status);
    }
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_string())
        })
        .ok_or(0)
}

/// The status of a `ping` in `session`, from `source`.
fn ping_in(source: &str, address: &str, session: &str) -> u16 {
    exchange(
        source,
        address,
        "POST",
        "/mcp",
        &[("Mcp-Session-Id", session)],
        &ping(7),
    )
    .0
}

/// Opens a GET stream of `session` and reads its head: the stream stays open while kept.
fn open_get_stream(source: &str, address: &str, session: &str) -> TcpStream {
    let mut stream = connect_from(source, address).expect("connect");
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send");
    let head = read_head(&mut stream);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream
}

/// Reads until the end of a response head (and whatever came with it).
fn read_head(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&bytes).contains("\r\n\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => bytes.extend_from_slice(&buffer[..read]),
        }
    }
    String::from_utf8_lossy(&bytes).to_string()
}

#[test]
fn an_initialize_flood_ends_the_flooders_own_sessions_and_idle_ones_expire() {
    let face = Face::start(
        "max_sessions = 64\nmax_sessions_per_client = 8\nsession_idle_timeout = \"5s\"\n",
    );
    let address = face.address.clone();
    // The good client's session, with its GET stream open (so it is in use while idle).
    let good = initialize("127.0.0.1", &address).expect("good session");
    let good_stream = open_get_stream("127.0.0.1", &address, &good);

    // 1,024 initialize calls from nine addresses, 127.0.0.2 to 127.0.0.10.
    let mut flood: Vec<(String, String)> = Vec::new();
    let mut second_good = None;
    for i in 0..1024 {
        let source = format!("127.0.0.{}", 2 + i % 9);
        let session = initialize(&source, &address)
            .unwrap_or_else(|status| panic!("initialize {i} refused with {status}"));
        flood.push((source, session));
        if i == 512 {
            // A good client arriving mid-flood gets a session and can use it.
            let session = initialize("127.0.0.1", &address).expect("second good session");
            second_good = Some(session);
        }
        // ... and keeps using it (it has no stream: unused for the idle timeout, it would go).
        if let Some(session) = second_good.as_ref().filter(|_| i % 32 == 0) {
            assert_eq!(ping_in("127.0.0.1", &address, session), 200, "at {i}");
        }
    }
    assert_eq!(ping_in("127.0.0.1", &address, &good), 200);
    let second_good = second_good.expect("second good");
    assert_eq!(ping_in("127.0.0.1", &address, &second_good), 200);

    // Each flooding address holds at most 8, all of them at most 64 less the good two.
    let mut alive_per_source = std::collections::BTreeMap::new();
    let mut alive = Vec::new();
    for (source, session) in flood.iter().rev() {
        if ping_in(source, &address, session) == 200 {
            *alive_per_source.entry(source.clone()).or_insert(0) += 1;
            alive.push((source.clone(), session.clone()));
        }
    }
    eprintln!("flood sessions alive after 1,024 initialize: {alive_per_source:?}");
    assert!(alive_per_source.values().all(|count| *count <= 8));
    assert!(alive.len() <= 62, "{} flood sessions alive", alive.len());
    // The earliest ones were ended to make room.
    assert_eq!(ping_in(&flood[0].0, &address, &flood[0].1), 404);

    // Unused for session_idle_timeout, the flood's sessions expire; the good one, whose GET
    // stream is open, does not. Each probe uses (so renews) the session it asks about, so
    // every probe asks about another one, a quarter of a second apart.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut probes = alive.iter().cycle();
    loop {
        let (source, session) = probes.next().expect("alive sessions");
        if ping_in(source, &address, session) == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "no idle session expired");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(ping_in("127.0.0.1", &address, &good), 200);
    assert!(face
        .daemon
        .log_text()
        .contains("session ended to make room"));
    // DELETE ends the session and, with it, its GET stream.
    let (status, text) = exchange(
        "127.0.0.1",
        &address,
        "DELETE",
        "/mcp",
        &[("Mcp-Session-Id", &good)],
        "",
    );
    assert_eq!(status, 204, "{text}");
    let mut stream = good_stream;
    let (_, rest) = read_answer(&mut stream, Duration::from_secs(30));
    assert!(rest.ends_with("0\r\n\r\n"), "the stream ended: {rest:?}");
}

/// Opens a 2026-07-28 `subscriptions/listen` stream from `source` with `token`; the status
/// and what arrived with the head.
fn listen(source: &str, address: &str, token: &str) -> (u16, String, TcpStream) {
    let body = json!({
        "jsonrpc": "2.0", "id": "l1", "method": "subscriptions/listen",
        "params": {
            "notifications": {"resourcesListChanged": true},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    })
    .to_string();
    let mut stream = connect_from(source, address).expect("connect");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut text = read_head(&mut stream);
    if text.starts_with("HTTP/1.1 200") {
        // The acknowledgement follows the head.
        let mut buffer = [0u8; 4096];
        while !text.contains("acknowledged") {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => text.push_str(&String::from_utf8_lossy(&buffer[..read])),
            }
        }
    }
    let status = text
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text, stream)
}

#[test]
fn one_token_cannot_take_every_stream_and_the_host_is_checked() {
    let face = Face::start_with_tokens(
        &[("abuser", "tok-abuser-0b1e"), ("fleet", "tok-fleet-77aa")],
        "max_streams = 12\nmax_streams_per_client = 4\n",
    );
    let address = face.address.clone();
    // One token from one address asks for every stream: it gets its share, 4.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..12 {
        let (status, text, stream) = listen("127.0.0.2", &address, "tok-abuser-0b1e");
        match status {
            200 => held.push(stream),
            503 => {
                assert!(text.contains("max_streams_per_client"), "{text}");
                refused += 1;
            }
            other => panic!("listen answered {other}: {text}"),
        }
    }
    assert_eq!((held.len(), refused), (4, 8));
    // The same token on another host is another client with its own share.
    for _ in 0..4 {
        let (status, text, stream) = listen("127.0.0.3", &address, "tok-abuser-0b1e");
        assert_eq!(status, 200, "{text}");
        held.push(stream);
    }
    // More hosts of the same token take what is left but the reserve (the last 3 of 12, a
    // quarter), which is kept for tokens that hold no stream yet.
    let mut kept_back = 0;
    for source in ["127.0.0.4", "127.0.0.5"] {
        for _ in 0..4 {
            let (status, text, stream) = listen(source, &address, "tok-abuser-0b1e");
            match status {
                200 => held.push(stream),
                503 => {
                    assert!(text.contains("are kept for tokens"), "{text}");
                    kept_back += 1;
                }
                other => panic!("listen answered {other}: {text}"),
            }
        }
    }
    assert_eq!((held.len(), kept_back), (9, 7));
    // A downstream's listen still gets its stream, acknowledged.
    let (status, text, _good_stream) = listen("127.0.0.1", &address, "tok-fleet-77aa");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("notifications/subscriptions/acknowledged"),
        "{text}"
    );
    // With tokens and no allowed_hosts, any Host passes: a page cannot present a token.
    let (status, text) = exchange(
        "127.0.0.1",
        &address,
        "POST",
        "/mcp",
        &[
            ("Host", "mirror.example:80"),
            ("Authorization", "Bearer tok-fleet-77aa"),
        ],
        &ping(1),
    );
    assert_eq!(status, 200, "{text}");
    assert!(face.daemon.log_text().contains("max_streams_per_client"));
}

#[test]
fn a_rebinding_host_is_refused_on_a_face_without_tokens() {
    let face = Face::start("allowed_hosts = [\"mirror.test\"]\n");
    let address = face.address.clone();
    let port = address.rsplit_once(':').expect("port").1.to_string();
    // A page of rebind.example whose name now points at 127.0.0.1 reads /metrics with a
    // same-origin GET (no Origin header): its Host gives it away.
    for host in [
        format!("rebind.example:{port}"),
        "rebind.example".to_string(),
    ] {
        let (status, text) = exchange(
            "127.0.0.1",
            &address,
            "GET",
            "/metrics",
            &[("Host", &host)],
            "",
        );
        assert_eq!(status, 421, "{host}: {text}");
        assert!(!text.contains("mcp_mirror_"), "{text}");
        let (status, _) = exchange(
            "127.0.0.1",
            &address,
            "POST",
            "/mcp",
            &[("Host", &host)],
            &ping(1),
        );
        assert_eq!(status, 421, "{host}");
    }
    // The listen address, localhost, other IP literals and the configured names pass.
    for host in [
        address.clone(),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        format!("mirror.test:{port}"),
        "mirror.test".to_string(),
    ] {
        let (status, text) = exchange(
            "127.0.0.1",
            &address,
            "GET",
            "/metrics",
            &[("Host", &host)],
            "",
        );
        assert_eq!(status, 200, "{host}: {text:.200}");
    }
}

#[test]
fn a_token_file_others_may_read_stops_the_start_like_ssh() {
    let scratch = Scratch::new();
    let token = scratch.write("fleet.token", "tok-open-file\n");
    let config = scratch.config(&format!(
        "[http]\nlisten = \"127.0.0.1:1\"\ntokens = {{ fleet = {:?} }}\n",
        token.display().to_string()
    ));
    let output = std::process::Command::new(MIRROR)
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("run serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("http.tokens.fleet"), "{stderr}");
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(!stderr.contains("tok-open-file"), "{stderr}");
}

#[test]
fn a_bad_token_flood_is_a_few_counted_log_lines_and_the_good_token_is_answered() {
    let face = Face::start_with_tokens(&[("fleet", "tok-good-5e21")], "");
    let address = face.address.clone();
    let finished = AtomicU64::new(0);
    std::thread::scope(|scope| {
        // 5 connections from 127.0.0.2, each pipelining 1,000 requests with a wrong token.
        for _ in 0..5 {
            let (finished, address) = (&finished, &address);
            scope.spawn(move || {
                let mut stream = connect_from("127.0.0.2", address).expect("connect");
                let request = format!(
                    "GET /metrics HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer tok-guessed\r\n\r\n"
                );
                let writer = {
                    let mut stream = stream.try_clone().expect("clone");
                    let request = request.repeat(1000);
                    std::thread::spawn(move || stream.write_all(request.as_bytes()))
                };
                stream
                    .set_read_timeout(Some(Duration::from_secs(60)))
                    .expect("timeout");
                let mut seen = 0;
                let mut text = String::new();
                let mut buffer = [0u8; 65536];
                while seen < 1000 {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(read) => {
                            text.push_str(&String::from_utf8_lossy(&buffer[..read]));
                            seen = text.matches("HTTP/1.1 401").count();
                        }
                    }
                }
                assert_eq!(seen, 1000, "{:.300}", text);
                writer.join().expect("writer").expect("write");
                finished.fetch_add(1, Ordering::SeqCst);
            });
        }
        // The good token is answered meanwhile.
        for id in 0..11 {
            let (status, text) = exchange(
                "127.0.0.1",
                &address,
                "POST",
                "/mcp",
                &[("Authorization", "Bearer tok-good-5e21")],
                &ping(id),
            );
            assert_eq!(status, 200, "{text}");
        }
    });
    assert_eq!(finished.load(Ordering::SeqCst), 5);
    // Within an interval or two the log has said all 5,000, in a few lines.
    wait_for(
        "the refusal count in the log",
        Duration::from_secs(60),
        || face.daemon.log_text().contains("total=5000").then_some(()),
    );
    let log = face.daemon.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("unknown bearer token"))
        .collect();
    assert!(
        (2..=10).contains(&lines.len()),
        "{} lines: {lines:#?}",
        lines.len()
    );
    assert!(!log.contains("tok-guessed"));
}

#[test]
fn a_client_that_never_reads_its_answers_loses_its_connection() {
    let face = Face::start("write_stall_timeout = \"2s\"\n");
    let address = face.address.clone();
    assert_eq!(open_http_connections("127.0.0.1", &address).0, 1);
    // From 127.0.0.2, with a small receive buffer: 2,000 pipelined `resources/list`, and
    // nothing of the answers read.
    let target: std::net::SocketAddr = address.parse().expect("address");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let hostile = runtime
        .block_on(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_recv_buffer_size(4096)?;
            socket.bind(([127, 0, 0, 2], 0).into())?;
            socket.connect(target).await
        })
        .expect("connect")
        .into_std()
        .expect("std stream");
    hostile.set_nonblocking(false).expect("blocking");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut writer = hostile.try_clone().expect("clone");
    let pipelined = request.repeat(2000);
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(pipelined.as_bytes());
    });
    wait_for(
        "the never-reading client's connection",
        Duration::from_secs(30),
        || (open_http_connections("127.0.0.1", &address).0 == 2).then_some(()),
    );
    // The daemon answers until the buffers are full, then waits for the client; after the
    // stall bound it closes the connection. The good client is answered meanwhile.
    let mut answered = 0;
    wait_for(
        "the stalled connection to close",
        Duration::from_secs(90),
        || {
            let (status, text) = exchange("127.0.0.1", &address, "POST", "/mcp", &[], &ping(1));
            assert_eq!(status, 200, "{text}");
            answered += 1;
            (open_http_connections("127.0.0.1", &address).0 == 1).then_some(())
        },
    );
    eprintln!("the never-reading client's connection closed; {answered} good pings meanwhile");
    drop(hostile);
    sender.join().expect("sender");
}

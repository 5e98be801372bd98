//! A 304 never hides a change: the ETag of a list answer over the HTTP face moves with every
//! kind (a tools-only change), with the scopes a token's view judges by (a server turning its
//! entries private), and is taken in the read that made the answer (conditional re-polls while
//! a resource changes every 50 ms never get 304 for content a plain request then shows
//! otherwise, and one tag never names two bodies).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http_face::{Answer, Upstream, TOKEN};
use crate::support::{stdio_server, wait_for, HttpFixture, Scratch, StopOnDrop};

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// A list request (`method` with no params) as the `fleet` token, conditional on `tag` if given.
fn ask(upstream: &Upstream, method: &str, tag: Option<&str>) -> Answer {
    let bearer = bearer();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}});
    let mut headers = vec![("Authorization", bearer.as_str())];
    if let Some(tag) = tag {
        headers.push(("If-None-Match", tag));
    }
    upstream.post(&headers, &body)
}

fn tools_scenario(description: &str) -> Value {
    json!({
        "generate": 3,
        "tools": [{"name": "lookup", "description": description, "inputSchema": {"type": "object"}}],
    })
}

#[test]
fn a_tools_only_change_moves_the_etag_of_catalog_tools() {
    let origin = Scratch::new();
    let path = origin.write_scenario("demo.json", &tools_scenario("before the change"));
    let path = path.display().to_string();
    let upstream = Upstream::start(
        &stdio_server("demo", &["--name", "demo", "--scenario", &path]),
        "",
    );
    upstream.daemon.wait_for_walks("demo", 1);
    let first = wait_for("the tools' walk", Duration::from_secs(30), || {
        let answer = ask(&upstream, "catalog/tools", None);
        answer.body.contains("before the change").then_some(answer)
    });
    let tag = first.header("etag").expect("an ETag on catalog/tools");
    assert_eq!(ask(&upstream, "catalog/tools", Some(&tag)).status, 304);

    // Only the tool changes: no resource, template or prompt moves.
    origin.write_scenario("demo.json", &tools_scenario("after the change"));
    wait_for("the tool's change", Duration::from_secs(30), || {
        let tools = upstream.daemon.call("catalog/tools", json!({})).to_string();
        tools.contains("after the change").then_some(())
    });
    let again = ask(&upstream, "catalog/tools", Some(&tag));
    assert_eq!(
        again.status, 200,
        "a 304 hid the tool change: {}",
        again.head
    );
    assert!(again.body.contains("after the change"), "{}", again.body);
    assert_ne!(again.header("etag").as_deref(), Some(tag.as_str()));
}

fn scoped_scenario(scope: &str) -> Value {
    json!({"generate": 20, "cache_scope": scope})
}

#[test]
fn a_scope_turned_private_moves_a_token_clients_resources_list_etag() {
    let origin = Scratch::new();
    let path = origin.write_scenario("scoped.json", &scoped_scenario("public"));
    let path = path.display().to_string();
    let fixture = HttpFixture::start(&["--era", "modern", "--name", "scoped", "--scenario", &path]);
    let upstream = Upstream::start(
        &format!("[servers.scoped]\nurl = \"{}\"\n", fixture.url),
        "",
    );
    upstream.daemon.wait_for_walks("scoped", 1);
    let listed = |answer: &Answer| {
        answer.json()["result"]["resources"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let first = wait_for("the public entries", Duration::from_secs(30), || {
        let answer = ask(&upstream, "resources/list", None);
        (listed(&answer) == 20).then_some(answer)
    });
    let tag = first.header("etag").expect("an ETag on resources/list");
    assert_eq!(ask(&upstream, "resources/list", Some(&tag)).status, 304);

    // The same entries, now private: the token must no longer get them, by any answer.
    origin.write_scenario("scoped.json", &scoped_scenario("private"));
    wait_for("the private scope", Duration::from_secs(30), || {
        (listed(&ask(&upstream, "resources/list", None)) == 0).then_some(())
    });
    let again = ask(&upstream, "resources/list", Some(&tag));
    assert_eq!(
        again.status, 200,
        "a 304 kept the private entries: {}",
        again.head
    );
    assert_eq!(listed(&again), 0, "{}", again.body);
    assert_ne!(again.header("etag").as_deref(), Some(tag.as_str()));
}

fn churning_scenario(step: usize) -> Value {
    json!({
        "generate": 5,
        "resources": [{"uri": "fixture://demo/moving", "name": "moving", "description": format!("step {step}")}],
    })
}

#[test]
fn conditional_re_polls_during_changes_never_get_a_304_for_changed_content() {
    let origin = Scratch::new();
    let path = origin.write_scenario("demo.json", &churning_scenario(0));
    let path = path.display().to_string();
    let upstream = Upstream::start_tuned(
        &stdio_server(
            "demo",
            &[
                "--name",
                "demo",
                "--scenario",
                &path,
                "--scenario-poll-ms",
                "10",
            ],
        ),
        "",
        "debounce = \"1ms\"\nmin_walk_interval = \"1ms\"\n",
    );
    upstream.daemon.wait_for_walks("demo", 1);
    let walks_before = upstream.daemon.server_status("demo")["walksOk"]
        .as_u64()
        .unwrap_or(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        scope.spawn(|| {
            let mut step = 1;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                origin.write_scenario("demo.json", &churning_scenario(step));
                step += 1;
            }
        });
        // Every body a tag was given with; a 304 or a later 200 under that tag must be it.
        let mut bodies: HashMap<String, Value> = HashMap::new();
        let mut last_tag: Option<String> = None;
        let (mut answers, mut not_modified) = (0, 0);
        let started = Instant::now();
        let mut failure = None;
        while started.elapsed() < Duration::from_secs(4) && failure.is_none() {
            let answer = ask(&upstream, "resources/list", last_tag.as_deref());
            answers += 1;
            let tag = answer.header("etag").expect("an ETag on every answer");
            let shown = match answer.status {
                304 => {
                    not_modified += 1;
                    // What a plain request shows right after, under the same tag.
                    let plain = ask(&upstream, "resources/list", None);
                    match plain.header("etag") == Some(tag.clone()) {
                        true => plain.json()["result"]["resources"].clone(),
                        false => continue,
                    }
                }
                200 => answer.json()["result"]["resources"].clone(),
                status => panic!("status {status}: {}", answer.head),
            };
            match bodies.get(&tag) {
                Some(known) if *known != shown => {
                    failure = Some(format!("tag {tag} named two bodies:\n{known}\n{shown}"))
                }
                Some(_) => {}
                None => {
                    bodies.insert(tag.clone(), shown);
                }
            }
            last_tag = Some(tag);
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(failure) = failure {
            panic!("after {answers} answers ({not_modified} of them 304): {failure}");
        }
        assert!(
            bodies.len() > 3,
            "the catalog hardly changed: {} tags",
            bodies.len()
        );
    });
    let walks_after = upstream.daemon.server_status("demo")["walksOk"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        walks_after > walks_before + 3,
        "{walks_before} -> {walks_after}"
    );
}

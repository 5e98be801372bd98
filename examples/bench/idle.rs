//! Idle and scale: the daemon's CPU, memory and descriptors with many quiet servers.

use std::time::Duration;

use serde_json::json;

use crate::daemon::{
    fixture_args, fixture_stdio_table, start_daemon, start_http_fixture, Daemon, DaemonFiles,
};
use crate::measure::{clock_ticks_per_second, cpu_ticks, open_fds, proc_status_kb};
use crate::process::http_server_table;
use crate::report::{mb, Report};

fn measure_idle(daemon: &Daemon, window: Duration) -> (f64, Option<u64>, usize) {
    let pid = daemon.process.pid();
    let before = cpu_ticks(pid).unwrap_or(0);
    std::thread::sleep(window);
    let after = cpu_ticks(pid).unwrap_or(0);
    let percent = (after - before) as f64 / clock_ticks_per_second() / window.as_secs_f64() * 100.0;
    (percent, proc_status_kb(pid, "VmRSS"), open_fds(pid))
}

pub fn run(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    report.line("## Idle and scale: quiet servers");
    report.line("");
    let window = if quick {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(60)
    };
    let mut rows = Vec::new();

    // 100 stdio fixtures, each a child process of the daemon with 10 resources.
    {
        let files = DaemonFiles::fresh("idle-100")?;
        let servers: String = (0..100)
            .map(|index| {
                let name = format!("quiet{index:03}");
                fixture_stdio_table(&name, &fixture_args(10, 100, &name))
            })
            .collect();
        let config = files.config("", &servers)?;
        let daemon = start_daemon(&files, &config)?;
        daemon.wait_for_walks(1, Duration::from_secs(300))?;
        std::thread::sleep(Duration::from_secs(5));
        let status = daemon.call("catalog/status", json!({}))?;
        let push = status["servers"][0]["live"]["push"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let (percent, rss, fds) = measure_idle(&daemon, window);
        rows.push(vec![
            "100".into(),
            format!("stdio, 100 fixture child processes; push: {push}"),
            format!("{percent:.3}"),
            mb(rss),
            fds.to_string(),
        ]);
    }

    // 100 and 1,000 servers over Streamable HTTP: one fixture process serving one endpoint
    // (its own catalog and sessions) per server at /mcp/0 .. /mcp/N-1.
    for count in [100usize, 1000] {
        let files = DaemonFiles::fresh(&format!("idle-http-{count}"))?;
        let mut args = fixture_args(10, 100, "quiet");
        args.extend(["--endpoints".to_string(), count.to_string()]);
        let fixture = start_http_fixture(&args, &files.path("fixture.log"))?;
        let base = fixture.url.trim_end_matches('/');
        let servers: String = (0..count)
            .map(|index| http_server_table(&format!("quiet{index:04}"), &format!("{base}/{index}")))
            .collect();
        let config = files.config("", &servers)?;
        let daemon = start_daemon(&files, &config)?;
        daemon.wait_for_walks(1, Duration::from_secs(600))?;
        std::thread::sleep(Duration::from_secs(5));
        let status = daemon.call("catalog/status", json!({}))?;
        let push = status["servers"][0]["live"]["push"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let (percent, rss, fds) = measure_idle(&daemon, window);
        rows.push(vec![
            count.to_string(),
            format!("Streamable HTTP, one fixture process with {count} endpoints; push: {push}"),
            format!("{percent:.3}"),
            mb(rss),
            fds.to_string(),
        ]);
        drop(daemon);
        drop(fixture);
    }
    report.table(
        &[
            "servers",
            "transport",
            "daemon CPU % of one core",
            "daemon RSS MB",
            "daemon open fds",
        ],
        &rows,
    );
    report.line(format!(
        "CPU is utime+stime from /proc/PID/stat over {} s, starting 5 s after every server's \
         first walk; pings run at the default 60 s interval. Budget: 100 quiet servers under 1% \
         of a core.",
        window.as_secs()
    ));
    report.line("");
    Ok(())
}

//! The `mcp-mirror` binary: parses arguments, sets up logging and signals, then calls into the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mcp_mirror::{cli, config, daemon, paths, redact, systemd};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use tracing::Level;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "mcp-mirror",
    version,
    about = "A local, searchable mirror of MCP servers' resources, templates, tools and prompts, \
             served over a Unix socket and Streamable HTTP, online or not"
)]
struct Arguments {
    /// The client flags as they were accepted before the command name (`mcp-mirror --json
    /// status`); hidden, and refused for a command that does not take them.
    #[command(flatten)]
    before: BeforeCommand,
    #[command(subcommand)]
    command: Command,
}

/// The client flags written before the command name, which older scripts do.
#[derive(Args, Default)]
struct BeforeCommand {
    #[arg(long, hide = true)]
    socket: Option<PathBuf>,
    #[arg(long, hide = true)]
    json: bool,
    #[arg(long, hide = true)]
    database: Option<PathBuf>,
    #[arg(long, hide = true)]
    url: Option<String>,
    #[arg(long, hide = true)]
    token_file: Option<PathBuf>,
}

/// How a client command reaches a mirror, and how it prints.
#[derive(Args, Clone, Default)]
struct ClientFlags {
    /// The daemon's socket (default: from the environment, else the standard location).
    #[arg(long, env = "MCP_MIRROR_SOCKET")]
    socket: Option<PathBuf>,
    /// Speak to a remote mirror's HTTP face instead of the socket, e.g.
    /// http://mirror.internal:8788/mcp (no offline fallback: exit 3 when it cannot be reached).
    #[arg(long, env = "MCP_MIRROR_URL")]
    url: Option<String>,
    /// A file holding the bearer token for --url (never pass a token itself on the command line).
    #[arg(long, env = "MCP_MIRROR_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long)]
    json: bool,
}

/// A client command that reads the database file itself when no daemon runs.
#[derive(Args, Clone, Default)]
struct ReadingFlags {
    #[command(flatten)]
    client: ClientFlags,
    /// The database read when the daemon is not running (default: the one the socket's daemon
    /// recorded beside it; with neither --socket nor a record, the standard location).
    #[arg(long, env = "MCP_MIRROR_DATABASE")]
    database: Option<PathBuf>,
}

/// A command that speaks only to the local daemon's socket.
#[derive(Args, Clone, Default)]
struct SocketFlag {
    /// The daemon's socket (default: from the environment, else the standard location).
    #[arg(long, env = "MCP_MIRROR_SOCKET")]
    socket: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon in the foreground.
    Serve {
        /// The configuration file (default: /etc/mcp-mirror/daemon.toml for root, else the XDG config directory).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Log as human-readable text or as JSON lines.
        #[arg(long, value_enum, default_value_t = LogFormat::Human)]
        log_format: LogFormat,
    },
    /// Check a configuration file as `serve` and `reload` would (keys, values, token files,
    /// the database's and the socket's places, the model directory) without starting anything;
    /// exit 0 when it is usable, 2 when `serve` would refuse it.
    Check {
        /// The configuration file (default: as for `serve`).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Show the daemon and every server's state.
    Status {
        #[command(flatten)]
        client: ClientFlags,
    },
    /// List the merged catalog (each URI once, from the server that wins it).
    Ls {
        /// List this server's own snapshot instead, marking the entries another server wins.
        #[arg(long)]
        server: Option<String>,
        /// Add each resource's URI flags (local-file, loopback, link-local, private-network,
        /// non-network-scheme: where following its URI directly leads).
        #[arg(long)]
        long: bool,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// List the merged resource templates.
    Templates {
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// Full-text search over resources (URI, name, title, description), tools and prompts
    /// (name, title, description, their inputs' names and descriptions).
    Search {
        /// The words to find (the last one also matches as a prefix).
        query: String,
        /// At most this many results (default 20, at most 1000).
        #[arg(long)]
        limit: Option<u64>,
        /// Only this server's resources.
        #[arg(long)]
        server: Option<String>,
        /// Only resources of this MIME type.
        #[arg(long)]
        mime_type: Option<String>,
        /// Treat the query as raw FTS5 syntax.
        #[arg(long)]
        raw: bool,
        /// Continue after an earlier page (the cursor it printed).
        #[arg(long)]
        cursor: Option<String>,
        /// Only these kinds: resource, tool or prompt (repeat the flag for several; every
        /// kind by default).
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<mcp_mirror::protocol::Kind>,
        /// Rank by words (lexical), by meaning (semantic) or both (hybrid, the default when
        /// the daemon has a `[search] semantic_model`).
        #[arg(long)]
        mode: Option<mcp_mirror::protocol::SearchMode>,
        /// Only hits whose URI carries this flag: local-file, non-network-scheme, loopback,
        /// link-local, private-network, or none for hits with no flag (repeat the flag for
        /// several; a hit passes when it matches any).
        #[arg(long = "uri-flag", value_name = "FLAG")]
        uri_flags: Vec<mcp_mirror::protocol::uri_flags::UriFlagFilter>,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// Show every field of one resource and which servers list it (or of one URI template);
    /// `show tool SERVER/NAME` (or `prompt`) shows a whole tool or prompt definition.
    Show {
        /// The resource's URI, a template's uriTemplate as `templates` lists it, or `tool`/`prompt`.
        uri: String,
        /// With `tool` or `prompt` as the first word: SERVER/NAME.
        name: Option<String>,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// List the mirrored tools.
    Tools {
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// List the mirrored prompts.
    Prompts {
        /// Only this server's prompts.
        #[arg(long)]
        server: Option<String>,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// List the kept versions of one entry, newest first: `history tool SERVER/NAME` (or
    /// `prompt`, `template`, `resource` with SERVER/KEY).
    History {
        /// tool, prompt, template or resource.
        kind: String,
        /// SERVER/NAME (or SERVER/KEY: a template's uriTemplate, a resource's URI).
        entry: String,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// Compare two kept versions of one entry (default: the previous and the current).
    Diff {
        /// tool, prompt, template or resource.
        kind: String,
        /// SERVER/NAME (or SERVER/KEY).
        entry: String,
        /// The older version (as `history` numbers them).
        #[arg(long)]
        from: Option<i64>,
        /// The newer version.
        #[arg(long)]
        to: Option<i64>,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// What changed in the catalog since a time or a change: counts per server and kind,
    /// then each change (`changes --since 1d`).
    Changes {
        /// From this time on: an age (90s, 30m, 12h, 7d), an RFC 3339 time
        /// (2026-12-04T10:00:00Z), or after a change's sequence number (digits); default 1d.
        #[arg(long)]
        since: Option<String>,
        /// Only these kinds: resource, template, tool or prompt (repeat the flag for several;
        /// every kind by default).
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<mcp_mirror::protocol::Kind>,
        #[command(flatten)]
        reading: ReadingFlags,
    },
    /// Show the tools and prompts that differ from the accepted definitions, each diffed
    /// against its accepted version.
    Drift {
        /// Only this server's drift.
        #[arg(long)]
        server: Option<String>,
        #[command(flatten)]
        client: ClientFlags,
    },
    /// Accept the current tools and prompts; drift is measured from them.
    Accept {
        /// Accept only this server's definitions.
        #[arg(long)]
        server: Option<String>,
        #[command(flatten)]
        client: ClientFlags,
    },
    /// Read a resource through the server that listed it (or whose template matches it): text to stdout.
    Read {
        /// The resource's URI.
        uri: String,
        /// Write the contents (decoded, when binary) to this file.
        #[arg(long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        client: ClientFlags,
    },
    /// Print catalog changes as they happen.
    Watch {
        /// Start from this time: an age (90s, 30m, 12h, 7d), an RFC 3339 time
        /// (2026-12-04T10:00:00Z), or after a change's sequence number (digits); default: now.
        #[arg(long)]
        since: Option<String>,
        #[command(flatten)]
        client: ClientFlags,
    },
    /// Serve MCP on stdio by bridging to the daemon's socket (for MCP clients that launch servers).
    Mcp {
        #[command(flatten)]
        local: SocketFlag,
    },
    /// Ask one server (or all) to walk its catalog again now.
    Refresh {
        /// The server to walk (default: every server).
        server: Option<String>,
        /// Wait until the new snapshot is committed.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        client: ClientFlags,
    },
    /// Make the daemon re-read its configuration and wait until it applied or refused it
    /// (what `systemctl reload` runs; a refused file exits 1).
    Reload {
        /// The daemon's process id (default: the socket's daemon). When the socket cannot be
        /// asked (no access, or another process), SIGHUP is sent and not waited on.
        #[arg(long)]
        pid: Option<u32>,
        #[command(flatten)]
        local: SocketFlag,
        /// Print machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) to standard output.
    Man,
}

impl Command {
    /// The name the command is invoked by, for messages.
    fn name(&self) -> &'static str {
        match self {
            Command::Serve { .. } => "serve",
            Command::Check { .. } => "check",
            Command::Status { .. } => "status",
            Command::Ls { .. } => "ls",
            Command::Templates { .. } => "templates",
            Command::Search { .. } => "search",
            Command::Show { .. } => "show",
            Command::Tools { .. } => "tools",
            Command::Prompts { .. } => "prompts",
            Command::History { .. } => "history",
            Command::Diff { .. } => "diff",
            Command::Changes { .. } => "changes",
            Command::Drift { .. } => "drift",
            Command::Accept { .. } => "accept",
            Command::Read { .. } => "read",
            Command::Watch { .. } => "watch",
            Command::Mcp { .. } => "mcp",
            Command::Refresh { .. } => "refresh",
            Command::Reload { .. } => "reload",
            Command::Completions { .. } => "completions",
            Command::Man => "man",
        }
    }

    /// The client flags this command takes (`--database` as the reading commands' own), with
    /// those written before the command name merged in; a usage error names a flag written
    /// there that this command does not take.
    fn client_flags(&self, before: &BeforeCommand) -> Result<ReadingFlags, cli::ClientError> {
        let (mut flags, takes) = match self {
            Command::Status { client }
            | Command::Drift { client, .. }
            | Command::Accept { client, .. }
            | Command::Read { client, .. }
            | Command::Watch { client, .. }
            | Command::Refresh { client, .. } => (
                ReadingFlags {
                    client: client.clone(),
                    database: None,
                },
                ["socket", "json", "url", "token-file"].as_slice(),
            ),
            Command::Ls { reading, .. }
            | Command::Templates { reading }
            | Command::Search { reading, .. }
            | Command::Show { reading, .. }
            | Command::History { reading, .. }
            | Command::Diff { reading, .. }
            | Command::Changes { reading, .. }
            | Command::Tools { reading, .. }
            | Command::Prompts { reading, .. } => (
                reading.clone(),
                ["socket", "json", "url", "token-file", "database"].as_slice(),
            ),
            Command::Mcp { local } => (
                ReadingFlags {
                    client: ClientFlags {
                        socket: local.socket.clone(),
                        ..ClientFlags::default()
                    },
                    database: None,
                },
                ["socket"].as_slice(),
            ),
            Command::Reload { local, json, .. } => (
                ReadingFlags {
                    client: ClientFlags {
                        socket: local.socket.clone(),
                        json: *json,
                        ..ClientFlags::default()
                    },
                    database: None,
                },
                ["socket", "json"].as_slice(),
            ),
            Command::Serve { .. }
            | Command::Check { .. }
            | Command::Completions { .. }
            | Command::Man => (ReadingFlags::default(), [].as_slice()),
        };
        let written = [
            ("socket", before.socket.is_some()),
            ("json", before.json),
            ("database", before.database.is_some()),
            ("url", before.url.is_some()),
            ("token-file", before.token_file.is_some()),
        ];
        if let Some((flag, _)) = written
            .iter()
            .find(|(flag, given)| *given && !takes.contains(flag))
        {
            return Err(cli::ClientError::Usage(format!(
                "`{}` takes no --{flag} (see `mcp-mirror {} --help`)",
                self.name(),
                self.name()
            )));
        }
        let client = &mut flags.client;
        client.socket = client.socket.take().or_else(|| before.socket.clone());
        client.json |= before.json;
        client.url = client.url.take().or_else(|| before.url.clone());
        client.token_file = client
            .token_file
            .take()
            .or_else(|| before.token_file.clone());
        flags.database = flags.database.take().or_else(|| before.database.clone());
        Ok(flags)
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

// The daemon's allocator, jemalloc (`heap`); SQLite's allocations stay on glibc's.
mcp_mirror::use_daemon_allocator!();

// Over 100 lines on purpose: the binary's one table of subcommands, each an arm calling its library
// function, and the exit codes.
fn main() -> ExitCode {
    let arguments = Arguments::parse();
    if matches!(arguments.command, Command::Serve { .. }) {
        mcp_mirror::heap::bound_sqlite_heap();
    }
    if !matches!(arguments.command, Command::Serve { .. }) {
        // SAFETY: restoring the default SIGPIPE action before any thread exists; it lets
        // `mcp-mirror ls | head` end quietly like other command-line tools.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let flags = match arguments.command.client_flags(&arguments.before) {
        Ok(flags) => flags,
        Err(error) => {
            eprintln!("mcp-mirror: {}", redact::printable(&error.to_string()));
            return ExitCode::from(error.exit_code());
        }
    };
    if let Err(error) = choose_remote(&flags.client) {
        eprintln!("mcp-mirror: {}", redact::printable(&error.to_string()));
        return ExitCode::from(error.exit_code());
    }
    let json = flags.client.json;
    let socket = flags
        .client
        .socket
        .clone()
        .unwrap_or_else(paths::default_socket);
    // With a socket chosen and no database, only the database that socket's daemon recorded
    // will do: the standard one may belong to another daemon.
    let database = match (&flags.database, &flags.client.socket) {
        (Some(database), _) => cli::DatabaseChoice::Given(database.clone()),
        (None, Some(_)) => cli::DatabaseChoice::OfSocket,
        (None, None) => cli::DatabaseChoice::Default(paths::default_database()),
    };
    let outcome = match &arguments.command {
        Command::Serve { config, log_format } => return serve(config.clone(), *log_format),
        Command::Check { config } => return check(config.clone()),
        Command::Status { .. } => cli::status(&socket, json),
        Command::Ls { server, long, .. } => {
            cli::ls(&socket, &database, server.as_deref(), *long, json)
        }
        Command::Templates { .. } => cli::templates(&socket, &database, json),
        Command::Search {
            query,
            limit,
            server,
            mime_type,
            raw,
            cursor,
            kinds,
            mode,
            uri_flags,
            ..
        } => {
            let search = cli::SearchArgs {
                kinds,
                mode: *mode,
                uri_flags,
                query,
                limit: *limit,
                server: server.as_deref(),
                mime_type: mime_type.as_deref(),
                raw: *raw,
                cursor: cursor.as_deref(),
            };
            cli::search(&socket, &database, &search, json)
        }
        Command::Show {
            uri: kind,
            name: Some(name),
            ..
        } if kind == "tool" || kind == "prompt" => {
            let kind = if kind == "tool" {
                mcp_mirror::protocol::Kind::Tool
            } else {
                mcp_mirror::protocol::Kind::Prompt
            };
            cli::show_entry(&socket, &database, kind, name, json)
        }
        Command::Show { uri, .. } => cli::show(&socket, &database, uri, json),
        Command::Tools { server, .. } => cli::list_kind(
            &socket,
            &database,
            mcp_mirror::protocol::Kind::Tool,
            server.as_deref(),
            json,
        ),
        Command::Prompts { server, .. } => cli::list_kind(
            &socket,
            &database,
            mcp_mirror::protocol::Kind::Prompt,
            server.as_deref(),
            json,
        ),
        Command::History { kind, entry, .. } => cli::history(&socket, &database, kind, entry, json),
        Command::Diff {
            kind,
            entry,
            from,
            to,
            ..
        } => cli::diff(&socket, &database, kind, entry, (*from, *to), json),
        Command::Changes { since, kinds, .. } => {
            cli::changes(&socket, &database, since.as_deref(), kinds, json)
        }
        Command::Drift { server, .. } => cli::drift(&socket, server.as_deref(), json),
        Command::Accept { server, .. } => cli::accept(&socket, server.as_deref(), json),
        Command::Read { uri, output, .. } => cli::read(&socket, uri, output.as_deref(), json),
        Command::Watch { since, .. } => cli::watch(&socket, since.as_deref(), json),
        Command::Mcp { .. } => cli::bridge(&socket),
        Command::Refresh { server, wait, .. } => {
            cli::refresh(&socket, server.as_deref(), *wait, json)
        }
        Command::Reload { pid, .. } => cli::reload(&socket, *pid, json),
        Command::Completions { shell } => {
            let mut command = <Arguments as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "mcp-mirror", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let command = <Arguments as clap::CommandFactory>::command();
            return match clap_mangen::Man::new(command).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("mcp-mirror: cannot write the man page: {error}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A CLI error may quote a server's error message.
            eprintln!("mcp-mirror: {}", redact::printable(&error.to_string()));
            ExitCode::from(error.exit_code())
        }
    }
}

/// With `--url`, points the client commands at that remote mirror, with the token from
/// `--token-file` (trimmed of surrounding whitespace) when one is given. Only the commands
/// that take `--url` have one here (`mcp` and `reload` speak to a local daemon).
fn choose_remote(arguments: &ClientFlags) -> Result<(), cli::ClientError> {
    // Without a URL a token file is not read: the socket needs none, and a token file set in
    // the environment for occasional `--url` use must not stop local commands.
    let Some(url) = &arguments.url else {
        return Ok(());
    };
    let url = reqwest::Url::parse(url)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| {
            cli::ClientError::Usage(format!(
                "--url {url:?} is not an http:// or https:// URL (such as http://mirror.internal:8788/mcp)"
            ))
        })?;
    let token = match &arguments.token_file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                cli::ClientError::Usage(format!(
                    "cannot read the token file {}: {error}",
                    path.display()
                ))
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(cli::ClientError::Usage(format!(
                    "the token file {} is empty",
                    path.display()
                )));
            }
            Some(secrecy::SecretString::from(token.to_string()))
        }
    };
    cli::use_remote(cli::Remote { url, token });
    Ok(())
}

/// Logs to standard error, with configured secrets scrubbed from every line. `RUST_LOG` wins
/// over `[daemon] log_level`, which wins over `info`.
fn init_logging(format: LogFormat, configured_level: Option<&str>) {
    let filter = EnvFilter::try_from_default_env()
        .ok()
        .or_else(|| configured_level.and_then(|level| EnvFilter::try_new(level).ok()))
        .unwrap_or_else(|| EnvFilter::new("info"));
    // No colours: every line goes through `redact::printable`, which would escape our own
    // ANSI sequences as it escapes a server's.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(redact::ScrubbedStderr {
            json: matches!(format, LogFormat::Json),
        })
        .with_ansi(false);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human if systemd::stderr_is_journal() => builder
            .with_ansi(false)
            .event_format(JournaldFormat::default())
            .init(),
        LogFormat::Human => builder.init(),
    }
}

/// Lines for journald: a `<N>` syslog priority prefix, which journald turns into the entry's
/// priority (so `journalctl -p warning` works), and no timestamp, since journald stamps every
/// entry itself. Plain level words alone would all land at journald's default priority.
struct JournaldFormat {
    inner: tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Full, ()>,
}

impl Default for JournaldFormat {
    fn default() -> Self {
        JournaldFormat {
            inner: tracing_subscriber::fmt::format()
                .without_time()
                .with_ansi(false),
        }
    }
}

impl<S, N> FormatEvent<S, N> for JournaldFormat
where
    S: tracing::Subscriber + for<'lookup> LookupSpan<'lookup>,
    N: for<'writer> FormatFields<'writer> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let priority = match *event.metadata().level() {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        write!(writer, "<{priority}>")?;
        self.inner.format_event(context, writer, event)
    }
}

/// `check`: the validation `serve` and `reload` run, printed (each problem as
/// `file:line: key: what is wrong`, warnings marked so), and nothing started or opened for
/// writing. Exit 0 when `serve` would start, 2 when it would refuse the file.
fn check(config_path: Option<PathBuf>) -> ExitCode {
    let config_path = config_path.unwrap_or_else(paths::default_config);
    let (errors, warnings, servers) = match config::load(&config_path) {
        Ok(loaded) => (Vec::new(), loaded.warnings, loaded.config.servers.len()),
        Err(problems) => (problems.errors, problems.warnings, 0),
    };
    for error in &errors {
        println!("{error}");
    }
    for warning in &warnings {
        println!("{warning} (a warning)");
    }
    if errors.is_empty() {
        println!(
            "{}: ok ({servers} server{}{})",
            config_path.display(),
            if servers == 1 { "" } else { "s" },
            if warnings.is_empty() {
                ""
            } else {
                ", with warnings"
            }
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "{}: {} problem{}: `serve` would refuse this file",
            config_path.display(),
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        );
        ExitCode::from(2)
    }
}

fn serve(config_path: Option<PathBuf>, log_format: LogFormat) -> ExitCode {
    let config_path = config_path.unwrap_or_else(paths::default_config);
    // A `ConfigError` never quotes a configured value, so it needs no scrubbing.
    let loaded = match config::load(&config_path) {
        Ok(loaded) => loaded,
        Err(problems) => {
            for error in &problems.errors {
                eprintln!("mcp-mirror: invalid configuration: {error}");
            }
            return ExitCode::from(2);
        }
    };
    let config = loaded.config;
    // Before the first log line: from here on every line is scrubbed of them.
    redact::remember_secrets(config.secrets());
    init_logging(log_format, config.daemon.log_level.as_deref());
    daemon::log_config_warnings(&loaded.warnings);
    // Before the runtime starts its threads: this edits the environment.
    let service = systemd::ServiceEnvironment::take_from_process();
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("mcp-mirror: cannot install signal handlers: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcp-mirror: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let upstream = match mcp_mirror::background::upstream_runtime() {
        Ok(upstream) => upstream,
        Err(error) => {
            eprintln!("mcp-mirror: cannot start the sessions' async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (controls, control_receiver) = tokio::sync::mpsc::channel(8);
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let event = match signal {
                SIGHUP => {
                    tracing::info!("received SIGHUP");
                    daemon::ControlEvent::Reload
                }
                _ => {
                    tracing::info!(signal, "received a stop signal");
                    daemon::ControlEvent::Shutdown
                }
            };
            if controls.blocking_send(event).is_err() {
                return;
            }
        }
    });
    let outcome = runtime.block_on(daemon::run_with(
        config,
        control_receiver,
        service,
        upstream.handle().clone(),
    ));
    // Tasks that outlived the ordered shutdown (a session past its bound) are dropped here,
    // which kills any child they still hold; never wait on them without a limit.
    upstream.shutdown_timeout(Duration::from_secs(1));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let message = redact::scrub(&format!("{error:#}")).into_owned();
            tracing::error!("{message}");
            eprintln!("mcp-mirror: {}", redact::printable(&message));
            ExitCode::FAILURE
        }
    }
}

//! The systemd service protocol, spoken directly: sd_notify datagrams, socket activation, the watchdog interval.
//!
//! The protocol is a handful of environment variables and one datagram format, so we implement
//! it here (see sd_notify(3), sd_listen_fds(3), sd_watchdog_enabled(3)) rather than use the
//! `sd-notify` and `listenfd` crates, which do less of what a daemon with children needs:
//! `sd-notify` reads `NOTIFY_SOCKET` at every call (so it must stay in the environment our
//! stdio servers inherit), sends on a blocking socket, and takes an abstract `@name` address
//! for a path; `listenfd` adopts descriptors when `LISTEN_PID` is missing and honours a
//! `LISTEN_FDS_FIRST_FD` that systemd never sets. Like `listenfd`, we check what we adopt: the
//! first listening Unix stream socket serves the socket face, the first listening TCP socket
//! the HTTP face.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The first file descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// Variables systemd sets for this process alone; children must not inherit them, or a stdio
/// server would believe it was socket-activated or could report readiness in our name.
const SERVICE_VARIABLES: [&str; 6] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
];

/// What systemd handed this process: where to send notifications, how often the watchdog
/// wants to hear from us, and a listening socket when the daemon was socket-activated.
#[derive(Debug, Default)]
pub struct ServiceEnvironment {
    pub(crate) notifier: Option<Notifier>,
    pub(crate) watchdog_interval: Option<Duration>,
    pub(crate) listener: Option<OwnedFd>,
    /// A listening TCP socket passed for the HTTP face (a socket unit with
    /// `ListenStream=127.0.0.1:8788`), served in place of binding `[http] listen`.
    pub(crate) http_listener: Option<OwnedFd>,
}

impl ServiceEnvironment {
    /// Reads the service variables and removes them from the environment.
    ///
    /// Call it before any other thread exists: changing the environment is only sound while
    /// nothing else can read it.
    pub fn take_from_process() -> ServiceEnvironment {
        let lookup = |name: &str| std::env::var_os(name);
        let environment = ServiceEnvironment::from_variables(&lookup, std::process::id());
        for name in SERVICE_VARIABLES {
            std::env::remove_var(name);
        }
        environment
    }

    fn from_variables(
        lookup: &dyn Fn(&str) -> Option<OsString>,
        own_pid: u32,
    ) -> ServiceEnvironment {
        let for_us = |pid_variable: &str| match lookup(pid_variable) {
            // Absent means "whoever reads this", which systemd does for WATCHDOG_PID.
            None => true,
            Some(pid) => pid.to_str().and_then(|pid| pid.parse::<u32>().ok()) == Some(own_pid),
        };
        let notifier = lookup("NOTIFY_SOCKET").and_then(|address| {
            Notifier::connect(&address)
                .map_err(|error| {
                    tracing::warn!(%error, "NOTIFY_SOCKET is set but unusable; not notifying systemd")
                })
                .ok()
        });
        let watchdog_interval = lookup("WATCHDOG_USEC")
            .and_then(|value| value.to_str()?.parse::<u64>().ok())
            .filter(|usec| *usec > 0 && for_us("WATCHDOG_PID"))
            .map(Duration::from_micros);
        let passed = lookup("LISTEN_FDS")
            .and_then(|value| value.to_str()?.parse::<i32>().ok())
            .unwrap_or(0);
        let adopted = if passed >= 1 && lookup("LISTEN_PID").is_some() && for_us("LISTEN_PID") {
            adopt_listeners(passed)
        } else {
            PassedListeners::default()
        };
        ServiceEnvironment {
            notifier,
            watchdog_interval,
            listener: adopted.unix,
            http_listener: adopted.tcp,
        }
    }
}

/// The listening sockets systemd passed, by what we serve on them.
#[derive(Default)]
struct PassedListeners {
    /// The first listening Unix stream socket: the socket the CLI and bridge use.
    unix: Option<OwnedFd>,
    /// The first listening TCP socket: `[http] listen`'s place.
    tcp: Option<OwnedFd>,
}

/// Takes the descriptors systemd passed (`count` of them from fd 3): the first listening
/// Unix stream socket and the first listening TCP socket; anything else is left alone.
fn adopt_listeners(count: i32) -> PassedListeners {
    let mut adopted = PassedListeners::default();
    for raw in LISTEN_FDS_START..LISTEN_FDS_START.saturating_add(count) {
        // SAFETY: systemd guarantees fds 3..3+LISTEN_FDS are open when LISTEN_PID is our pid;
        // borrowing one to look at it is sound while nothing closes it.
        let passed = unsafe { BorrowedFd::borrow_raw(raw) };
        let slot = match listening_stream_domain(passed) {
            Some(libc::AF_UNIX) if adopted.unix.is_none() => &mut adopted.unix,
            Some(libc::AF_INET | libc::AF_INET6) if adopted.tcp.is_none() => &mut adopted.tcp,
            _ => {
                tracing::warn!(
                    descriptor = raw,
                    "systemd passed a descriptor that is not a listening Unix or TCP stream socket we can use; ignoring it"
                );
                continue;
            }
        };
        // SAFETY: as above, and it is ours: we take ownership of it exactly once.
        let descriptor = unsafe { OwnedFd::from_raw_fd(raw) };
        // Close it on exec so stdio servers we spawn do not hold our socket open.
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            libc::fcntl(descriptor.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        }
        *slot = Some(descriptor);
    }
    if adopted.unix.is_none() {
        tracing::warn!("systemd passed no listening Unix stream socket; binding our own");
    }
    adopted
}

/// The address family of `descriptor` when it is a listening stream socket: a socket unit
/// with `ListenDatagram=`, `Accept=yes` or a FIFO passes something else, which we must not adopt.
fn listening_stream_domain(descriptor: BorrowedFd<'_>) -> Option<libc::c_int> {
    let option = |name: libc::c_int| -> Option<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `length` bytes into `value`; a descriptor that is
        // not a socket fails with ENOTSOCK.
        let outcome = unsafe {
            libc::getsockopt(
                descriptor.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut length,
            )
        };
        (outcome == 0).then_some(value)
    };
    (option(libc::SO_TYPE) == Some(libc::SOCK_STREAM) && option(libc::SO_ACCEPTCONN) == Some(1))
        .then(|| option(libc::SO_DOMAIN))
        .flatten()
}

/// Whether `descriptor` is a Unix stream socket that is listening.
#[cfg(test)]
fn is_listening_unix_stream(descriptor: BorrowedFd<'_>) -> bool {
    listening_stream_domain(descriptor) == Some(libc::AF_UNIX)
}

/// Sends sd_notify state datagrams to the service manager.
#[derive(Debug)]
pub(crate) struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
}

impl Notifier {
    /// `address` is a path, or `@name` for a socket in the abstract namespace.
    pub(crate) fn connect(address: &std::ffi::OsStr) -> io::Result<Notifier> {
        let bytes = address.as_bytes();
        let address = match bytes.first() {
            Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..])?,
            Some(b'/') => SocketAddr::from_pathname(std::path::Path::new(address))?,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "unsupported NOTIFY_SOCKET address {}",
                        address.to_string_lossy()
                    ),
                ))
            }
        };
        let socket = UnixDatagram::unbound()?;
        // A service manager that stopped reading must never block the daemon.
        socket.set_nonblocking(true)?;
        Ok(Notifier { socket, address })
    }

    /// Sends one datagram of `KEY=value` lines; failures are logged, never fatal.
    pub(crate) fn send(&self, state: &str) {
        if let Err(error) = self.socket.send_to_addr(state.as_bytes(), &self.address) {
            tracing::debug!(%error, state, "cannot notify the service manager");
        }
    }

    pub(crate) fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    pub(crate) fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// Reloading starts; newer systemd wants the monotonic time with it to pair it with READY=1.
    pub(crate) fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC={}",
            monotonic_microseconds()
        ));
    }

    pub(crate) fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=shutting down");
    }

    pub(crate) fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
}

/// A STATUS value is one line of the datagram, so newlines inside it would start new keys.
fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

fn monotonic_microseconds() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
    }
    (now.tv_sec as u64) * 1_000_000 + (now.tv_nsec as u64) / 1_000
}

/// Whether stderr is the journal stream systemd named in `JOURNAL_STREAM` ("device:inode").
/// Checking the descriptor, not just the variable, keeps a child of a service that inherited
/// the variable but writes to a terminal from dropping its timestamps.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((device, inode)) = value.to_str().and_then(|value| value.split_once(':')) else {
        return false;
    };
    let (Ok(device), Ok(inode)) = (device.parse::<u64>(), inode.parse::<u64>()) else {
        return false;
    };
    // SAFETY: fstat writes into the zeroed struct we pass; fd 2 may be closed, which fails cleanly.
    let mut metadata: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(2, &mut metadata) } != 0 {
        return false;
    }
    metadata.st_dev == device && metadata.st_ino == inode
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn notifies_an_abstract_socket() {
        let name = format!("mcp-mirror-notify-test-{}", std::process::id());
        let receiver = UnixDatagram::bind_addr(
            &SocketAddr::from_abstract_name(name.as_bytes()).expect("name"),
        )
        .expect("bind");
        let notifier =
            Notifier::connect(std::ffi::OsStr::new(&format!("@{name}"))).expect("connect");
        notifier.ready("2 servers\nsecond line");
        let mut buffer = [0u8; 256];
        let length = receiver.recv(&mut buffer).expect("datagram");
        assert_eq!(&buffer[..length], b"READY=1\nSTATUS=2 servers second line");
    }

    #[test]
    fn adopts_only_a_listening_unix_stream_socket() {
        let directory = tempfile::tempdir().expect("temp dir");
        let listener =
            std::os::unix::net::UnixListener::bind(directory.path().join("s")).expect("bind");
        assert!(is_listening_unix_stream(listener.as_fd()));
        let connected =
            std::os::unix::net::UnixStream::connect(directory.path().join("s")).expect("connect");
        assert!(!is_listening_unix_stream(connected.as_fd()));
        let datagram = UnixDatagram::unbound().expect("datagram");
        assert!(!is_listening_unix_stream(datagram.as_fd()));
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp");
        assert!(!is_listening_unix_stream(tcp.as_fd()));
        assert_eq!(listening_stream_domain(tcp.as_fd()), Some(libc::AF_INET));
        let connected =
            std::net::TcpStream::connect(tcp.local_addr().expect("address")).expect("connect");
        assert_eq!(listening_stream_domain(connected.as_fd()), None);
        let file = std::fs::File::create(directory.path().join("f")).expect("file");
        assert!(!is_listening_unix_stream(file.as_fd()));
    }

    #[test]
    fn ignores_variables_meant_for_another_process() {
        let variables = |name: &str| match name {
            "WATCHDOG_USEC" => Some(OsString::from("4000000")),
            "WATCHDOG_PID" => Some(OsString::from("1")),
            "LISTEN_FDS" => Some(OsString::from("1")),
            "LISTEN_PID" => Some(OsString::from("1")),
            _ => None,
        };
        let environment = ServiceEnvironment::from_variables(&variables, 4242);
        assert!(environment.watchdog_interval.is_none());
        assert!(environment.listener.is_none());
        assert!(environment.http_listener.is_none());
        assert!(environment.notifier.is_none());
        let ours = |name: &str| match name {
            "WATCHDOG_USEC" => Some(OsString::from("4000000")),
            _ => None,
        };
        let environment = ServiceEnvironment::from_variables(&ours, 4242);
        assert_eq!(environment.watchdog_interval, Some(Duration::from_secs(4)));
    }
}

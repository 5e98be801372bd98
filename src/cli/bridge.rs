//! The stdio bridge: stdin lines go to the socket, socket lines to stdout, so an MCP client
//! that launches stdio servers can use the mirror as one server.

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::ClientError;

/// Copies both ways until either side closes. Messages pass as bytes: the daemon parses them
/// with the protocol's types, and the MCP client gets exactly what the daemon sent.
pub fn bridge(socket: &Path) -> Result<(), ClientError> {
    let unreachable = |reason: String| ClientError::Unreachable {
        path: socket.to_path_buf(),
        reason,
    };
    let stream = UnixStream::connect(socket).map_err(|error| unreachable(error.to_string()))?;
    let mut to_daemon = stream
        .try_clone()
        .map_err(|error| unreachable(error.to_string()))?;
    // The daemon reads lines, so bytes can go over as they come; closing stdin closes our
    // half of the socket, and the daemon then ends the connection, which ends the copy below.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_daemon);
        let _ = to_daemon.shutdown(Shutdown::Write);
    });
    let mut from_daemon = BufReader::new(stream);
    let mut stdout = std::io::stdout().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = from_daemon
            .read_until(b'\n', &mut line)
            .map_err(|error| unreachable(format!("connection lost: {error}")))?;
        if read == 0 {
            return Ok(());
        }
        // Each message is flushed whole, so the client never waits on a buffered line.
        if stdout
            .write_all(&line)
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Ok(());
        }
    }
}

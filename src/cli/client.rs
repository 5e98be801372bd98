//! A connection to the daemon's socket: typed requests, answers and notifications.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ClientError;
use crate::protocol::{Method, Request, ServerMessage};

pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            path: path.to_path_buf(),
            reason,
        };
        let stream = UnixStream::connect(path).map_err(|error| unreachable(error.to_string()))?;
        let writer = stream
            .try_clone()
            .map_err(|error| unreachable(error.to_string()))?;
        Ok(Client {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
            next_id: 0,
        })
    }

    fn lost(&self, error: std::io::Error) -> ClientError {
        ClientError::Unreachable {
            path: self.path.clone(),
            reason: format!("connection lost: {error}"),
        }
    }

    /// Sends one request of method `M` and waits for its answer; `timeout` bounds the wait.
    pub fn call<M: Method>(
        &mut self,
        params: &M::Params,
        timeout: Option<Duration>,
    ) -> Result<M::Result, ClientError> {
        self.next_id += 1;
        let request = Request::new::<M>(self.next_id, params);
        let mut line = serde_json::to_vec(&request)
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .map_err(|error| self.lost(error))?;
        self.set_timeout(timeout)?;
        // Notifications may come before the answer; requests are answered in order.
        let answer = loop {
            let message = self.next_message()?;
            if !message.is_notification() {
                break message;
            }
        };
        if let Some(error) = answer.error {
            return Err(ClientError::Remote {
                code: error.code,
                message: error.message,
                data: error.data,
            });
        }
        let Some(result) = answer.result else {
            return Err(ClientError::Protocol(format!(
                "the daemon answered {} with neither a result nor an error",
                M::NAME
            )));
        };
        serde_json::from_value(result).map_err(|error| {
            ClientError::Protocol(format!(
                "the daemon's answer to {} has an unexpected shape: {error}",
                M::NAME
            ))
        })
    }

    /// Bounds how long reading the next message may wait; `None` waits for ever.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .map_err(|error| self.lost(error))
    }

    /// The next message the daemon sends, answer or notification.
    pub fn next_message(&mut self) -> Result<ServerMessage, ClientError> {
        let mut line = String::new();
        let read = self
            .reader
            .read_line(&mut line)
            .map_err(|error| ClientError::Unreachable {
                path: self.path.clone(),
                reason: format!("connection lost: {error}"),
            })?;
        if read == 0 {
            return Err(ClientError::Unreachable {
                path: self.path.clone(),
                reason: "the daemon closed the connection".into(),
            });
        }
        serde_json::from_str(&line).map_err(|error| {
            ClientError::Protocol(format!("the daemon sent an invalid message: {error}"))
        })
    }
}

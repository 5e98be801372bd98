//! How talking to NATS fails (`NatsError`), said for the status line of the server or the publisher.

/// Why talking to NATS failed, said for the status line of the server (or the publisher).
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    #[error("cannot read the NATS credentials file {path}: {reason}")]
    Credentials { path: String, reason: String },
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("JetStream bucket {bucket}: {reason}")]
    Bucket { bucket: String, reason: String },
}

//! The daemon: `run_with` (`run.rs`) wires config, store, supervisor and socket together, reloads on
//! request and stops in order; `health` the self-probe and the health loop, `socket_file` the
//! socket file it bound.

mod health;
mod run;
mod socket_file;

pub use run::{log_config_warnings, run_with, ControlEvent};

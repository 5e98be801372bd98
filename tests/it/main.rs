//! The one integration-test binary: real daemon, real MCP servers, real SQLite, real socket.

mod support;

mod bridge;
mod cli;
mod client_commands;
mod config;
mod crash;
mod endpoint;
mod faults;
mod interop;
mod live;
mod search;
mod secrets;
mod service;
mod socket;
mod walk;

//! The one integration-test binary: real daemon, real MCP servers, real SQLite, real socket.

mod support;

mod cli;
mod config;
mod crash;
mod faults;
mod interop;
mod live;
mod service;
mod socket;
mod walk;

//! The one integration-test binary: real daemon, real MCP servers, real SQLite, real socket.

mod install;
mod support;

mod bridge;
mod cli;
mod client_commands;
mod config;
mod conformance;
mod crash;
mod database;
mod endpoint;
mod era;
mod faults;
mod interop;
mod live;
mod liveness;
mod search;
mod secrets;
mod service;
mod sizes;
mod socket;
mod throttle;
mod walk;

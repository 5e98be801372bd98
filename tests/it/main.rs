//! The one integration-test binary: real daemon, real MCP servers, real SQLite, real socket.

mod install;
mod support;

mod bounds;
mod bridge;
mod cli;
mod cli_truth;
mod client_commands;
mod config;
mod conformance;
mod crash;
mod database;
mod endpoint;
mod era;
mod faults;
mod fleet;
mod http_bounds;
mod http_face;
mod interop;
mod kinds_notify;
mod live;
mod liveness;
mod pid1;
mod scope;
mod search;
mod search_index;
mod search_paging;
mod secrets;
mod semantic;
mod service;
mod sizes;
mod socket;
mod templates;
mod throttle;
mod tools;
mod walk;

//! Transports. Each turns its wire into [`protocol`](crate::protocol) requests, authenticates
//! the caller, and calls the [`Daemon`](crate::daemon::Daemon). No transport touches a device.
#![forbid(unsafe_code)]

mod dispatch;
pub mod https;
pub mod inprocess;
mod lines;
pub mod mcp;
pub mod mdns;
mod outbound;
pub mod tls;
pub mod unix;
mod websocket;

pub use unix::{RolePolicy, ServerError, UnixServer, UnixServerConfig};

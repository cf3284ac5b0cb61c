//! tether: firmware for an appliance that lets AI agents and people drive a real iPhone.
//!
//! The appliance presents itself to the phone as a USB HID gadget (keyboard, consumer keys,
//! absolute pointer), captures the phone's screen over HDMI, and runs one daemon that decides
//! who may touch the phone. With no hardware, the same daemon drives a virtual iPhone (the sim).
//!
//! Data flows one way: [`device`] → [`daemon`] → [`server`]. Transports never touch a device;
//! the daemon never knows which transport a caller came from, only its
//! [`Caller`](daemon::Caller).
//!
//! - [`protocol`]: the tether/1 wire types, limits and error codes shared by every transport.
//! - [`device`]: the phone as the appliance sees it (HID reports, video frames, the sim).
//! - [`daemon`]: the single execution point: identities, input serialization, status.
//! - [`server`]: transports: the Unix control socket (SO_PEERCRED), HTTPS (REST, `/api/ws`,
//!   `/api/video`, MCP at `/mcp`, the console) and mDNS announcements.
//! - [`tools`]: the one catalog of phone tools the CLI verbs and MCP share, and their runner.
//! - [`board`]: what each supported board has (UDC, capture, codecs), from `board/*/board.toml`.
//! - [`sync`]: the plain-mutex helper (a poisoned lock is recovered, never a panic).
//! - [`client`]: the remote side used by the CLI.
//! - [`config`]: the one typed configuration struct (TOML + flags).
//! - [`logtext`]: client-supplied text capped and escaped before it reaches a log.
//! - [`report`]: a finished task as an HTML report and JUnit XML (pure renderers).

pub mod board;
pub mod client;
pub mod config;
pub mod daemon;
pub mod device;
pub mod logtext;
pub mod protocol;
pub mod report;
pub mod server;
pub mod sync;
pub mod tools;

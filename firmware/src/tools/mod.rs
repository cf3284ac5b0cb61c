//! The tools agents and people use to drive the phone: one catalog ([`catalog`]) from
//! which MCP's `tools/list` and the CLI verbs are generated, and one [`runner`] that turns a
//! tool call into tether/1 calls on any [`runner::Backend`] (the daemon in-process, its
//! control socket, or its HTTPS API). Nothing here touches a device.

pub mod catalog;
pub mod runner;

pub use catalog::{ToolDef, TOOLS};
pub use runner::{Backend, NoScreenshot, Runner, ToolCode, ToolError, ToolOutput};

//! End-to-end tests of tether over the virtual iPhone.
//!
//! The helpers here start a real daemon with its control socket in-process (or the `tether`
//! binary as a child) and talk tether/1 to it exactly as an outside client would.

pub mod harness;

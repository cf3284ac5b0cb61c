//! Client-supplied text on its way into a log.
//!
//! The journal is read by people and kept on a small disk: text a client chose (a `Host`
//! header, a path, a client or task name, a close reason) goes into a log line only through
//! [`capped`], which keeps its first [`MAX_LOGGED_CHARS`] characters, notes the full
//! length, and escapes control characters, so one request can neither fill the journal
//! nor forge a line of its own. Request bodies and secrets (tokens, session ids) are not
//! logged at all.

use std::fmt::{self, Write};

/// The most characters of one client-supplied string that reach a log line.
pub const MAX_LOGGED_CHARS: usize = 128;

/// `text` as it may appear in a log line (see the module docs): at most
/// [`MAX_LOGGED_CHARS`] characters, then `…` and the full length in bytes.
pub fn capped(text: &str) -> Capped<'_> {
    Capped(text)
}

/// A client-supplied string, displayed capped and escaped; made by [`capped`].
#[derive(Debug, Clone, Copy)]
pub struct Capped<'a>(&'a str);

impl fmt::Display for Capped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.0.chars();
        for c in chars.by_ref().take(MAX_LOGGED_CHARS) {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        if chars.next().is_some() {
            write!(f, "… ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_as_is() {
        assert_eq!(capped("box.local:8443").to_string(), "box.local:8443");
        assert_eq!(capped("").to_string(), "");
        let exactly = "é".repeat(MAX_LOGGED_CHARS);
        assert_eq!(capped(&exactly).to_string(), exactly, "characters are counted, not bytes");
    }

    #[test]
    fn long_text_is_cut_with_an_ellipsis_and_its_length() {
        let huge = "x".repeat(900_000);
        let shown = capped(&huge).to_string();
        assert_eq!(shown, format!("{}… (900000 bytes)", "x".repeat(MAX_LOGGED_CHARS)));
        assert!(shown.len() < 2 * MAX_LOGGED_CHARS);
    }

    #[test]
    fn control_characters_cannot_start_a_line_of_their_own() {
        let forged = capped("a\nINFO tether: logged in\r\u{1b}[2J");
        assert_eq!(forged.to_string(), "a\\nINFO tether: logged in\\r\\u{1b}[2J");
    }
}

//! The tool catalog: every tool's name, parameters and help, written once. MCP's
//! `tools/list` (JSON Schema) and the CLI verbs (`tether tap X Y`) are both generated from
//! it, so a tool an agent sees is a command a person can type, with the same words.

use serde_json::{json, Map, Value};

use crate::protocol::host_params::MAX_MESSAGES_WAIT_MS;
use crate::protocol::params::{MAX_EDGE_LIMIT, QUIET_MS_RANGE, WAIT_MS_RANGE};
use crate::protocol::Method;

/// What one parameter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A number (pixels, fractions).
    Number,
    /// A whole number (milliseconds, sequence numbers) in `min..=max`, the range the
    /// daemon accepts (the schema says it, so a client can check before it asks).
    Integer {
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// Text.
    Text,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// A path of 2–128 points `{x, y}` (CLI: `X,Y` words).
    Points,
    /// 2–6 key names (CLI: words).
    Keys,
    /// Yes or no (CLI: a flag, `--name`).
    Flag,
    /// A rectangle `{x, y, width, height}` of pixels (CLI: `X,Y,W,H`).
    Region,
}

/// One parameter of a tool.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Its name (MCP argument; CLI `--name-with-dashes`, or a positional when required).
    pub name: &'static str,
    /// What it holds.
    pub kind: ParamKind,
    /// Whether the tool needs it (required parameters are the CLI's positionals, in order).
    pub required: bool,
    /// What it means, for a model and a person.
    pub about: &'static str,
}

/// One tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolDef {
    /// The MCP tool name (snake_case).
    pub name: &'static str,
    /// The CLI verb (`None`: not a verb, because the CLI has its own command for it).
    pub verb: Option<&'static str>,
    /// The tether/1 method it calls: a caller sees the tool only if the role table lets it
    /// call this method (`hello`'s `capabilities.methods`).
    pub method: Method,
    /// Whether it only looks (never moves the phone).
    pub read_only: bool,
    /// Whether it exists only inside a task (for the task's agent).
    pub in_task: bool,
    /// What it does, for a model (first sentence: the CLI's one-line help).
    pub about: &'static str,
    /// Its parameters.
    pub params: &'static [Param],
}

const fn p(name: &'static str, kind: ParamKind, required: bool, about: &'static str) -> Param {
    Param { name, kind, required, about }
}

const X: Param = p("x", ParamKind::Number, true, "X in pixels of the screenshot acted on (0 = left edge).");
const Y: Param = p("y", ParamKind::Number, true, "Y in pixels of the screenshot acted on (0 = top edge).");
const OBSERVATION: Param = p(
    "observation_id",
    ParamKind::Text,
    false,
    "The screenshot the coordinates refer to. Omit it to use the latest screenshot of this session \
     (the CLI takes a fresh one).",
);
const OPERATION: Param = p(
    "operation_id",
    ParamKind::Text,
    false,
    "An idempotency key: retrying with the same key and arguments returns the first result \
     instead of acting twice. Omit it for a fresh one.",
);
const EXPECT: Param = p(
    "expect",
    ParamKind::Choice(&["change", "any", "no_change"]),
    false,
    "What the action should do to the screen: change (default for taps, keys and typing; \
     nothing changing within the timeout is the error NO_VISIBLE_EFFECT), any (default for \
     drags, and for home, app_switcher and back, which succeed with changed false when the \
     phone is already there), or no_change.",
);
const RETURN_IMAGE: Param = p(
    "return_image",
    ParamKind::Choice(&["none", "region", "full"]),
    false,
    "A picture with the answer: none (default), region (what changed) or full (the screen).",
);
const EXPECT_TEXT: Param = p(
    "expect_text",
    ParamKind::Text,
    false,
    "Once the screen settles, this text must be on it (read on the appliance, case ignored), else the error is \
     EXPECTED_TEXT_MISSING (the input was sent): a check that the action did what you meant.",
);
const EXPECT_NO_TEXT: Param = p(
    "expect_no_text",
    ParamKind::Text,
    false,
    "Once the screen settles, this text must not be on it, else the error is UNEXPECTED_TEXT (e.g. \"Error\").",
);
const TEXT_QUERY: Param =
    p("text", ParamKind::Text, true, "The text as the screen shows it, e.g. \"Sign in\" (one line).");
const TEXT_MATCH: Param = p(
    "match",
    ParamKind::Choice(&["ignore_case", "exact", "fuzzy", "regex"]),
    false,
    "How to compare: ignore_case (default: case and punctuation around the words ignored), exact, fuzzy \
     (tolerates misread letters, see threshold) or regex (searched in each line).",
);
const TEXT_THRESHOLD: Param =
    p("threshold", ParamKind::Number, false, "Fuzzy only: the lowest similarity, 0.5..1 (default 0.8).");
const TEXT_REGION: Param = p(
    "region",
    ParamKind::Region,
    false,
    "Only text centred in this rectangle {x, y, width, height}, in pixels of the screenshot read.",
);
const TEXT_OBSERVATION: Param = p(
    "observation_id",
    ParamKind::Text,
    false,
    "Read this screenshot instead of a fresh one (its text is kept with it; one taken without text is read \
     only while it still shows the screen).",
);
/// No upper bound but the journal's own (sequence numbers are `i64`).
const UNBOUNDED: u64 = i64::MAX as u64;
const WAIT_MS: ParamKind = ParamKind::Integer { min: *WAIT_MS_RANGE.start(), max: *WAIT_MS_RANGE.end() };
const QUIET_MS: ParamKind = ParamKind::Integer { min: *QUIET_MS_RANGE.start(), max: *QUIET_MS_RANGE.end() };
const DURATION: Param = p(
    "duration_ms",
    ParamKind::Integer { min: 100, max: 5000 },
    false,
    "How long the gesture takes, 100..5000 ms (default about 700).",
);

/// Every tool, in the order `tools/list` shows them.
pub const TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "screenshot",
        verb: Some("screenshot"),
        method: Method::Screenshot,
        read_only: true,
        in_task: false,
        about: "Take a screenshot of the iPhone's screen. Coordinates for tap, swipe and the other \
                pointer tools are pixels of this image; its observation id is in the text.",
        params: &[
            p(
                "max_edge",
                ParamKind::Integer { min: 64, max: MAX_EDGE_LIMIT as u64 },
                false,
                "Longest edge of the image in pixels, 64..4096 (default 1568).",
            ),
            p(
                "text",
                ParamKind::Flag,
                false,
                "Also read the text on the screen: the answer lists every line with its box in this image's \
                 pixels, so you can find what to tap without looking at the picture.",
            ),
        ],
    },
    ToolDef {
        name: "find_text",
        verb: Some("find-text"),
        method: Method::FindText,
        read_only: true,
        in_task: false,
        about: "Find a text on the screen, read on the appliance (OCR): each match with its box and centre in \
                pixels of a fresh screenshot (or of observation_id's), best first; when none matches, the \
                nearest texts the screen shows. Use it to locate labels, buttons and messages instead of \
                estimating coordinates from the picture.",
        params: &[TEXT_QUERY, TEXT_MATCH, TEXT_THRESHOLD, TEXT_REGION, TEXT_OBSERVATION],
    },
    ToolDef {
        name: "tap_text",
        verb: Some("tap-text"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Tap a text on the screen, found by reading it on the appliance: no coordinates needed. Prefer \
                it to tap for anything with a label (buttons, rows, links, tabs). Verified like tap. Several \
                equally good matches: AMBIGUOUS_TEXT with the candidates (pass index or region); none: \
                TEXT_NOT_FOUND with the nearest texts on the screen. Nothing is tapped then.",
        params: &[
            TEXT_QUERY,
            TEXT_MATCH,
            TEXT_THRESHOLD,
            TEXT_REGION,
            p(
                "index",
                ParamKind::Integer { min: 0, max: 49 },
                false,
                "Which of several equally good matches, 0..49, in reading order (top to bottom, left to right).",
            ),
            p(
                "min_confidence",
                ParamKind::Number,
                false,
                "The lowest OCR confidence (0..100, default 60) a match is tapped with; a weaker one is \
                 TEXT_NOT_FOUND with text_search.uncertain (icons read as letters are weak).",
            ),
            TEXT_OBSERVATION,
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "wait_for_text",
        verb: Some("wait-for-text"),
        method: Method::WaitForText,
        read_only: true,
        in_task: false,
        about: "Wait until a text appears on the screen (or, with gone, is gone), reading each new picture, up \
                to the timeout: after starting something slow (a page load, a download, a message). The answer \
                says whether it happened, where the text is, and has a fresh observation.",
        params: &[
            TEXT_QUERY,
            TEXT_MATCH,
            TEXT_THRESHOLD,
            TEXT_REGION,
            p("gone", ParamKind::Flag, false, "Wait until the text is no longer on the screen instead."),
            p("timeout_ms", WAIT_MS, false, "How long to wait, 0..30000 ms (default 5000)."),
        ],
    },
    ToolDef {
        name: "tap",
        verb: Some("tap"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Tap a point on the screen.",
        params: &[X, Y, OBSERVATION, OPERATION, EXPECT, EXPECT_TEXT, EXPECT_NO_TEXT, RETURN_IMAGE],
    },
    ToolDef {
        name: "double_tap",
        verb: Some("double-tap"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Double-tap a point on the screen.",
        params: &[X, Y, OBSERVATION, OPERATION, EXPECT, EXPECT_TEXT, EXPECT_NO_TEXT, RETURN_IMAGE],
    },
    ToolDef {
        name: "long_press",
        verb: Some("long-press"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Press and hold a point for 1.5 s (context menus, rearranging icons).",
        params: &[X, Y, OBSERVATION, OPERATION, EXPECT, EXPECT_TEXT, EXPECT_NO_TEXT, RETURN_IMAGE],
    },
    ToolDef {
        name: "swipe",
        verb: Some("swipe"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Swipe in a straight line from one point to another.",
        params: &[
            p("from_x", ParamKind::Number, true, "Start X."),
            p("from_y", ParamKind::Number, true, "Start Y."),
            p("to_x", ParamKind::Number, true, "End X."),
            p("to_y", ParamKind::Number, true, "End Y."),
            DURATION,
            OBSERVATION,
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "drag",
        verb: Some("drag"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Press, move along a path of points, and release (sliders, drawing, moving things).",
        params: &[
            p("path", ParamKind::Points, true, "2 to 128 points {x, y} in pixels of the screenshot acted on."),
            DURATION,
            OBSERVATION,
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "scroll",
        verb: Some("scroll"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Scroll to reveal more content in a direction (done by dragging, as a finger would).",
        params: &[
            p("direction", ParamKind::Choice(&["up", "down", "left", "right"]), true, "Which content to reveal: down shows what is below."),
            p("amount", ParamKind::Number, false, "How far, in screenshot pixels (default a third of the screen)."),
            p("x", ParamKind::Number, false, "Where to start (default the middle of the screen)."),
            p("y", ParamKind::Number, false, "Where to start (default the middle of the screen)."),
            OBSERVATION,
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "type_text",
        verb: Some("type"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Type text into the focused field with the phone's keyboard layout (tap the field first). \
                Characters the layout cannot type are refused before anything is typed.",
        params: &[
            p("text", ParamKind::Text, true, "The text, at most 16 KiB."),
            p(
                "newlines",
                ParamKind::Choice(&["refuse", "return"]),
                false,
                "What a line break in the text does: refuse (default: nothing is typed and the error is \
                 TEXT_HAS_NEWLINE, since Return ends editing in a single-line field and the rest would be lost) \
                 or return (each line break, \\r\\n counted once, is pressed as Return: for multi-line fields).",
            ),
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "press_key",
        verb: Some("press"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Press one key: enter, tab, escape, backspace, delete, space, up, down, left, right, f1..f12, or a character.",
        params: &[
            p("key", ParamKind::Text, true, "The key's name or a single character."),
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "hotkey",
        verb: Some("hotkey"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Press modifier keys with one key, e.g. [\"cmd\", \"h\"] (cmd, ctrl, alt/option, shift).",
        params: &[
            p("keys", ParamKind::Keys, true, "2 to 6 key names: modifiers first, then the key."),
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "home",
        verb: Some("home"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Go to the home screen.",
        params: &[OPERATION, EXPECT, EXPECT_TEXT, EXPECT_NO_TEXT, RETURN_IMAGE],
    },
    ToolDef {
        name: "app_switcher",
        verb: Some("app-switcher"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Show the app switcher.",
        params: &[OPERATION, EXPECT, EXPECT_TEXT, EXPECT_NO_TEXT, RETURN_IMAGE],
    },
    ToolDef {
        name: "open_app",
        verb: Some("open"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Open an app by name through Spotlight (as you would type it in Spotlight). When no app \
                of that name comes to the front the error is APP_NOT_OPENED and the phone is left on the \
                home screen.",
        params: &[
            p("name", ParamKind::Text, true, "The app's name, e.g. Settings."),
            OPERATION,
            EXPECT,
            EXPECT_TEXT,
            EXPECT_NO_TEXT,
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "back",
        verb: Some("back"),
        method: Method::Action,
        read_only: false,
        in_task: false,
        about: "Go back (Cmd+[), like the back button at the top left of many apps.",
        params: &[OPERATION, EXPECT, EXPECT_TEXT, EXPECT_NO_TEXT, RETURN_IMAGE],
    },
    ToolDef {
        name: "wait_for_change",
        verb: Some("wait-for-change"),
        method: Method::WaitForChange,
        read_only: true,
        in_task: false,
        about: "Wait until the screen differs from the latest screenshot or action result (a page \
                loads, a message arrives), then until it settles, or until the timeout passes. The \
                answer has a fresh observation for the next action.",
        params: &[
            p("timeout_ms", WAIT_MS, false, "How long to wait for a change, 0..30000 ms (default 5000)."),
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "wait_for_settle",
        verb: Some("wait-for-settle"),
        method: Method::WaitForSettle,
        read_only: true,
        in_task: false,
        about: "Wait until the screen stops changing (animations end, a spinner goes away). \
                Actions already wait for this; use it after something you did not do.",
        params: &[
            p("timeout_ms", WAIT_MS, false, "Longest wait, 0..30000 ms (default 3000)."),
            p("quiet_ms", QUIET_MS, false, "Settled after this long without a change, 50..5000 ms (default 300)."),
            RETURN_IMAGE,
        ],
    },
    ToolDef {
        name: "status",
        verb: None,
        method: Method::Status,
        read_only: true,
        in_task: false,
        about: "The appliance's state: whether the phone is connected, the screen's size, and the \
                running task (paused, taken over by a human, waiting for an answer).",
        params: &[],
    },
    ToolDef {
        name: "confirm",
        verb: Some("confirm"),
        method: Method::TaskConfirm,
        read_only: false,
        in_task: true,
        about: "Ask the human watching this task a yes/no question and wait for the answer \
                (only inside a task). Ask before anything irreversible.",
        params: &[p("question", ParamKind::Text, true, "The question, for a person.")],
    },
    ToolDef {
        name: "messages",
        verb: Some("messages"),
        method: Method::TaskMessages,
        read_only: true,
        in_task: true,
        about: "Read what humans sent to this task (only inside a task).",
        params: &[
            p("after_seq", ParamKind::Integer { min: 0, max: UNBOUNDED }, false, "Only messages after this seq (the last one you read)."),
            p("wait_ms", ParamKind::Integer { min: 0, max: MAX_MESSAGES_WAIT_MS }, false, "Wait up to this long for one, 0..30000 ms (default 0)."),
        ],
    },
];

/// The tool named `name`.
pub fn tool(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The tool whose CLI verb is `verb`.
pub fn verb(verb: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.verb == Some(verb))
}

impl ParamKind {
    fn schema(self) -> Value {
        match self {
            ParamKind::Number => json!({"type": "number"}),
            ParamKind::Integer { min, max } if max >= UNBOUNDED => json!({"type": "integer", "minimum": min}),
            ParamKind::Integer { min, max } => json!({"type": "integer", "minimum": min, "maximum": max}),
            ParamKind::Text => json!({"type": "string"}),
            ParamKind::Choice(words) => json!({"type": "string", "enum": words}),
            ParamKind::Points => json!({
                "type": "array",
                "minItems": 2,
                "maxItems": 128,
                "items": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x", "y"],
                    "additionalProperties": false,
                },
            }),
            ParamKind::Keys => json!({"type": "array", "minItems": 2, "maxItems": 6, "items": {"type": "string"}}),
            ParamKind::Flag => json!({"type": "boolean"}),
            ParamKind::Region => json!({
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": 0},
                    "y": {"type": "integer", "minimum": 0},
                    "width": {"type": "integer", "minimum": 1},
                    "height": {"type": "integer", "minimum": 1},
                },
                "required": ["x", "y", "width", "height"],
                "additionalProperties": false,
            }),
        }
    }
}

impl ToolDef {
    /// The JSON Schema of the tool's arguments (an object; unknown arguments refused).
    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        for param in self.params {
            let mut schema = param.kind.schema();
            if let Value::Object(o) = &mut schema {
                o.insert("description".into(), param.about.into());
            }
            properties.insert(param.name.into(), schema);
        }
        let required: Vec<&str> = self.params.iter().filter(|p| p.required).map(|p| p.name).collect();
        let mut schema = Map::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            schema.insert("required".into(), json!(required));
        }
        schema.insert("additionalProperties".into(), false.into());
        schema
    }

    /// Whether the tool takes coordinates (pixels of a screenshot).
    pub fn points(&self) -> bool {
        self.params.iter().any(|p| matches!(p.name, "x" | "path" | "from_x"))
    }

    /// The MCP description: `about`, and for a tool that takes coordinates which picture
    /// they are pixels of (an MCP session remembers its latest screenshot; the CLI says
    /// what it does instead, see `cli::verbs`).
    pub fn mcp_description(&self) -> String {
        let mut text = self.about.to_string();
        if self.points() {
            text.push_str(" Coordinates are pixels of the latest screenshot (or of `observation_id`'s).");
        }
        text
    }

    /// The first sentence of `about`: the CLI's one-line help.
    pub fn summary(&self) -> &'static str {
        let about: &'static str = self.about;
        match about.find(". ") {
            Some(end) => &about[..=end],
            None => about,
        }
    }

    /// Checks `args` against the parameters: unknown names, missing required ones and
    /// wrong kinds are refused with a message naming the parameter.
    pub fn check_args(&self, args: &Map<String, Value>) -> Result<(), String> {
        for name in args.keys() {
            if !self.params.iter().any(|p| p.name == name) {
                let known: Vec<&str> = self.params.iter().map(|p| p.name).collect();
                return Err(format!("{} takes no argument `{name}` (it takes: {})", self.name, known.join(", ")));
            }
        }
        for param in self.params {
            match args.get(param.name) {
                None | Some(Value::Null) if param.required => {
                    return Err(format!("{} needs `{}`: {}", self.name, param.name, param.about))
                }
                None | Some(Value::Null) => {}
                Some(v) if !param.kind.accepts(v) => {
                    return Err(format!("`{}` of {} must be {}", param.name, self.name, param.kind.describe()))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl ParamKind {
    fn accepts(self, v: &Value) -> bool {
        match self {
            ParamKind::Number => v.is_number(),
            ParamKind::Integer { min, max } => v.as_u64().is_some_and(|n| (min..=max).contains(&n)),
            ParamKind::Text => v.is_string(),
            ParamKind::Choice(words) => v.as_str().is_some_and(|s| words.contains(&s)),
            ParamKind::Points => v.as_array().is_some_and(|a| {
                (2..=128).contains(&a.len())
                    && a.iter().all(|pt| {
                        pt.get("x").is_some_and(Value::is_number) && pt.get("y").is_some_and(Value::is_number)
                    })
            }),
            ParamKind::Keys => {
                v.as_array().is_some_and(|a| (2..=6).contains(&a.len()) && a.iter().all(Value::is_string))
            }
            ParamKind::Flag => v.is_boolean(),
            ParamKind::Region => v.as_object().is_some_and(|o| {
                o.len() == 4
                    && ["x", "y", "width", "height"].iter().all(|k| o.get(*k).and_then(Value::as_u64).is_some())
                    && o.get("width").and_then(Value::as_u64) != Some(0)
                    && o.get("height").and_then(Value::as_u64) != Some(0)
            }),
        }
    }

    /// What a value of this kind looks like, for error messages.
    pub fn describe(self) -> String {
        match self {
            ParamKind::Number => "a number".into(),
            ParamKind::Integer { min, max } if max >= UNBOUNDED => format!("a whole number ≥ {min}"),
            ParamKind::Integer { min, max } => format!("a whole number {min}..{max}"),
            ParamKind::Text => "a string".into(),
            ParamKind::Choice(words) => format!("one of {}", words.join(", ")),
            ParamKind::Points => "2 to 128 points {x, y}".into(),
            ParamKind::Keys => "2 to 6 key names".into(),
            ParamKind::Flag => "true or false".into(),
            ParamKind::Region => "a rectangle {x, y, width, height} of whole pixels (width and height > 0)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_whole_number_range_in_a_description_is_the_schemas() {
        let mut ranged = 0;
        for tool in TOOLS {
            let schema = tool.input_schema();
            for param in tool.params {
                let ParamKind::Integer { min, max } = param.kind else { continue };
                let prop = &schema["properties"][param.name];
                assert_eq!(prop["minimum"], json!(min), "{}.{}", tool.name, param.name);
                // The description's "A..B" is the range the schema states.
                let Some(range) = param.about.split_whitespace().find(|w| w.contains("..")) else { continue };
                let range = range.trim_end_matches([',', '.']);
                let (a, b) = range.split_once("..").unwrap();
                assert_eq!(
                    (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()),
                    (min, max),
                    "{}.{}",
                    tool.name,
                    param.name
                );
                assert_eq!(prop["maximum"], json!(max), "{}.{}", tool.name, param.name);
                ranged += 1;
            }
        }
        assert!(ranged >= 6, "the ranged parameters were found ({ranged})");
        let shot = tool("screenshot").unwrap().input_schema();
        assert_eq!(shot["properties"]["max_edge"]["minimum"], json!(64));
        assert_eq!(shot["properties"]["max_edge"]["maximum"], json!(4096));
        let mut args = Map::new();
        args.insert("max_edge".into(), json!(10));
        let refused = tool("screenshot").unwrap().check_args(&args).unwrap_err();
        assert!(refused.contains("64..4096"), "{refused}");
    }

    #[test]
    fn a_pointer_tool_says_which_picture_its_coordinates_are_pixels_of() {
        let tap = tool("tap").unwrap();
        assert!(tap.mcp_description().contains("latest screenshot"));
        assert!(!tap.about.contains("latest"), "the CLI's help has no latest screenshot: {}", tap.about);
        assert!(!tool("home").unwrap().mcp_description().contains("Coordinates"));
    }

    #[test]
    fn names_and_verbs_are_unique_and_schemas_list_every_required_param() {
        let mut names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len());
        let mut verbs: Vec<&str> = TOOLS.iter().filter_map(|t| t.verb).collect();
        let n = verbs.len();
        verbs.sort_unstable();
        verbs.dedup();
        assert_eq!(verbs.len(), n);
        let tap = tool("tap").unwrap();
        let schema = tap.input_schema();
        assert_eq!(schema["required"], json!(["x", "y"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["x"]["type"], "number");
        assert!(tool("home").unwrap().input_schema().get("required").is_none());
        assert_eq!(verb("type").unwrap().name, "type_text");
        assert_eq!(tap.summary(), "Tap a point on the screen.");
        assert!(tool("screenshot").unwrap().summary().ends_with("screen."));
    }

    #[test]
    fn arguments_are_checked_by_name_and_kind() {
        let tap = tool("tap").unwrap();
        let ok = json!({"x": 10, "y": 20.5});
        assert!(tap.check_args(ok.as_object().unwrap()).is_ok());
        let err = tap.check_args(json!({"x": 1}).as_object().unwrap()).unwrap_err();
        assert!(err.contains("needs `y`"), "{err}");
        let err = tap.check_args(json!({"x": 1, "y": 2, "z": 3}).as_object().unwrap()).unwrap_err();
        assert!(err.contains("no argument `z`"), "{err}");
        let err = tap.check_args(json!({"x": "1", "y": 2}).as_object().unwrap()).unwrap_err();
        assert!(err.contains("must be a number"), "{err}");
        let scroll = tool("scroll").unwrap();
        assert!(scroll.check_args(json!({"direction": "sideways"}).as_object().unwrap()).is_err());
        let drag = tool("drag").unwrap();
        assert!(drag.check_args(json!({"path": [{"x": 1, "y": 2}]}).as_object().unwrap()).is_err());
        assert!(drag.check_args(json!({"path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}).as_object().unwrap()).is_ok());
        let hotkey = tool("hotkey").unwrap();
        assert!(hotkey.check_args(json!({"keys": ["cmd"]}).as_object().unwrap()).is_err());
    }
}

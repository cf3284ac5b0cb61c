//! The tool catalog as CLI verbs: `tether screenshot -o shot.png`, `tether tap 200 410`,
//! `tether type "hello"`, … — the same tools, parameters and help an agent gets over MCP,
//! for people and shell scripts, on the appliance (control socket) or with `--url`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Arg, ArgAction, ArgMatches, Command};
use serde_json::{Map, Value};
use tether::client::backends::SocketBackend;
use tether::client::https::HttpsClient;
use tether::tools::catalog::{ParamKind, ToolDef, TOOLS};
use tether::tools::{Backend, NoScreenshot, Runner, ToolError};

use super::remote::{Endpoint, RemoteArgs};

/// `wait-for-change`'s exit status when the timeout passed with no change: scripts must tell
/// "it changed" from "it did not" (`timeout(1)` uses the same number for the same case).
pub const NO_CHANGE_STATUS: u8 = 124;

/// Where a verb's calls go.
enum CliBackend {
    Socket(SocketBackend),
    Remote(HttpsClient),
}

impl Backend for CliBackend {
    async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, ToolError> {
        match self {
            CliBackend::Socket(s) => s.call(method, params).await,
            CliBackend::Remote(h) => Backend::call(h, method, params).await,
        }
    }
}

fn flag_name(param: &str) -> String {
    param.replace('_', "-")
}

/// One clap command per catalog tool that has a verb.
pub fn commands() -> Vec<Command> {
    TOOLS.iter().filter_map(|t| t.verb.map(|v| command(t, v))).collect()
}

fn command(tool: &ToolDef, verb: &'static str) -> Command {
    let mut cmd = Command::new(verb).about(tool.summary()).long_about(long_about(tool));
    for param in tool.params {
        let help = param.about;
        let arg = if param.required {
            let mut a = Arg::new(param.name).value_name(param.name.to_uppercase()).required(true).help(help);
            match param.kind {
                ParamKind::Points => a = a.num_args(2..=128).value_name("X,Y"),
                ParamKind::Keys => a = a.num_args(2..=6).value_name("KEY"),
                ParamKind::Choice(words) => a = a.value_parser(clap::builder::PossibleValuesParser::new(words)),
                ParamKind::Number => a = a.allow_negative_numbers(true),
                _ => {}
            }
            a
        } else {
            let mut a = Arg::new(param.name).long(flag_name(param.name)).value_name("VALUE").help(help);
            match param.kind {
                ParamKind::Choice(words) => a = a.value_parser(clap::builder::PossibleValuesParser::new(words)),
                ParamKind::Flag => a = a.action(ArgAction::SetTrue).value_name(None::<&str>),
                ParamKind::Region => a = a.value_name("X,Y,W,H"),
                _ => {}
            }
            a
        };
        cmd = cmd.arg(arg);
    }
    if tool.name == "screenshot" {
        cmd = cmd.arg(
            Arg::new("output")
                .short('o')
                .long("output")
                .value_name("FILE.png")
                .value_parser(clap::value_parser!(PathBuf))
                .help("Where to write the PNG (default screenshot.png)."),
        );
    }
    cmd.arg(
        Arg::new("socket")
            .long("socket")
            .value_name("PATH")
            .env("TETHER_SOCKET")
            .value_parser(clap::value_parser!(PathBuf))
            .help("Control socket (on the appliance)."),
    )
    .arg(
        Arg::new("url")
            .long("url")
            .value_name("URL")
            .env("TETHER_URL")
            .help("An appliance's URL (https://host:port): go over HTTPS; `tether login` stores its token."),
    )
    .arg(
        Arg::new("fingerprint")
            .long("fingerprint")
            .value_name("SHA256")
            .env("TETHER_FINGERPRINT")
            .help("The CA fingerprint to pin, when the URL was not stored by `tether login`."),
    )
    .arg(Arg::new("json").long("json").action(ArgAction::SetTrue).help("Print the daemon's result as JSON."))
}

fn long_about(tool: &ToolDef) -> String {
    let mut text = tool.about.to_string();
    if tool.points() {
        // Each CLI run is a new process: there is no "latest" screenshot to refer to.
        text.push_str(
            "\n\nCoordinates are pixels of a screenshot at the default size (what `tether screenshot` \
             writes): of the one --observation-id names, or else of a fresh one this command takes first.",
        );
    }
    if tool.name == "wait_for_text" {
        text.push_str(&format!(
            "\n\nExit status: 0 when the text appeared (or, with --gone, went), {NO_CHANGE_STATUS} (as timeout(1)) \
             when it did not before the timeout, 1 on an error."
        ));
    }
    if tool.name == "wait_for_change" {
        text.push_str(&format!(
            "\n\nExit status: 0 when the screen changed, {NO_CHANGE_STATUS} (as timeout(1)) when nothing changed \
             before the timeout, 1 on an error."
        ));
    }
    text.push_str("\n\nThe same tool is `");
    text.push_str(tool.name);
    text.push_str("` over MCP (`tether mcp`).");
    text
}

/// The JSON arguments of `tool` from the command line.
fn arguments(tool: &ToolDef, m: &ArgMatches) -> anyhow::Result<Map<String, Value>> {
    let mut args = Map::new();
    for param in tool.params {
        if param.kind == ParamKind::Flag {
            // A flag is a bool to clap (asking for strings would panic).
            if m.get_flag(param.name) {
                args.insert(param.name.into(), Value::Bool(true));
            }
            continue;
        }
        let values: Vec<&String> = match m.get_many::<String>(param.name) {
            Some(v) => v.collect(),
            None => continue,
        };
        let one = || values.first().map(|s| s.as_str()).unwrap_or_default();
        let name = param.name;
        let value = match param.kind {
            ParamKind::Number => {
                Value::from(one().parse::<f64>().with_context(|| format!("{name} must be a number, not {:?}", one()))?)
            }
            ParamKind::Integer { .. } => Value::from(
                one().parse::<u64>().with_context(|| format!("{name} must be a whole number, not {:?}", one()))?,
            ),
            ParamKind::Text | ParamKind::Choice(_) => Value::from(one()),
            ParamKind::Keys => Value::from(values.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            ParamKind::Flag => Value::Bool(true),
            ParamKind::Region => {
                let parts: Vec<&str> = one().split(',').map(str::trim).collect();
                let numbers: Result<Vec<u32>, _> = parts.iter().map(|p| p.parse::<u32>()).collect();
                match numbers.ok().filter(|n| n.len() == 4 && n[2] > 0 && n[3] > 0) {
                    Some(n) => serde_json::json!({"x": n[0], "y": n[1], "width": n[2], "height": n[3]}),
                    None => bail!("{name} is X,Y,W,H in whole pixels of the screenshot (got {:?})", one()),
                }
            }
            ParamKind::Points => {
                let mut points = Vec::new();
                for v in &values {
                    let Some((x, y)) = v.split_once(',') else { bail!("{name}: each point is X,Y (got {v:?})") };
                    let (x, y): (f64, f64) = (
                        x.trim().parse().with_context(|| format!("{name}: {v:?} is not X,Y"))?,
                        y.trim().parse().with_context(|| format!("{name}: {v:?} is not X,Y"))?,
                    );
                    points.push(serde_json::json!({"x": x, "y": y}));
                }
                Value::from(points)
            }
        };
        args.insert(name.into(), value);
    }
    Ok(args)
}

/// Runs the verb `tool` with its parsed command line.
pub fn run(tool: &'static ToolDef, m: &ArgMatches) -> anyhow::Result<ExitCode> {
    let args = arguments(tool, m)?;
    let remote = RemoteArgs {
        url: m.get_one::<String>("url").cloned(),
        fingerprint: m.get_one::<String>("fingerprint").cloned(),
    };
    let json = m.get_flag("json");
    let output = m.try_get_one::<PathBuf>("output").ok().flatten().cloned();
    let endpoint = Endpoint::resolve(m.get_one::<PathBuf>("socket").cloned(), &remote)?;
    super::client_runtime()?.block_on(async move {
        let backend = match endpoint {
            Endpoint::Socket(path) => {
                let task_token = std::env::var(super::task::ENV_TOKEN).ok().filter(|t| !t.is_empty());
                CliBackend::Socket(SocketBackend::connect(&path, task_token).await?)
            }
            Endpoint::Remote(client) => CliBackend::Remote(client),
        };
        let runner = Runner::new(backend, NoScreenshot::TakeOne);
        match runner.run(tool, args).await {
            Ok(out) => {
                if let Some((_, data)) = &out.image {
                    use base64::Engine;
                    let png = base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .context("the screenshot is not base64")?;
                    let path = output.unwrap_or_else(|| PathBuf::from("screenshot.png"));
                    std::fs::write(&path, png).with_context(|| format!("write {}", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                if json {
                    println!("{}", serde_json::to_string_pretty(&out.result)?);
                } else {
                    println!("{}", out.text);
                }
                Ok(exit_status(tool, &out.result))
            }
            Err(e) => {
                eprintln!("tether {}: {}: {}\n{}", tool.verb.unwrap_or(tool.name), e.code, e.message, e.next_step());
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// A verb's exit status after a successful call: `wait-for-change` that saw no change
/// answers [`NO_CHANGE_STATUS`].
fn exit_status(tool: &ToolDef, result: &Value) -> ExitCode {
    if (tool.name == "wait_for_change" && result["changed"] != Value::Bool(true))
        || (tool.name == "wait_for_text" && result["satisfied"] != Value::Bool(true))
    {
        ExitCode::from(NO_CHANGE_STATUS)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether::tools::catalog::tool;

    #[test]
    fn wait_for_change_tells_no_change_apart_and_says_so_in_its_help() {
        let wait = tool("wait_for_change").expect("in the catalog");
        let changed = serde_json::json!({"changed": true});
        let unchanged = serde_json::json!({"changed": false});
        assert_eq!(exit_status(wait, &changed), ExitCode::SUCCESS);
        assert_eq!(exit_status(wait, &unchanged), ExitCode::from(NO_CHANGE_STATUS));
        let settle = tool("wait_for_settle").expect("in the catalog");
        assert_eq!(exit_status(settle, &unchanged), ExitCode::SUCCESS, "only wait-for-change");
        assert!(long_about(wait).contains("124"), "{}", long_about(wait));
    }
}

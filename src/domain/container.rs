//! A task's `containerSettings`: the image its command runs in, the `docker create` options
//! Azure passes through (those that keep the container inside its node), where the command
//! starts, and the registry to pull the image from when the engine lacks it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A task's containerSettings, as Azure's bodies carry them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerSettings {
    pub image_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_run_options: Option<String>,
    /// `taskWorkingDirectory` (the default) or `containerImageDefault`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<ContainerRegistry>,
    /// Azure's `containerHostBatchBindMounts` (Windows and newer API versions): refused when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_host_batch_bind_mounts: Option<Value>,
}

/// A private registry and its credentials, passed to the engine when it pulls an image.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerRegistry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_reference: Option<Value>,
}

/// What `containerRunOptions` asks for, of the options this server carries out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub entrypoint: Option<String>,
    pub read_only: bool,
    pub nano_cpus: Option<i64>,
    pub memory_bytes: Option<i64>,
}

/// The longest containerRunOptions accepted: `docker create` options, not a script.
pub const MAX_RUN_OPTIONS: usize = 4096;

/// Where the command starts: the task's working directory, or the image's own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WorkingDirectory {
    Task,
    Image,
}

/// The options that would reach outside the node (host paths, devices, namespaces,
/// privileges) or that this server decides itself, with why each is refused.
const REFUSED: &[(&str, &str)] = &[
    ("--privileged", "a task container never gets privileges"),
    ("--cap-add", "a task container never gets privileges"),
    ("--security-opt", "a task container never gets privileges"),
    ("--device", "a task container reaches no host device"),
    (
        "-v",
        "a task container mounts only its node's directories, as Azure mounts them",
    ),
    (
        "--volume",
        "a task container mounts only its node's directories, as Azure mounts them",
    ),
    (
        "--mount",
        "a task container mounts only its node's directories, as Azure mounts them",
    ),
    (
        "--volumes-from",
        "a task container mounts only its node's directories, as Azure mounts them",
    ),
    ("--network", "a task container shares its node's network"),
    ("--net", "a task container shares its node's network"),
    ("-p", "a task container shares its node's network"),
    ("--publish", "a task container shares its node's network"),
    ("--pid", "a task container shares its node's processes"),
    ("--ipc", "a task container stays in its node"),
    ("--uts", "a task container stays in its node"),
    ("--userns", "a task container stays in its node"),
    (
        "--cgroup-parent",
        "a task container stays inside its node's limits",
    ),
    (
        "-u",
        "a task's command runs as the node's task user, which writes the task directory",
    ),
    (
        "--user",
        "a task's command runs as the node's task user, which writes the task directory",
    ),
    ("--name", "this server names task containers"),
];

impl ContainerSettings {
    /// Checks the settings; `at` names them in errors (`containerSettings`). Err: (property,
    /// value, why).
    pub fn check(&self, at: &str) -> Result<(), (String, String, String)> {
        let image = self.image_name.trim();
        if image.is_empty()
            || image.chars().any(|c| c.is_whitespace() || c.is_control())
            || image.len() > 512
        {
            return Err((
                format!("{at}.imageName"),
                self.image_name.clone(),
                "not a Docker image reference".into(),
            ));
        }
        self.working_directory().map_err(|why| {
            (
                format!("{at}.workingDirectory"),
                self.working_directory.clone().unwrap_or_default(),
                why,
            )
        })?;
        if let Some(options) = &self.container_run_options {
            parse_run_options(options)
                .map_err(|why| (format!("{at}.containerRunOptions"), options.clone(), why))?;
        }
        if self
            .container_host_batch_bind_mounts
            .as_ref()
            .is_some_and(|v| !v.is_null())
        {
            return Err((
                format!("{at}.containerHostBatchBindMounts"),
                String::new(),
                "not supported by this server: the node's whole root directory is mounted, as on Azure's Linux nodes".into(),
            ));
        }
        if let Some(r) = &self.registry {
            if r.identity_reference.as_ref().is_some_and(|v| !v.is_null()) {
                return Err((
                    format!("{at}.registry.identityReference"),
                    String::new(),
                    "not supported by this server: managed identities (give userName and password)"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    pub fn working_directory(&self) -> Result<WorkingDirectory, String> {
        match self.working_directory.as_deref() {
            None | Some("taskWorkingDirectory") => Ok(WorkingDirectory::Task),
            Some("containerImageDefault") => Ok(WorkingDirectory::Image),
            Some(_) => Err("must be taskWorkingDirectory or containerImageDefault".into()),
        }
    }

    /// The checked run options (none when they do not parse, which `check` refused at add).
    pub fn run_options(&self) -> RunOptions {
        self.container_run_options
            .as_deref()
            .and_then(|o| parse_run_options(o).ok())
            .unwrap_or_default()
    }
}

/// Parses `docker create` options: those this server carries out, or an error naming the one
/// it refuses and why.
pub fn parse_run_options(text: &str) -> Result<RunOptions, String> {
    if text.len() > MAX_RUN_OPTIONS {
        return Err(format!("longer than {MAX_RUN_OPTIONS} characters"));
    }
    let words = split_words(text)?;
    let mut options = RunOptions::default();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (word.clone(), None),
        };
        if let Some((_, why)) = REFUSED.iter().find(|(o, _)| *o == name) {
            return Err(format!("the option {name} is not supported: {why}"));
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| words.next())
                .ok_or_else(|| format!("the option {name} needs a value"))
        };
        match name.as_str() {
            "--rm" => {}
            "--read-only" => options.read_only = true,
            "-e" | "--env" => {
                let v = value()?;
                let (k, v) = v
                    .split_once('=')
                    .ok_or_else(|| format!("{name} {v}: give NAME=VALUE"))?;
                if k.is_empty() {
                    return Err(format!("{name}: the variable has no name"));
                }
                options.env.push((k.to_string(), v.to_string()));
            }
            "-w" | "--workdir" => options.workdir = Some(absolute(&name, value()?)?),
            "--entrypoint" => options.entrypoint = Some(value()?),
            "--cpus" => options.nano_cpus = Some(cpus(&value()?)?),
            "-m" | "--memory" => options.memory_bytes = Some(bytes(&value()?)?),
            other => {
                return Err(format!(
                    "the option {other} is not supported (this server carries out --rm, --read-only, -e/--env, -w/--workdir, --entrypoint, --cpus and -m/--memory)"
                ))
            }
        }
    }
    Ok(options)
}

fn absolute(name: &str, dir: String) -> Result<String, String> {
    if dir.starts_with('/') {
        Ok(dir)
    } else {
        Err(format!("{name} {dir}: give an absolute path"))
    }
}

fn cpus(text: &str) -> Result<i64, String> {
    match text.parse::<f64>() {
        Ok(c) if c > 0.0 && c <= 4096.0 => Ok((c * 1e9) as i64),
        _ => Err(format!("--cpus {text}: give a number of CPUs above 0")),
    }
}

/// A memory size as Docker writes it: a number with an optional b, k, m or g.
fn bytes(text: &str) -> Result<i64, String> {
    let lower = text.to_ascii_lowercase();
    let (digits, unit) = match lower.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let scale: i64 = match unit {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return Err(format!("--memory {text}: give a size such as 512m or 2g")),
    };
    digits
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|n| *n >= 6 << 20)
        .ok_or_else(|| format!("--memory {text}: give a size of at least 6m, such as 512m or 2g"))
}

/// Splits options into words as a shell would: blanks separate, quotes group, a backslash
/// escapes the next character (outside single quotes).
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let (mut words, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a single quote is not closed".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => {
                            word.push(chars.next().ok_or("a double quote is not closed")?)
                        }
                        Some(c) => word.push(c),
                        None => return Err("a double quote is not closed".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next().ok_or("a backslash ends the options")?);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// A pool's containerConfiguration, from its virtualMachineConfiguration: the images its
/// nodes make ready and the registries to pull them from. None: the pool runs no containers.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolContainers {
    #[serde(default)]
    pub container_image_names: Vec<String>,
    #[serde(default)]
    pub container_registries: Vec<ContainerRegistry>,
}

impl PoolContainers {
    pub fn of(vm_config: Option<&Value>) -> Option<PoolContainers> {
        let raw = vm_config?.get("containerConfiguration")?;
        if raw.is_null() {
            return None;
        }
        Some(serde_json::from_value(raw.clone()).unwrap_or_default())
    }
}

/// Quotes a word for `/bin/sh`.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The shell command a container task runs, as Azure runs it with `docker create IMAGE
/// COMMANDLINE`: the image's entrypoint (or `--entrypoint`) with the command line after it, and
/// with an empty command line, the image's own command.
pub fn container_command(
    command_line: &str,
    entrypoint: &[String],
    image_cmd: &[String],
) -> String {
    let quoted = |words: &[String]| {
        words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let args = if command_line.trim().is_empty() {
        quoted(image_cmd)
    } else {
        command_line.to_string()
    };
    if entrypoint.is_empty() {
        args
    } else {
        format!("{} {args}", quoted(entrypoint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_options_carry_out_the_safe_ones() {
        let o = parse_run_options(
            "--rm -e A=1 --env='B=two words' -w /app --read-only --cpus 0.5 -m 64m",
        )
        .unwrap();
        assert_eq!(
            o.env,
            vec![("A".into(), "1".into()), ("B".into(), "two words".into())]
        );
        assert_eq!(o.workdir.as_deref(), Some("/app"));
        assert!(o.read_only);
        assert_eq!(o.nano_cpus, Some(500_000_000));
        assert_eq!(o.memory_bytes, Some(64 << 20));
        assert_eq!(parse_run_options("").unwrap(), RunOptions::default());
    }

    #[test]
    fn run_options_that_leave_the_node_are_refused_by_name() {
        for bad in [
            "--privileged",
            "-v /:/host",
            "--volume=/etc:/x",
            "--network host",
            "--pid=host",
            "--user 0",
            "--gpus all",
        ] {
            let why = parse_run_options(bad).unwrap_err();
            let name = bad.split([' ', '=']).next().unwrap();
            assert!(why.contains(name), "{bad}: {why}");
        }
        assert!(parse_run_options("-e")
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse_run_options("-w rel")
            .unwrap_err()
            .contains("absolute"));
        assert!(parse_run_options("-m 1k").is_err());
        assert!(parse_run_options("-e 'A=1")
            .unwrap_err()
            .contains("not closed"));
        assert!(parse_run_options(&"x".repeat(MAX_RUN_OPTIONS + 1)).is_err());
    }

    #[test]
    fn the_command_follows_the_entrypoint_as_docker_create_puts_it() {
        let ep = vec!["python".to_string(), "-u".into()];
        let cmd = vec!["app.py".to_string()];
        assert_eq!(container_command("echo hi", &[], &cmd), "echo hi");
        assert_eq!(container_command("", &[], &cmd), "'app.py'");
        assert_eq!(
            container_command("x.py 1", &ep, &cmd),
            "'python' '-u' x.py 1"
        );
        assert_eq!(container_command(" ", &ep, &cmd), "'python' '-u' 'app.py'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}

//! The CLI's side of the Batch API: where the server is and whose key signs (flags, the
//! environment, a profile file), requests signed with Shared Key as the Azure SDKs sign them,
//! and the server's errors turned into one line.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::domain::signing::{signature, string_to_sign};

/// Where the server is and who signs, as a command line gives them.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientArgs {
    /// The server's URL [env: BATCH_URL, AZURE_BATCH_ENDPOINT; profile: url]
    /// [default: http://127.0.0.1:8080].
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// The Batch account [env: BATCH_ACCOUNT, AZURE_BATCH_ACCOUNT; profile: account]
    /// [default: batchpool].
    #[arg(long, global = true)]
    pub account: Option<String>,
    /// The account's key, base64 [env: BATCH_KEY, AZURE_BATCH_ACCESS_KEY; profile: key, or
    /// key-file: a file holding it].
    #[arg(long, global = true, hide_env_values = true)]
    pub key: Option<String>,
    /// A profile file of `name = value` lines (url, account, key, key-file)
    /// [env: BATCHPOOL_PROFILE] [default: ~/.config/batchpool/profile, if it exists].
    #[arg(long, global = true)]
    pub profile: Option<PathBuf>,
    /// `table` for people, `json` for programs.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Output {
    #[default]
    Table,
    Json,
}

/// What went wrong, as one line.
#[derive(Debug)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type CliResult<T> = Result<T, CliError>;

pub fn fail<T>(message: impl Into<String>) -> CliResult<T> {
    Err(CliError(message.into()))
}

/// A signed connection to one server and account.
pub struct Client {
    base: String,
    account: String,
    key: String,
    http: reqwest::Client,
    /// For answers that last as long as what they follow: no limit on the whole.
    streams: reqwest::Client,
    pub output: Output,
}

/// The first of a flag, environment variables and a profile entry that is set.
fn pick(
    flag: &Option<String>,
    vars: &[&str],
    profile: &[(String, String)],
    name: &str,
) -> Option<String> {
    flag.clone()
        .or_else(|| {
            vars.iter()
                .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        })
        .or_else(|| {
            profile
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
}

/// A profile's `name = value` lines (`#` starts a comment).
fn read_profile(args: &ClientArgs) -> CliResult<Vec<(String, String)>> {
    let given = args
        .profile
        .clone()
        .or_else(|| std::env::var_os("BATCHPOOL_PROFILE").map(PathBuf::from));
    let path = match &given {
        Some(path) => path.clone(),
        None => {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
            match config.map(|c| c.join("batchpool/profile")) {
                Some(path) if path.exists() => path,
                _ => return Ok(Vec::new()),
            }
        }
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError(format!("cannot read the profile {}: {e}", path.display())))?;
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return fail(format!(
                "{}:{}: expected `name = value`",
                path.display(),
                n + 1
            ));
        };
        let value = value.trim().trim_matches('"').to_string();
        entries.push((name.trim().to_string(), value));
    }
    Ok(entries)
}

impl Client {
    pub fn new(args: &ClientArgs) -> CliResult<Client> {
        let profile = read_profile(args)?;
        let base = pick(
            &args.url,
            &["BATCH_URL", "AZURE_BATCH_ENDPOINT"],
            &profile,
            "url",
        )
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_string());
        let account = pick(
            &args.account,
            &["BATCH_ACCOUNT", "AZURE_BATCH_ACCOUNT"],
            &profile,
            "account",
        )
        .unwrap_or_else(|| "batchpool".to_string());
        let key = match pick(&args.key, &["BATCH_KEY", "AZURE_BATCH_ACCESS_KEY"], &profile, "key") {
            Some(key) => key,
            None => match profile.iter().find(|(k, _)| k == "key-file") {
                Some((_, file)) => std::fs::read_to_string(file)
                    .map_err(|e| CliError(format!("cannot read the key file {file}: {e}")))?
                    .trim()
                    .to_string(),
                None => return fail(
                    "no account key: set BATCH_KEY (e.g. export BATCH_KEY=$(cat /var/lib/batchpool/batchpool.key)), pass --key, or write a profile",
                ),
            },
        };
        if signature(&key, "").is_none() {
            return fail("the account key is not base64");
        }
        let base = base.trim_end_matches('/').to_string();
        if reqwest::Url::parse(&base).is_err() {
            return fail(format!("the server URL {base:?} is not a URL"));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CliError(format!("cannot make an HTTP client: {e}")))?;
        let streams = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| CliError(format!("cannot make an HTTP client: {e}")))?;
        Ok(Client {
            base,
            account,
            key,
            http,
            streams,
            output: args.output,
        })
    }

    /// Sends a signed request; the body, if any, is JSON.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
    ) -> CliResult<reqwest::Response> {
        self.send_on(&self.http, method, path_and_query, body, headers)
            .await
    }

    /// A signed GET whose answer streams for as long as the server writes it.
    pub async fn get_stream(&self, path_and_query: &str) -> CliResult<reqwest::Response> {
        self.send_on(&self.streams, Method::GET, path_and_query, None, &[])
            .await
    }

    async fn send_on(
        &self,
        http: &reqwest::Client,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
    ) -> CliResult<reqwest::Response> {
        let url = format!("{}{path_and_query}", self.base);
        let mut builder = http.request(method, &url);
        for (name, value) in headers {
            builder = builder.header(*name, value);
        }
        if let Some(body) = body {
            builder = builder
                .header("content-type", "application/json; odata=minimalmetadata")
                .body(body.to_string());
        }
        let mut request = builder
            .build()
            .map_err(|e| CliError(format!("bad request {url}: {e}")))?;
        sign(&mut request, &self.account, &self.key);
        http.execute(request)
            .await
            .map_err(|e| CliError(format!("cannot reach {}: {e}", self.base)))
    }

    /// A request whose answer must be a success; its JSON body (or null when empty).
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> CliResult<Value> {
        let response = self.send(method, path, body, &[]).await?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| CliError(format!("reading the answer to {path}: {e}")))?;
        if !status.is_success() {
            return Err(server_error(status, &text));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| CliError(format!("the answer to {path} is not JSON: {e}")))
    }

    pub async fn get(&self, path: &str) -> CliResult<Value> {
        self.call(Method::GET, path, None).await
    }

    /// Every item of a list, following `odata.nextLink`.
    pub async fn list(&self, path: &str) -> CliResult<Vec<Value>> {
        let mut items = Vec::new();
        let mut next = Some(path.to_string());
        while let Some(path) = next.take() {
            let page = self.get(&path).await?;
            if let Some(values) = page["value"].as_array() {
                items.extend(values.iter().cloned());
            }
            if let Some(link) = page["odata.nextLink"].as_str() {
                // The link is absolute, and its base may be the server's public URL.
                let url = reqwest::Url::parse(link)
                    .map_err(|e| CliError(format!("bad odata.nextLink {link:?}: {e}")))?;
                next = Some(url[url::Position::BeforePath..].to_string());
            }
        }
        Ok(items)
    }
}

/// The server's error as one line: its code, its message, the status.
pub fn server_error(status: StatusCode, body: &str) -> CliError {
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let code = parsed["code"].as_str().unwrap_or("");
    let message = parsed["message"]["value"]
        .as_str()
        .or_else(|| parsed["message"].as_str())
        .unwrap_or(body)
        .lines()
        .next()
        .unwrap_or("")
        .trim();
    let mut line = String::new();
    if !code.is_empty() {
        line.push_str(code);
        line.push_str(": ");
    }
    line.push_str(message);
    if message.is_empty() && code.is_empty() {
        line.push_str("the server answered with no error body");
    }
    CliError(format!("{line} (HTTP {})", status.as_u16()))
}

/// Adds `ocp-date`, `Content-Length` and `Authorization: SharedKey account:signature` to a
/// built request, as the Azure SDKs sign.
pub fn sign(request: &mut reqwest::Request, account: &str, key: &str) {
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let headers = request.headers_mut();
    headers.insert(
        "ocp-date",
        date.parse().expect("an HTTP date is a header value"),
    );
    if let Some(len) = request.body().and_then(|b| b.as_bytes()).map(<[u8]>::len) {
        request.headers_mut().insert("content-length", len.into());
    }
    let uri: http::Uri = request.url()[url::Position::BeforePath..]
        .parse()
        .expect("a parsed URL's path and query are a URI");
    let to_sign = string_to_sign(request.method(), &uri, request.headers(), account);
    let signed = signature(key, &to_sign).unwrap_or_default();
    let value = format!("SharedKey {account}:{signed}");
    if let Ok(value) = value.parse() {
        request.headers_mut().insert("authorization", value);
    }
}

/// A path segment, percent-encoded.
pub fn segment(id: &str) -> String {
    url::form_urlencoded::byte_serialize(id.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

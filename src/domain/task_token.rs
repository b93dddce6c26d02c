//! Authentication tokens of tasks (Azure's `authenticationTokenSettings` with access `job`):
//! an attempt of such a task gets one in `AZ_BATCH_AUTHENTICATION_TOKEN`, and the Batch API
//! takes it (`Authorization: Bearer <token>`) for operations on that task's job while that
//! attempt runs. A token names its account, job, task and attempt by their keys, and is signed
//! with the installation's key, so no one can make one for another job or change what it names.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const PREFIX: &str = "bpt1.";
/// Longer tokens are not ours: nothing is decoded or hashed for them.
const MAX_LEN: usize = 512;

/// What a token grants access through: the attempt of a task of a job of an account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskToken {
    pub account: String,
    pub job_pk: i64,
    pub task_pk: i64,
    pub attempt: i32,
}

/// The key tokens are signed with.
#[derive(Clone)]
pub struct TokenKey([u8; 32]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// The key of an installation, from its secret (the operator token): tokens made by any of
    /// its servers are taken by all of them.
    pub fn derive(secret: &str) -> Self {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        mac.update(b"batchpool task tokens v1");
        Self(mac.finalize().into_bytes().into())
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("any key length");
        mac.update(payload.as_bytes());
        mac
    }

    /// The token for `t`.
    pub fn mint(&self, t: &TaskToken) -> String {
        let payload = payload(t);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let sig = b64.encode(self.mac(&payload).finalize().into_bytes());
        format!("{PREFIX}{}.{sig}", b64.encode(payload))
    }

    /// What `token` names, if this key signed it.
    pub fn open(&self, token: &str) -> Option<TaskToken> {
        if token.len() > MAX_LEN {
            return None;
        }
        let (payload, sig) = token.strip_prefix(PREFIX)?.split_once('.')?;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = String::from_utf8(b64.decode(payload).ok()?).ok()?;
        self.mac(&payload)
            .verify_slice(&b64.decode(sig).ok()?)
            .ok()?;
        let mut parts = payload.split('\n');
        let t = TaskToken {
            account: parts.next()?.to_string(),
            job_pk: parts.next()?.parse().ok()?,
            task_pk: parts.next()?.parse().ok()?,
            attempt: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(t)
    }
}

/// What a server gives the attempts of tasks with a token: the token, and where the Batch API
/// is (`AZ_BATCH_ACCOUNT_URL`) if `--public-url` says; if not, the node's agent says it is
/// where the agent reaches the server, which serves tasks the API there.
#[derive(Clone, Debug)]
pub struct Issuer {
    pub key: TokenKey,
    pub account_url: Option<String>,
}

/// The variable of a task's token.
pub const TOKEN_VAR: &str = "AZ_BATCH_AUTHENTICATION_TOKEN";

/// The variable of where the Batch API is, for a task with a token.
pub const URL_VAR: &str = "AZ_BATCH_ACCOUNT_URL";

impl Issuer {
    pub fn new(key: TokenKey, account_url: Option<String>) -> Self {
        Self { key, account_url }
    }

    /// The environment of an attempt that `t` names.
    pub fn env(&self, t: &TaskToken) -> Vec<(String, String)> {
        let url = self.account_url.iter().map(|u| (URL_VAR.into(), u.clone()));
        std::iter::once((TOKEN_VAR.into(), self.key.mint(t)))
            .chain(url)
            .collect()
    }
}

fn payload(t: &TaskToken) -> String {
    format!("{}\n{}\n{}\n{}", t.account, t.job_pk, t.task_pk, t.attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> TaskToken {
        TaskToken {
            account: "acct".into(),
            job_pk: 7,
            task_pk: 42,
            attempt: 2,
        }
    }

    #[test]
    fn a_token_opens_with_its_key_only() {
        let key = TokenKey::derive("secret");
        let minted = key.mint(&token());
        assert_eq!(key.open(&minted), Some(token()));
        assert_eq!(TokenKey::derive("other").open(&minted), None);
    }

    #[test]
    fn a_changed_token_opens_not() {
        let key = TokenKey::derive("secret");
        let minted = key.mint(&token());
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (_, sig) = minted.rsplit_once('.').unwrap();
        let forged = format!("{PREFIX}{}.{sig}", b64.encode("acct\n8\n42\n2"));
        assert_eq!(key.open(&forged), None, "another job, same signature");
        for bad in [
            "",
            "bpt1.",
            "bpt1..",
            "Bearer x",
            &minted[..minted.len() - 1],
        ] {
            assert_eq!(key.open(bad), None, "{bad:?}");
        }
        assert_eq!(key.open(&"a".repeat(10_000)), None);
    }
}

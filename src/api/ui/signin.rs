//! Signing in and out, and the read-only tokens a key's session hands out.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use std::sync::Arc;

use super::html::{document, page, when, Esc, Section};
use super::{digest, new_secret, problem, unavailable, Page, Problem, Ui, COOKIE};
use crate::api::auth::constant_time_eq;
use crate::api::state::AppState;
use crate::api::BaseUrl;
use crate::store;
use crate::store::ui::Session;

/// How long a session lasts.
const SESSION_HOURS: i64 = 12;

/// The fields of a posted form (bounded by the server's body limit).
fn fields(body: &[u8]) -> HashMap<String, String> {
    form_urlencoded::parse(body).into_owned().collect()
}

pub async fn form() -> Response {
    sign_in_page(StatusCode::OK, "", "")
}

fn sign_in_page(status: StatusCode, account: &str, error: &str) -> Response {
    let error = if error.is_empty() {
        String::new()
    } else {
        format!("<p class=\"error\" role=\"alert\">{}</p>", Esc(error))
    };
    let body = format!(
        "<main class=\"narrow\"><h1>batchpool</h1>{error}\
         <form method=\"post\" action=\"/ui/signin\" class=\"signin\">\
         <label>Account <input name=\"account\" value=\"{account}\" required autocomplete=\"username\"></label>\
         <label>Account key or read-only token <input name=\"secret\" type=\"password\" required autocomplete=\"current-password\"></label>\
         <button>Sign in</button></form>\
         <p class=\"hint\">The key opens a session and is not kept by the browser. A read-only token \
         shows everything and changes nothing.</p></main>",
        account = Esc(account),
    );
    (status, document("Sign in", "", &body)).into_response()
}

pub async fn sign_in(
    State(app): State<Arc<AppState>>,
    BaseUrl(base): BaseUrl,
    body: Bytes,
) -> Response {
    let f = fields(&body);
    let account = f.get("account").map(|a| a.trim()).unwrap_or_default();
    let secret = f.get("secret").map(|s| s.trim()).unwrap_or_default();
    if account.is_empty() || account.len() > 64 || secret.is_empty() || secret.len() > 256 {
        return sign_in_page(
            StatusCode::BAD_REQUEST,
            account,
            "Give the account's name and its key or a read-only token.",
        );
    }
    let who = match check(&app, account, secret).await {
        Ok(Some(who)) => who,
        Ok(None) => {
            return sign_in_page(
                StatusCode::UNAUTHORIZED,
                account,
                "That account name and key or token do not match.",
            )
        }
        Err(e) => return unavailable(e).into_response(),
    };
    let id = new_secret();
    let expires = chrono::Utc::now() + chrono::Duration::hours(SESSION_HOURS);
    let opened = async {
        store::ui::drop_expired(&app.db).await?;
        store::ui::open_session(&app.db, &digest(&id), &who.0, who.1, expires).await
    };
    if let Err(e) = opened.await {
        return unavailable(e).into_response();
    }
    let secure = if base.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        SESSION_HOURS * 3600
    );
    let mut response = Redirect::to("/ui/pools").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// Who a name and secret sign in as: the account with a key (changes allowed), or with one of
/// its read-only tokens (and which).
async fn check(
    app: &AppState,
    account: &str,
    secret: &str,
) -> sqlx::Result<Option<(Session, Option<i64>)>> {
    let Some(keys) = store::accounts::get(&app.db, account).await? else {
        return Ok(None);
    };
    let key_matches = constant_time_eq(keys.primary_key.as_bytes(), secret.as_bytes())
        | constant_time_eq(keys.secondary_key.as_bytes(), secret.as_bytes());
    let who = |read_only| Session {
        account: keys.name.clone(),
        read_only,
    };
    if key_matches {
        return Ok(Some((who(false), None)));
    }
    Ok(store::ui::use_token(&app.db, account, &digest(secret))
        .await?
        .map(|pk| (who(true), Some(pk))))
}

/// A form's CSRF field must be the session's.
fn check_form(ui: &Ui, f: &HashMap<String, String>) -> Result<(), Problem> {
    match f.get("csrf") {
        Some(t) if constant_time_eq(t.as_bytes(), ui.s.csrf.as_bytes()) => Ok(()),
        _ => Err(problem(
            StatusCode::FORBIDDEN,
            "Form expired",
            "The form did not come from this session's page; reload the page and try again.",
        )),
    }
}

pub async fn sign_out(ui: Ui, body: Bytes) -> Page {
    check_form(&ui, &fields(&body))?;
    let cookie = format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
    store::ui::close_session(&ui.app.db, &ui.s.digest)
        .await
        .map_err(unavailable)?;
    let mut response = Redirect::to("/ui/signin").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(response)
}

fn key_only(ui: &Ui) -> Result<(), Problem> {
    if ui.s.read_only {
        return Err(problem(
            StatusCode::FORBIDDEN,
            "Key required",
            "Read-only tokens are managed from a session opened with the account key.",
        ));
    }
    Ok(())
}

pub async fn tokens(ui: Ui) -> Page {
    key_only(&ui)?;
    tokens_page(&ui, None).await
}

async fn tokens_page(ui: &Ui, new: Option<(&str, &str)>) -> Page {
    let list = store::ui::tokens(&ui.app.db, &ui.s.account)
        .await
        .map_err(unavailable)?;
    let mut rows = String::new();
    for t in &list {
        rows += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><form method=\"post\" action=\"/ui/tokens/{}/revoke\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button>Revoke</button></form></td></tr>",
            Esc(&t.name),
            when(t.created_at),
            t.last_used.map(when).unwrap_or_else(|| "never".into()),
            t.pk,
            ui.s.csrf,
        );
    }
    let shown = new.map_or(String::new(), |(name, token)| {
        format!(
            "<p class=\"notice\">Token <b>{}</b>, shown this once: <code id=\"new-token\">{}</code></p>",
            Esc(name),
            Esc(token)
        )
    });
    let main = format!(
        "<h1>Read-only tokens</h1>{shown}<p>A read-only token signs in to this dashboard to look, never to change. \
         Revoking it ends the sessions opened with it.</p>\
         <table><thead><tr><th>Name</th><th>Created</th><th>Last used</th><th></th></tr></thead><tbody>{rows}</tbody></table>\
         <form method=\"post\" action=\"/ui/tokens\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <label>Name <input name=\"name\" required maxlength=\"64\"></label><button>Create a read-only token</button></form>",
        ui.s.csrf
    );
    Ok(page(&ui.s, Section::Tokens, "Read-only tokens", 0, &main))
}

pub async fn add_token(ui: Ui, body: Bytes) -> Page {
    key_only(&ui)?;
    let f = fields(&body);
    check_form(&ui, &f)?;
    let name = f.get("name").map(|n| n.trim()).unwrap_or_default();
    if name.is_empty() || name.chars().count() > 64 {
        return Err(problem(
            StatusCode::BAD_REQUEST,
            "Bad name",
            "A token's name is 1 to 64 characters.",
        ));
    }
    let token = format!("bpro_{}", new_secret());
    store::ui::add_token(&ui.app.db, &ui.s.account, name, &digest(&token))
        .await
        .map_err(unavailable)?;
    tokens_page(&ui, Some((name, &token))).await
}

pub async fn revoke_token(ui: Ui, Path(pk): Path<i64>, body: Bytes) -> Page {
    key_only(&ui)?;
    check_form(&ui, &fields(&body))?;
    let revoked = store::ui::revoke_token(&ui.app.db, &ui.s.account, pk)
        .await
        .map_err(unavailable)?;
    if !revoked {
        return Err(problem(
            StatusCode::NOT_FOUND,
            "No such token",
            "This account has no such token.",
        ));
    }
    Ok(Redirect::to("/ui/tokens").into_response())
}

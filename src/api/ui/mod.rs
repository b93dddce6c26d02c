//! The dashboard at `/ui`: server-rendered pages of the signed-in account's pools, jobs, tasks,
//! compute hours and BES jobs, with a small script that refreshes them in place and tails logs.
//!
//! A browser signs in with an account key or a read-only token and gets a session cookie
//! (`HttpOnly`, `SameSite=Strict`); the key never reaches the browser's storage. The pages' script
//! reads and acts through `/ui/api/...`, which is the Batch API itself (its router, entered with
//! the prefix taken off), authenticated by that cookie instead of a Shared Key signature. A change through it must carry the session's CSRF
//! token in `x-csrf-token` and is refused to a read-only session.

mod html;
mod jobs;
mod pools;
mod signin;
mod usage;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use sha2::{Digest, Sha256};
use tower::ServiceExt;

use super::auth::{constant_time_eq, Account};
use super::error::ApiError;
use super::state::AppState;
use crate::store;

/// The cookie that carries a session's id.
const COOKIE: &str = "batchpool_session";

/// The signed-in browser of a request.
#[derive(Clone, Debug)]
pub struct UiSession {
    pub account: String,
    pub read_only: bool,
    /// What a change must carry to show it comes from our own page.
    pub csrf: String,
    /// What the database keeps of the session's id.
    pub digest: Vec<u8>,
}

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    let pages = Router::new()
        .route("/ui/pools", get(pools::list))
        .route("/ui/jobs", get(jobs::list))
        .route("/ui/jobs/{job}", get(jobs::tasks))
        .route("/ui/jobs/{job}/tasks/{task}", get(jobs::task))
        .route("/ui/usage", get(usage::chart))
        .route("/ui/bes", get(usage::bes_jobs))
        .route("/ui/tokens", get(signin::tokens).post(signin::add_token))
        .route("/ui/tokens/{pk}/revoke", post(signin::revoke_token))
        .route("/ui/signout", post(signin::sign_out))
        .route_layer(from_fn_with_state(state.clone(), pages_layer));
    // The Batch API, for the pages' script: built once, entered with the prefix taken off.
    let batch = super::batch::router()
        .layer(DefaultBodyLimit::max(super::guard::MAX_BODY_BYTES))
        .with_state(state);
    let api = move |app: State<Arc<AppState>>, req: Request| api(app, batch.clone(), req);
    Router::new()
        .merge(pages)
        .route(
            "/ui/api/{*path}",
            get(api.clone())
                .post(api.clone())
                .put(api.clone())
                .patch(api.clone())
                .delete(api),
        )
        .route("/ui", get(|| async { Redirect::to("/ui/pools") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/pools") }))
        .route("/ui/signin", get(signin::form).post(signin::sign_in))
        .route("/ui/assets/style.css", get(style))
        .route("/ui/assets/ui.js", get(script))
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", include_str!("style.css"))
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("ui.js"))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    html::secure(([(header::CONTENT_TYPE, kind)], body).into_response())
}

/// SHA-256 of a secret: what the database keeps of session ids and tokens.
fn digest(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// A new secret: 32 random bytes, in hex.
fn new_secret() -> String {
    let bytes = [
        uuid::Uuid::new_v4().into_bytes(),
        uuid::Uuid::new_v4().into_bytes(),
    ];
    bytes.iter().flatten().map(|b| format!("{b:02x}")).collect()
}

fn csrf_of(session_id: &str) -> String {
    let d = Sha256::digest(format!("csrf:{session_id}").as_bytes());
    d[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The session the request's cookie names, if it is live.
async fn session(app: &AppState, headers: &HeaderMap) -> Result<Option<UiSession>, sqlx::Error> {
    let id = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .find(|id| id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()));
    let Some(id) = id else { return Ok(None) };
    let d = digest(id);
    Ok(store::ui::session(&app.db, &d).await?.map(|s| UiSession {
        account: s.account,
        read_only: s.read_only,
        csrf: csrf_of(id),
        digest: d,
    }))
}

/// Pages: a browser with no session is sent to sign in.
async fn pages_layer(State(app): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    match session(&app, req.headers()).await {
        Ok(Some(s)) => {
            req.extensions_mut().insert(Account(s.account.clone()));
            req.extensions_mut().insert(s);
            next.run(req).await
        }
        Ok(None) => Redirect::to("/ui/signin").into_response(),
        Err(e) => unavailable(e).into_response(),
    }
}

/// The API under `/ui/api`: the Batch API as the session's account, a change only with the
/// session's CSRF token and only from a session opened with a key.
async fn api(State(app): State<Arc<AppState>>, batch: Router, req: Request) -> Response {
    let s = match session(&app, req.headers()).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "AuthenticationFailed",
                "The dashboard session is missing or has ended; sign in at /ui/signin.",
            )
            .into_response()
        }
        Err(e) => return ApiError::internal(e).into_response(),
    };
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        if let Err(refused) = may_change(&s, req.headers()) {
            return refused.into_response();
        }
    }
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().strip_prefix("/ui/api").unwrap_or("/");
    let target = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    // The path came in as a valid URI; without its prefix it still is one.
    parts.uri = target.parse().unwrap_or_default();
    // A fresh start for the Batch router: the outer route's path parameter must not reach its
    // handlers (axum adds a router's parameters to those already there), so the request carries
    // only its account; the body limit is the inner router's own layer.
    parts.extensions = axum::http::Extensions::new();
    parts.extensions.insert(Account(s.account));
    match batch.oneshot(Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn may_change(s: &UiSession, headers: &HeaderMap) -> Result<(), ApiError> {
    if s.read_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "ReadOnlySession",
            "This dashboard session was opened with a read-only token; sign in with the account key to make changes.",
        ));
    }
    let token = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
    if token.is_some_and(|t| constant_time_eq(t.as_bytes(), s.csrf.as_bytes())) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "CsrfTokenMismatch",
        "A change through the dashboard must carry the page's x-csrf-token header.",
    ))
}

/// What a page handler works with: the app and the signed-in session.
pub struct Ui {
    app: Arc<AppState>,
    s: UiSession,
}

impl Ui {
    /// The API's context of the session's account, for what the pages share with the API.
    fn ctx(&self) -> super::Ctx {
        super::Ctx {
            app: self.app.clone(),
            account: self.s.account.clone(),
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Ui {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, Response> {
        let s = parts.extensions.get::<UiSession>().cloned();
        let s = s.ok_or_else(|| Redirect::to("/ui/signin").into_response())?;
        Ok(Ui {
            app: app.clone(),
            s,
        })
    }
}

/// A page or the page that says why there is none.
type Page = Result<Response, Problem>;

/// What went wrong, shown as a page with its status.
pub struct Problem {
    status: StatusCode,
    title: &'static str,
    message: String,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = format!(
            "<main class=\"narrow\"><h1>{}</h1><p>{}</p><p><a href=\"/ui\">Back to the dashboard</a></p></main>",
            html::Esc(self.title),
            html::Esc(&self.message)
        );
        (self.status, html::document(self.title, "", &body)).into_response()
    }
}

fn problem(status: StatusCode, title: &'static str, message: impl Into<String>) -> Problem {
    Problem {
        status,
        title,
        message: message.into(),
    }
}

fn unavailable(e: sqlx::Error) -> Problem {
    tracing::error!(error = %e, "dashboard: database");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "Database unavailable",
        "The server could not read its database; try again shortly.",
    )
}

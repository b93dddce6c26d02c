//! The OData options of a request: a list's `$filter`, `$select`, `maxresults` and `$skiptoken`
//! with its `odata.nextLink` paging, and a single GET's `$select`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;
use super::odata;

/// A list request's OData options: `$filter`, `$select`, `maxresults`, `$skiptoken`.
pub struct ListQuery {
    pub max_results: usize,
    pub skip_token: Option<String>,
    filter: Option<odata::Filter>,
    filter_text: Option<String>,
    select: Option<Vec<String>>,
    select_text: Option<String>,
    api_version: Option<String>,
    /// Options of the list's own that its `odata.nextLink` carries on (a file list's `recursive`).
    carried: Vec<(&'static str, String)>,
}

/// How many rows one request may scan for a filtered page before it answers with what it has
/// (and a link to go on): a rare filter over a million tasks must not hold one request.
const MAX_SCAN_CHUNKS: usize = 20;

impl ListQuery {
    pub fn from_query(
        query: &std::collections::HashMap<String, String>,
        filterable: &[&str],
    ) -> Result<Self, ApiError> {
        let max_results = match query.get("maxresults") {
            None => 1000,
            Some(v) => match v.parse::<usize>() {
                Ok(n) if (1..=1000).contains(&n) => n,
                _ => {
                    return Err(ApiError::invalid_query(
                        "maxresults",
                        v,
                        "must be a whole number from 1 to 1000",
                    ))
                }
            },
        };
        let filter_text = query
            .get("$filter")
            .filter(|f| !f.trim().is_empty())
            .cloned();
        let filter = filter_text
            .as_deref()
            .map(|f| odata::Filter::parse(f, filterable))
            .transpose()?;
        let select_text = query.get("$select").cloned();
        Ok(Self {
            max_results,
            skip_token: query.get("$skiptoken").cloned(),
            filter,
            filter_text,
            select: odata::parse_select(select_text.as_deref()),
            select_text,
            api_version: query.get("api-version").cloned(),
            carried: Vec::new(),
        })
    }

    /// Carries `name`, when the request has it, into the `odata.nextLink` of each page, so the
    /// next page is of the same list.
    pub fn carrying(
        mut self,
        query: &std::collections::HashMap<String, String>,
        name: &'static str,
    ) -> Self {
        if let Some(value) = query.get(name) {
            self.carried.push((name, value.clone()));
        }
        self
    }

    pub fn filter(&self) -> Option<&odata::Filter> {
        self.filter.as_ref()
    }

    fn keep(&self, item: &serde_json::Value) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(item))
    }

    /// A page from items sorted by their tokens (the token to resume after an item); a page
    /// resumes after the last token even if that item has gone meanwhile.
    pub fn page_of(
        &self,
        base: &str,
        path: &str,
        items: impl IntoIterator<Item = (String, serde_json::Value)>,
    ) -> serde_json::Value {
        let mut out = Vec::new();
        let mut last = None;
        let mut more = false;
        for (token, item) in items {
            if self
                .skip_token
                .as_deref()
                .is_some_and(|skip| token.as_str() <= skip)
            {
                continue;
            }
            if out.len() == self.max_results {
                more = true;
                break;
            }
            if self.keep(&item) {
                out.push(odata::select(item, self.select.as_deref()));
            }
            last = Some(token);
        }
        self.page(base, path, out, if more { last } else { None })
    }

    /// A page from a source read in chunks after a token: `fetch(after, limit)` returns items
    /// with their tokens in list order.
    pub async fn page_from<F, Fut>(
        &self,
        base: &str,
        path: &str,
        mut fetch: F,
    ) -> Result<serde_json::Value, ApiError>
    where
        F: FnMut(Option<String>, i64) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<(String, serde_json::Value)>, ApiError>>,
    {
        let mut out = Vec::new();
        let mut after = self.skip_token.clone();
        for _ in 0..MAX_SCAN_CHUNKS {
            let limit = self.max_results;
            let rows = fetch(after.clone(), limit as i64).await?;
            let exhausted = rows.len() < limit;
            for (token, item) in rows {
                after = Some(token);
                if self.keep(&item) {
                    out.push(odata::select(item, self.select.as_deref()));
                    if out.len() == self.max_results {
                        return Ok(self.page(base, path, out, after));
                    }
                }
            }
            if exhausted {
                return Ok(self.page(base, path, out, None));
            }
        }
        Ok(self.page(base, path, out, after))
    }

    /// `$select` applied to a single resource.
    pub fn shape(&self, item: serde_json::Value) -> serde_json::Value {
        odata::select(item, self.select.as_deref())
    }

    /// `{"value": [...], "odata.nextLink": ...}`. The link is absolute (from the Host header),
    /// carries the filter, the selection and the request's own api-version, and a token made of
    /// URL-safe characters.
    fn page(
        &self,
        base: &str,
        path: &str,
        items: Vec<serde_json::Value>,
        next: Option<String>,
    ) -> serde_json::Value {
        let mut body = serde_json::json!({ "value": items });
        if let Some(token) = next {
            let mut pairs: Vec<(&str, String)> = Vec::new();
            if let Some(v) = &self.api_version {
                pairs.push(("api-version", v.clone()));
            }
            pairs.push(("maxresults", self.max_results.to_string()));
            pairs.extend(self.carried.iter().cloned());
            if let Some(f) = &self.filter_text {
                pairs.push(("$filter", f.clone()));
            }
            if let Some(s) = &self.select_text {
                pairs.push(("$select", s.clone()));
            }
            pairs.push(("$skiptoken", token));
            let query: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect();
            body["odata.nextLink"] = serde_json::json!(format!("{base}{path}?{}", query.join("&")));
        }
        body
    }
}

/// Percent-encodes all but `[A-Za-z0-9._~-]` (what the SDK's re-quoting leaves alone).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"._~-".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `$select` of a single-resource GET.
pub struct Select(Option<Vec<String>>);

impl<S: Send + Sync> FromRequestParts<S> for Select {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let select = parts.uri.query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "$select")
                .map(|(_, v)| v.into_owned())
        });
        Ok(Select(odata::parse_select(select.as_deref())))
    }
}

/// `$expand`: whether `stats` is asked for, the one expansion there is (Azure's other,
/// `$expand=nodeagentinfo` or the like, name fields this server always gives).
pub struct Expand {
    pub stats: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Expand {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let stats = parts.uri.query().is_some_and(|q| {
            form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| k == "$expand")
                .any(|(_, v)| v.split(',').any(|e| e.trim().eq_ignore_ascii_case("stats")))
        });
        Ok(Expand { stats })
    }
}

impl Select {
    pub fn shape(&self, item: serde_json::Value) -> serde_json::Value {
        odata::select(item, self.0.as_deref())
    }
}

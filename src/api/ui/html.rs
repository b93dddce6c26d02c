//! The dashboard's HTML: escaping, the page around each view, and the SVG pieces the views share
//! (bars and cells are SVG, so the pages need no inline style and the policy forbids all of it).

use std::fmt::{self, Display, Write as _};

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use super::UiSession;

/// Text made safe for HTML, in element content and in quoted attribute values alike.
pub struct Esc<'a>(pub &'a str);

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Text made safe as one segment of a URL path (ids are restricted, file paths are not).
pub struct Seg<'a>(pub &'a str);

impl Display for Seg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                f.write_char(b as char)?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

/// The sections of the dashboard, in the order the header lists them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Pools,
    Jobs,
    Usage,
    Bes,
    Tokens,
}

const SECTIONS: [(Section, &str, &str); 5] = [
    (Section::Pools, "/ui/pools", "Pools"),
    (Section::Jobs, "/ui/jobs", "Jobs"),
    (Section::Usage, "/ui/usage", "Compute hours"),
    (Section::Bes, "/ui/bes", "BES jobs"),
    (Section::Tokens, "/ui/tokens", "Read-only tokens"),
];

/// The headers every dashboard page carries: no caching, no framing, and scripts and styles
/// from this server's own files only.
pub fn secure(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    response
}

/// A whole page: the header with the sections and the signed-in account, then `main`.
/// `refresh` (seconds) makes the script reload `main` in place while the page is shown.
pub fn page(s: &UiSession, section: Section, title: &str, refresh: u32, main: &str) -> Response {
    let mut nav = String::new();
    for (sec, href, label) in SECTIONS {
        if sec == Section::Tokens && s.read_only {
            continue;
        }
        let current = if sec == section {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{href}\"{current}>{label}</a>");
    }
    let badge = if s.read_only {
        " <span class=\"badge\">read-only</span>"
    } else {
        ""
    };
    let body = format!(
        "<header><a class=\"brand\" href=\"/ui\">batchpool</a><nav>{nav}</nav>\
         <span class=\"who\">{account}{badge}</span>\
         <form method=\"post\" action=\"/ui/signout\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button>Sign out</button></form></header>\
         <main data-refresh=\"{refresh}\">{main}</main>",
        account = Esc(&s.account),
        csrf = s.csrf,
    );
    document(title, &s.csrf, &body)
}

/// The HTML document around `body`.
pub fn document(title: &str, csrf: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"csrf\" content=\"{csrf}\"><title>{title} · batchpool</title>\
         <link rel=\"stylesheet\" href=\"/ui/assets/style.css\">\
         <script src=\"/ui/assets/ui.js\" defer></script></head><body>{body}</body></html>",
        title = Esc(title),
    );
    secure(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

/// A time as the dashboard shows it.
pub fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// A bar of parts (count, CSS class), each as wide as its share of the total.
pub fn bar(parts: &[(i64, &str)], width: u32) -> String {
    let total: i64 = parts.iter().map(|(n, _)| n).sum();
    let mut out = format!(
        "<svg class=\"bar\" width=\"{width}\" height=\"12\" viewBox=\"0 0 {width} 12\" role=\"img\">\
         <rect width=\"{width}\" height=\"12\" class=\"empty\"/>"
    );
    let mut x = 0.0;
    for (n, class) in parts {
        if total == 0 || *n == 0 {
            continue;
        }
        let w = *n as f64 * width as f64 / total as f64;
        let _ = write!(
            out,
            "<rect x=\"{x:.1}\" width=\"{w:.1}\" height=\"12\" class=\"{class}\"><title>{class}: {n}</title></rect>"
        );
        x += w;
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_html_gives_meaning() {
        assert_eq!(
            Esc("<script>alert('x')</script> & \"y\"").to_string(),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        assert_eq!(Seg("a b/../c?d").to_string(), "a%20b%2F..%2Fc%3Fd");
    }

    #[test]
    fn a_bar_splits_its_width_by_share() {
        let svg = bar(&[(1, "succeeded"), (3, "active")], 100);
        assert!(
            svg.contains("width=\"25.0\" height=\"12\" class=\"succeeded\""),
            "{svg}"
        );
        assert!(svg.contains("x=\"25.0\" width=\"75.0\""), "{svg}");
        assert!(!bar(&[(0, "failed")], 100).contains("class=\"failed\""));
    }
}

//! Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! JSON messages ending in a NUL byte, commands on the child's fd 3, answers on its fd 4), so a
//! test clicks and types in a real browser with nothing but std and serde_json.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// The Chromium of this machine (Debian's `chromium`, which scripts/test-env.sh installs).
fn chromium() -> String {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {name}"))
            .output();
        if let Ok(out) = found {
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
        }
    }
    panic!("no Chromium on PATH: scripts/test-env.sh installs Debian's chromium");
}

impl Browser {
    pub fn start() -> Browser {
        let (cmd_read, cmd_write) = pipe();
        let (out_read, out_write) = pipe();
        let profile = tempfile::tempdir().expect("profile dir");
        let (r, w) = (cmd_read.as_raw_fd(), out_write.as_raw_fd());
        let mut command = Command::new(chromium());
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
            ])
            .args([
                "--window-size=1280,900",
                "--no-first-run",
                "--disable-extensions",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // The child's fd 3 reads our commands and its fd 4 writes its answers.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("start chromium");
        drop((cmd_read, out_write));
        let (tx, rx) = channel();
        let reader = std::fs::File::from(out_read);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(reader);
            let mut buf = Vec::new();
            while matches!(reader.read_until(0, &mut buf), Ok(n) if n > 0) {
                buf.pop_if(|b| *b == 0);
                if let Ok(v) = serde_json::from_slice(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        let mut browser = Browser {
            child,
            to: std::fs::File::from(cmd_write),
            from: rx,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = browser.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().expect("session").to_string();
        browser.page("Page.enable", json!({}));
        browser.page("Runtime.enable", json!({}));
        browser
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.from.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
                    return v["result"].clone();
                }
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium exited during {method}"),
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    fn page(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(&session))
    }

    /// Goes to `url` (what a user types in the address bar).
    pub fn goto(&mut self, url: &str) {
        self.page("Page.navigate", json!({"url": url}));
        self.wait_until(
            "document.readyState === 'complete'",
            &format!("{url} to load"),
        );
    }

    /// The value of a script run in the page (awaited if it is a promise).
    pub fn eval(&mut self, script: &str) -> Value {
        let r = self.page(
            "Runtime.evaluate",
            json!({"expression": script, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{script}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits (at most 60 s) for a script to be true in the page; a page that is loading or
    /// navigating away counts as not yet.
    pub fn wait_until(&mut self, condition: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let script = format!(
            "(() => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }})()"
        );
        loop {
            let r = self.page(
                "Runtime.evaluate",
                json!({"expression": script, "returnByValue": true}),
            );
            if r["result"]["value"] == json!(true) {
                return;
            }
            let page_text = self.page(
                "Runtime.evaluate",
                json!({"expression": "document.body ? document.body.innerText.slice(0, 2000) : ''", "returnByValue": true}),
            );
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the page shows: {}",
                page_text["result"]["value"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The page's visible text.
    pub fn text(&mut self) -> String {
        self.eval("document.body.innerText")
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Saves what the page looks like as a PNG.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        // As tall as what the page shows, not the whole window.
        let height = self.eval("Math.ceil(document.body.getBoundingClientRect().bottom) + 16");
        let height = height.as_f64().unwrap_or(900.0).clamp(200.0, 4000.0);
        let clip = json!({"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1});
        let shot = self.page(
            "Page.captureScreenshot",
            json!({"format": "png", "clip": clip, "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("png data"))
            .expect("base64 png");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

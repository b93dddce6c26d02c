//! The dashboard at /ui, in a real browser (headless Chromium over the DevTools protocol): a
//! user signs in with the account key, sees the pool and job this test made, tails a running
//! task's log, resizes a pool, hands out a read-only token and signs in with it. Screenshots go
//! to target/ui/ (the README's is one of them).

#[path = "common/browser.rs"]
mod browser;
mod common;

use browser::Browser;
use common::{account_cmd, key_line, wait_for, Rt, TestServer};
use serde_json::{json, Value};

/// A pool of 6 nodes × 4 slots and a job of 12 tasks: 10 echo, one fails, one prints markup.
async fn pool_and_job(s: &TestServer) {
    let pool = json!({"id": "ui-pool", "vmSize": "standard_a1", "targetDedicatedNodes": 6, "taskSlotsPerNode": 4});
    let (status, body) = s.post("/pools", &pool).await;
    assert_eq!(status, 201, "{body}");
    s.wait_nodes("ui-pool", 6, "idle").await;
    s.job_on("ui-job", "ui-pool").await;
    let mut tasks: Vec<Value> = (1..=10)
        .map(|i| json!({"id": format!("t{i:02}"), "commandLine": format!("echo task {i}")}))
        .collect();
    tasks.push(json!({"id": "fails", "commandLine": "sh -c 'exit 3'"}));
    tasks.push(json!({"id": "markup", "commandLine": "echo '<script>window.boom=1</script>'"}));
    s.add_tasks("ui-job", tasks).await;
    s.wait_all_completed("ui-job", 12).await;
}

fn sign_in(b: &mut Browser, base: &str, account: &str, secret: &str) {
    b.goto(&format!("{base}/ui"));
    b.wait_until("document.querySelector('form.signin')", "the sign-in form");
    let fill = format!(
        "document.querySelector('input[name=account]').value = {account:?};\
         document.querySelector('input[name=secret]').value = {secret:?};\
         document.querySelector('form.signin button').click(); true"
    );
    b.eval(&fill);
    b.wait_until(
        "location.pathname === '/ui/pools' && document.querySelector('main h1')",
        "the pools page",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_watches_and_steers_the_work_in_chromium() {
    let s = TestServer::start(Rt::Local).await;
    pool_and_job(&s).await;
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let mut b = Browser::start();
    sign_in(&mut b, &s.base, &account, &key);

    // Pools: the pool, its six nodes in the heat map, a resize form.
    b.wait_until(
        "document.querySelectorAll('#pool-ui-pool svg.heat g.node').length === 6",
        "six nodes in the heat map",
    );
    let text = b.text();
    assert!(
        text.contains("ui-pool") && text.contains("6 of 6 nodes"),
        "{text}"
    );
    b.screenshot(&b_shot("pools.png"));

    // Jobs: the job with its progress bar and counts.
    b.goto(&format!("{}/ui/jobs", s.base));
    let text = b.text();
    assert!(
        text.contains("ui-job") && text.contains("11 succeeded · 1 failed"),
        "{text}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('svg.bar rect.succeeded').length"),
        json!(1)
    );
    b.screenshot(&b_shot("jobs.png"));

    // A job's tasks, filtered; markup in a command line is shown, never run.
    b.goto(&format!("{}/ui/jobs/ui-job?state=completed", s.base));
    let text = b.text();
    assert!(text.contains("failed, exit 3"), "{text}");
    assert!(!text.contains("cost "), "no prices, no cost: {text}");
    // Priced, the job's page says what it cost and what it will.
    let prices = json!({"account": account, "currency": "EUR", "computeHour": 0.5});
    let (status, _) = s
        .operator(reqwest::Method::PUT, "prices", Some(&prices), None)
        .await;
    assert_eq!(status, 200);
    b.goto(&format!("{}/ui/jobs/ui-job?state=completed", s.base));
    let cost = b.eval("document.querySelector('.facts .cost').textContent");
    let cost = cost.as_str().unwrap_or_default().to_string();
    assert!(
        cost.starts_with("cost ") && cost.contains(" EUR, about "),
        "{cost}"
    );
    assert!(
        text.contains("echo '<script>window.boom=1</script>'"),
        "{text}"
    );
    assert_eq!(b.eval("typeof window.boom"), json!("undefined"));
    assert_eq!(
        b.eval("document.querySelectorAll('table.tasks tbody tr').length"),
        json!(12)
    );
    b.goto(&format!("{}/ui/jobs/ui-job?state=active", s.base));
    assert!(b.text().contains("No tasks here."));

    waiting(&s, &mut b).await;
    live_log(&s, &mut b).await;
    usage_and_bes(&s, &mut b);
    resize(&s, &mut b).await;
    read_only(&s, &mut b, &account);
}

/// A job whose pool does not exist: its page and its task's say why the task waits.
async fn waiting(s: &TestServer, b: &mut Browser) {
    s.job_on("ui-wait", "ui-nowhere").await;
    s.add_tasks("ui-wait", vec![json!({"id": "w", "commandLine": "true"})])
        .await;
    wait_for("the task's reason", || async {
        let t = s.task("ui-wait", "w").await;
        (t["waitReason"]["code"] == "PoolNotFound").then_some(())
    })
    .await;
    b.goto(&format!("{}/ui/jobs/ui-wait", s.base));
    let text = b.text();
    assert!(
        text.contains("Waiting: PoolNotFound The job's pool \"ui-nowhere\" does not exist"),
        "{text}"
    );
    assert_eq!(
        b.eval("document.querySelector('table.tasks tbody td span.waits').textContent"),
        json!("PoolNotFound")
    );
    b.goto(&format!("{}/ui/jobs/ui-wait/tasks/w", s.base));
    assert!(b.text().contains("Waiting: PoolNotFound"), "{}", b.text());
}

/// A task started after its page was opened: its output appears line by line, to the end.
async fn live_log(s: &TestServer, b: &mut Browser) {
    let command = "sh -c 'for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done'";
    let mut tasks = vec![json!({"id": "slow", "commandLine": command})];
    tasks.extend((1..=18).map(|i| json!({"id": format!("busy{i}"), "commandLine": "sleep 6"})));
    s.add_tasks("ui-job", tasks).await;
    wait_for("19 tasks running", || async {
        let (_, counts) = s.get("/jobs/ui-job/taskcounts").await;
        (counts["taskCounts"]["running"] == 19).then_some(())
    })
    .await;
    // The pools page while they run: nodes filled by their slots in use (the README's picture).
    b.goto(&format!("{}/ui/pools", s.base));
    b.wait_until(
        "document.querySelectorAll('svg.heat rect.use:not([height=\"0\"])').length === 6",
        "every node busy",
    );
    assert!(!b.text().contains(" 0 of 24 slots in use"));
    b.screenshot(&b_shot("dashboard.png"));
    b.goto(&format!("{}/ui/jobs/ui-job/tasks/slow", s.base));
    b.wait_until(
        "document.querySelector('pre.log').textContent.includes('line 1')",
        "the first line",
    );
    b.wait_until(
        "document.querySelector('pre.log').dataset.done === 'true'",
        "the log to end with the task",
    );
    let log = b.eval("document.querySelector('pre.log').textContent");
    assert_eq!(log, json!("line 1\nline 2\nline 3\nline 4\nline 5\n"));
}

fn usage_and_bes(s: &TestServer, b: &mut Browser) {
    b.goto(&format!("{}/ui/usage", s.base));
    b.wait_until(
        "document.querySelectorAll('svg.chart rect').length > 0",
        "a bar of compute hours",
    );
    assert!(b.text().contains("ui-pool"));
    // Priced (since the jobs' pages above), the tables say what the hours cost.
    assert!(b.text().contains("Cost (EUR)"), "{}", b.text());
    b.screenshot(&b_shot("usage.png"));
    // The chart in money: the same pools' bars, each titled with its amount.
    b.eval("document.querySelector('a.measure').click(); true");
    b.wait_until(
        "location.search.includes('show=cost') && document.querySelector('svg.chart[aria-label=\"EUR over time\"] rect') !== null",
        "a bar of cost",
    );
    let title = b.eval("document.querySelector('svg.chart rect title').textContent");
    assert!(
        title
            .as_str()
            .is_some_and(|t| t.starts_with("ui-pool: ") && t.contains(" EUR, ")),
        "{title}"
    );
    assert!(
        b.text().contains("Cost in the last 24 hours"),
        "{}",
        b.text()
    );
    b.goto(&format!("{}/ui/bes", s.base));
    assert!(b.text().contains("No BES jobs yet."));
}

/// Where a screenshot goes: target/ui/.
fn b_shot(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("../ui")
        .join(name)
}

/// The resize form goes through the Batch API with the page's CSRF token.
async fn resize(s: &TestServer, b: &mut Browser) {
    b.goto(&format!("{}/ui/pools", s.base));
    b.eval(
        "const f = document.querySelector('#pool-ui-pool form.resize');\
         f.querySelector('input').value = '1'; f.querySelector('button').click(); true",
    );
    b.wait_until(
        "document.querySelector('#pool-ui-pool output').textContent === 'Accepted.'",
        "the resize to be accepted",
    );
    let (_, pool) = s.get("/pools/ui-pool").await;
    assert_eq!(pool["targetDedicatedNodes"], 1);
    wait_for("the pool to shrink to 1 node", || async {
        (s.nodes("ui-pool").await.len() == 1).then_some(())
    })
    .await;
    b.wait_until(
        "document.querySelectorAll('#pool-ui-pool svg.heat g.node').length === 1",
        "the page to show 1 node",
    );
}

/// A key's session makes a read-only token; a session opened with it sees and cannot change.
fn read_only(s: &TestServer, b: &mut Browser, account: &str) {
    b.goto(&format!("{}/ui/tokens", s.base));
    b.eval(
        "document.querySelector('input[name=name]').value = 'wallboard';\
         document.querySelector('form.inline button').click(); true",
    );
    b.wait_until("document.querySelector('#new-token')", "the new token");
    let token = b.eval("document.querySelector('#new-token').textContent");
    let token = token.as_str().unwrap().to_string();
    b.eval("document.querySelector('header form button').click(); true");
    b.wait_until(
        "location.pathname === '/ui/signin'",
        "the sign-in page after signing out",
    );
    sign_in(b, &s.base, account, &token);
    let text = b.text();
    assert!(
        text.contains("read-only") && text.contains("ui-pool"),
        "{text}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('form.resize').length"),
        json!(0)
    );
    let refused = b.eval(
        "fetch('/ui/api/pools/ui-pool/resize', {method: 'POST', headers: {'content-type': 'application/json', \
         'x-csrf-token': document.querySelector('meta[name=csrf]').content}, body: '{\"targetDedicatedNodes\": 0}'})\
         .then(async r => [r.status, (await r.json()).code])",
    );
    assert_eq!(refused, json!([403, "ReadOnlySession"]));
    b.goto(&format!("{}/ui/tokens", s.base));
    assert!(b.text().contains("Key required"));
}

/// A browser's part without the browser: a cookie it keeps, forms it posts.
#[derive(Default)]
struct Visitor {
    http: reqwest::Client,
    cookie: String,
}

impl Visitor {
    fn new() -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Visitor {
            http,
            cookie: String::new(),
        }
    }

    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        self.http
            .request(method, url)
            .header("cookie", &self.cookie)
    }

    async fn get(&self, url: String) -> reqwest::Response {
        self.request(reqwest::Method::GET, url)
            .send()
            .await
            .unwrap()
    }

    async fn post_form(&mut self, url: String, fields: &[(&str, &str)]) -> u16 {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let r = self
            .request(reqwest::Method::POST, url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        if let Some(set) = r.headers().get("set-cookie") {
            let set = set.to_str().unwrap();
            assert!(
                set.contains("HttpOnly") && set.contains("SameSite=Strict"),
                "{set}"
            );
            self.cookie = set.split(';').next().unwrap().to_string();
        }
        r.status().as_u16()
    }

    async fn sign_in(&mut self, base: &str, account: &str, secret: &str) -> u16 {
        let url = format!("{base}/ui/signin");
        self.post_form(url, &[("account", account), ("secret", secret)])
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_need_a_key_stay_in_their_account_and_end() {
    let s = TestServer::start(Rt::Local).await;
    s.pool_of_one_idle_node("mine").await;
    s.job_on("my-job", "mine").await;
    let (account, key) = s.http.credentials.lock().unwrap().clone().unwrap();
    let mut me = Visitor::new();
    let page = me.get(format!("{}/ui/pools", s.base)).await;
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/ui/signin");
    assert_eq!(me.sign_in(&s.base, &account, "not-the-key").await, 401);
    assert_eq!(me.sign_in(&s.base, "nobody", &key).await, 401);

    // Another account's session sees none of this account's things, not even their names.
    let created = account_cmd(&s, &["create", "other"]);
    let mut other = Visitor::new();
    assert_eq!(
        other
            .sign_in(&s.base, "other", key_line(&created, "primary"))
            .await,
        303
    );
    let pools = other
        .get(format!("{}/ui/pools", s.base))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        pools.contains("No pools yet") && !pools.contains("mine"),
        "{pools}"
    );
    assert_eq!(
        other
            .get(format!("{}/ui/jobs/my-job", s.base))
            .await
            .status(),
        404
    );
    assert_eq!(
        other
            .get(format!("{}/ui/api/pools/mine", s.base))
            .await
            .status(),
        404
    );

    // A change through /ui/api needs the page's CSRF token.
    assert_eq!(me.sign_in(&s.base, &account, &key).await, 303);
    let html = me
        .get(format!("{}/ui/pools", s.base))
        .await
        .text()
        .await
        .unwrap();
    let csrf = html
        .split("name=\"csrf\" content=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string();
    let resize = |csrf: Option<&str>| {
        let mut r = me
            .request(
                reqwest::Method::POST,
                format!("{}/ui/api/pools/mine/resize", s.base),
            )
            .header("content-type", "application/json")
            .body(r#"{"targetDedicatedNodes": 0}"#);
        if let Some(t) = csrf {
            r = r.header("x-csrf-token", t);
        }
        r.send()
    };
    let refused = resize(None).await.unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(
        refused.json::<Value>().await.unwrap()["code"],
        "CsrfTokenMismatch"
    );
    assert_eq!(resize(Some(&csrf)).await.unwrap().status(), 202);

    // Signing out ends the session: the same cookie opens nothing any more.
    let signed_in = me.cookie.clone();
    assert_eq!(
        me.post_form(format!("{}/ui/signout", s.base), &[("csrf", &csrf)])
            .await,
        303
    );
    me.cookie = signed_in;
    assert_eq!(
        me.get(format!("{}/ui/api/pools/mine", s.base))
            .await
            .status(),
        401
    );
}

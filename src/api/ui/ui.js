// batchpool dashboard: refreshes a page's main part in place, tails task logs, and sends the
// resize form to the Batch API under /ui/api (with the page's CSRF token). No build step.
"use strict";
const csrf = document.querySelector('meta[name="csrf"]')?.content || "";

// Reload <main> every data-refresh seconds while the page is visible and nobody is typing.
const main = document.querySelector("main[data-refresh]");
const every = Number(main?.dataset.refresh || 0);
if (every > 0) {
  setInterval(async () => {
    if (document.hidden || document.activeElement?.form) return;
    const r = await fetch(location.href, { credentials: "same-origin" });
    if (!r.ok || r.redirected) return;
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    const fresh = doc.querySelector("main");
    if (fresh) { main.innerHTML = fresh.innerHTML; wire(); }
  }, every * 1000);
}

// A task's log: read from where the last read ended, until the task has completed and a read
// after that brought nothing new.
function tail(pre) {
  let offset = 0;
  let done = pre.dataset.done === "true";
  const decoder = new TextDecoder();
  async function step() {
    let got = 0;
    try {
      const r = await fetch(pre.dataset.log, { headers: { "ocp-range": `bytes=${offset}-` } });
      if (r.ok) {
        const bytes = new Uint8Array(await r.arrayBuffer());
        got = bytes.length;
        offset += got;
        pre.textContent += decoder.decode(bytes, { stream: true });
        pre.scrollTop = pre.scrollHeight;
      }
      if (!done) {
        const t = await fetch(pre.dataset.task);
        if (t.ok && (await t.json()).state === "completed") { done = true; got = 1; }
      }
    } catch (e) { /* the server is restarting: try again */ }
    if (done && got === 0) {
      pre.dataset.done = "true";
      pre.classList.add("ended");
      return;
    }
    setTimeout(step, 1000);
  }
  step();
}
document.querySelectorAll("pre[data-log]").forEach(tail);

// Forms that call the Batch API: their fields as JSON, numbers as numbers.
function wire() {
  document.querySelectorAll("form[data-api]").forEach((form) => {
    form.onsubmit = async (ev) => {
      ev.preventDefault();
      const body = {};
      for (const input of form.querySelectorAll("input[name]")) {
        body[input.name] = input.type === "number" ? Number(input.value) : input.value;
      }
      const out = form.querySelector("output");
      const r = await fetch(form.dataset.api, {
        method: "POST",
        headers: { "content-type": "application/json", "x-csrf-token": csrf },
        body: JSON.stringify(body),
      });
      if (r.ok) { out.textContent = "Accepted."; return; }
      let message = `${r.status}`;
      try { const e = await r.json(); message = `${e.code}: ${e.message?.value || e.message}`; } catch (_) {}
      out.textContent = message;
    };
  });
}
wire();

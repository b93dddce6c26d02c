// batchpool dashboard: refreshes a page's main part in place, follows task logs, and sends the
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

// A task's log, as the server streams it (?follow=true) from attempt to attempt until the task
// completes. Cut off (the server restarting), it is read again from its start.
async function tail(pre) {
  for (;;) {
    try {
      const r = await fetch(pre.dataset.log + "?follow=true");
      if (r.ok) {
        const decoder = new TextDecoder();
        const reader = r.body.getReader();
        let text = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
          pre.textContent = text;
          pre.scrollTop = pre.scrollHeight;
        }
      }
      if (r.ok || r.status < 500) {
        pre.dataset.done = "true";
        pre.classList.add("ended");
        return;
      }
    } catch (e) { /* cut off: again */ }
    await new Promise((go) => setTimeout(go, 2000));
  }
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

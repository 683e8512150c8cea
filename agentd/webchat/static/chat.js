// The web chat (agentd/webchat/pages.py). Model text is never HTML here: every message is
// built from DOM nodes with textContent, so nothing the model writes can run or style the page.
(function () {
  "use strict";
  var main = document.getElementById("chat");
  if (!main) return;
  var csrf = main.getAttribute("data-csrf");
  var list = document.getElementById("messages");
  var typing = document.getElementById("typing");
  var status = document.getElementById("status");
  var form = document.getElementById("composer");
  var input = document.getElementById("text");
  var PENDING = "agentd-chat-pending";
  var cursor = 0;
  var shown = {};  // message id -> its <li>
  var draft = null;

  function say(text) { status.textContent = text || ""; }

  // --- formatting: a small, safe subset of Markdown --------------------------------------
  var INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\[[^\]\n]+\]\(https?:\/\/[^\s)]+\))|(https?:\/\/[^\s<>()]+)/g;

  function link(href, text) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    a.rel = "noopener noreferrer nofollow";
    a.target = "_blank";
    return a;
  }

  function inline(parent, text) {
    var at = 0, m;
    INLINE.lastIndex = 0;
    while ((m = INLINE.exec(text)) !== null) {
      if (m.index > at) parent.appendChild(document.createTextNode(text.slice(at, m.index)));
      var node;
      if (m[1]) { node = document.createElement("code"); node.textContent = m[1].slice(1, -1); }
      else if (m[2]) { node = document.createElement("strong"); node.textContent = m[2].slice(2, -2); }
      else if (m[3]) {
        var cut = m[3].indexOf("](");
        node = link(m[3].slice(cut + 2, -1), m[3].slice(1, cut));
      } else { node = link(m[4], m[4]); }
      parent.appendChild(node);
      at = m.index + m[0].length;
    }
    if (at < text.length) parent.appendChild(document.createTextNode(text.slice(at)));
  }

  function paragraph(parent, text) {
    text.split(/\n{2,}/).forEach(function (block) {
      if (!block.trim()) return;
      var p = document.createElement("p");
      block.split("\n").forEach(function (line, i) {
        if (i) p.appendChild(document.createElement("br"));
        inline(p, line);
      });
      parent.appendChild(p);
    });
  }

  function render(parent, text) {
    var parts = text.split(/```[A-Za-z0-9_+-]*\n?/);
    parts.forEach(function (part, i) {
      if (i % 2) {
        var pre = document.createElement("pre");
        var code = document.createElement("code");
        code.textContent = part.replace(/\n$/, "");
        pre.appendChild(code);
        parent.appendChild(pre);
      } else {
        paragraph(parent, part);
      }
    });
  }

  // --- messages -------------------------------------------------------------------------
  function bubble(role) {
    var li = document.createElement("li");
    li.className = "msg " + role;
    return li;
  }

  function fill(li, msg) {
    li.textContent = "";
    li.setAttribute("data-id", String(msg.id));
    li.className = "msg " + msg.role;
    if (msg.file) {
      var url = "/chat/file/" + msg.id;
      if (/\.(png|jpe?g|gif|webp)$/i.test(msg.file_name)) {
        var img = document.createElement("img");
        img.src = url;
        img.alt = msg.file_name;
        li.appendChild(img);
        li.appendChild(document.createElement("br"));
      }
      li.appendChild(link(url, msg.file_name));
    }
    if (msg.text) render(li, msg.text);
    if (msg.buttons && msg.buttons.length) {
      var row = document.createElement("div");
      row.className = "buttons";
      msg.buttons.forEach(function (line) {
        line.forEach(function (b) {
          var button = document.createElement("button");
          button.type = "button";
          button.textContent = b.text;
          button.addEventListener("click", function () { press(msg.id, b.data, button); });
          row.appendChild(button);
        });
      });
      li.appendChild(row);
    }
  }

  function show(msg) {
    if (msg.role === "owner" && msg.key) {
      var waiting = list.querySelector('li.pending[data-key="' + msg.key.replace(/[^0-9a-f]/g, "") + '"]');
      if (waiting) waiting.remove();  // taken: the stored message takes the place of the draft
    }
    var li = shown[msg.id];
    if (!li) {
      li = shown[msg.id] = bubble(msg.role);
      list.insertBefore(li, draft && draft.parentNode === list ? draft : pendingFirst());
    }
    fill(li, msg);
    if (msg.role === "agent" && draft) { draft.remove(); draft = null; }
    li.scrollIntoView({ block: "nearest" });
  }

  function pendingFirst() { return list.querySelector(".pending"); }

  function showState(state) {
    typing.hidden = !state.typing;
    if (state.draft) {
      if (!draft) { draft = bubble("agent draft"); list.insertBefore(draft, pendingFirst()); }
      draft.textContent = "";
      render(draft, state.draft);
    } else if (draft) { draft.remove(); draft = null; }
  }

  // --- the event stream: every change after the cursor, each shown once ------------------
  function listen() {
    var source = new EventSource("/chat/events?after=" + cursor);
    source.addEventListener("message", function (e) {
      var msg = JSON.parse(e.data);
      if (msg.seq > cursor) cursor = msg.seq;
      show(msg);
    });
    source.addEventListener("state", function (e) { showState(JSON.parse(e.data)); });
    source.addEventListener("open", function () { say(""); main.setAttribute("data-live", "1"); });
    source.addEventListener("error", function () {
      main.removeAttribute("data-live");
      if (source.readyState === EventSource.CLOSED) {
        // Refused: the daemon starting (try again from our cursor), or the session ended.
        fetch("/chat", { credentials: "same-origin", redirect: "manual" }).then(function (r) {
          if (signedOut(r)) { say(SIGNED_OUT); return; }
          say("Reconnecting…");
          setTimeout(listen, 2000);
        }).catch(function () { say("Reconnecting…"); setTimeout(listen, 2000); });
      }
    });
  }

  // --- sending: a key per message, kept until the server took it -------------------------
  function pending() {
    try { return JSON.parse(localStorage.getItem(PENDING) || "[]"); } catch (e) { return []; }
  }
  function keep(items) { localStorage.setItem(PENDING, JSON.stringify(items)); }

  function newKey() {
    var bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
  }

  function post(url, fields) {
    // Multipart: raw UTF-8, so a long message in any script fits the server's request bound.
    var body = new FormData();
    Object.keys(fields).forEach(function (k) { body.set(k, fields[k]); });
    body.set("csrf", csrf);
    return fetch(url, { method: "POST", body: body, credentials: "same-origin", redirect: "manual" });
  }

  // The dashboard answers a request without a live session with a redirect to its login.
  function signedOut(r) { return r.type === "opaqueredirect"; }
  var SIGNED_OUT = "Your session ended: sign in again (/dashboard in your chat) and this page " +
    "sends what is still waiting.";

  function deliver(item, li, wait) {
    post("/chat/send", { key: item.key, text: item.text }).then(function (r) {
      if (r.ok) {
        keep(pending().filter(function (p) { return p.key !== item.key; }));
        li.remove();
        say("");
        return;
      }
      if (signedOut(r)) { say(SIGNED_OUT); return; }  // kept: posted again after signing in
      if (r.status >= 500) throw new Error("HTTP " + r.status);
      return r.text().then(function (why) {
        keep(pending().filter(function (p) { return p.key !== item.key; }));
        li.classList.remove("pending");
        li.classList.add("failed");
        say("Not sent: " + why);
      });
    }).catch(function () {
      // The connection dropped or the daemon restarts: the same key again is the same message.
      say("Not delivered yet; retrying…");
      setTimeout(function () { deliver(item, li, Math.min(wait * 2, 15000)); }, wait);
    });
  }

  function queue(item) {
    var li = bubble("owner pending");
    li.setAttribute("data-key", item.key);
    render(li, item.text);
    list.appendChild(li);
    deliver(item, li, 500);
  }

  function press(id, data, button) {
    button.disabled = true;
    post("/chat/press", { message: String(id), data: data }).then(function (r) {
      if (signedOut(r)) { say(SIGNED_OUT); button.disabled = false; return; }
      return r.ok ? r.json().then(function (j) { say(j.said); }) : r.text().then(say);
    }).catch(function () { say("The press did not arrive; try again."); button.disabled = false; });
  }

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var text = input.value.trim();
    if (!text) return;
    var item = { key: newKey(), text: text };
    keep(pending().concat([item]));
    input.value = "";
    queue(item);
  });
  input.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });

  pending().forEach(queue);  // sent before a reload, never confirmed: the same keys again
  listen();
})();

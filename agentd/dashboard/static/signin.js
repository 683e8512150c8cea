// The sign-in page without reloads: the same posts its forms make (asking for JSON back), and
// the site's picture refreshed about once a second while the page is visible. Without this
// script the forms work alone, one page load per click.
(function () {
  var root = document.querySelector("[data-signin]");
  if (!root) return;
  var img = document.getElementById("screen");
  var said = document.getElementById("remote-said");
  var loading = false;

  function refresh() {
    if (loading) return;
    loading = true;
    var next = new Image();
    next.onload = function () { img.src = next.src; loading = false; };
    next.onerror = function () { loading = false; state(); };
    next.src = "/browser/signin/screen?n=" + Date.now();
  }

  function state() {
    fetch("/browser/signin/state", { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (s) {
        if (!s.name) { location.href = "/browser"; return; }  // closed: idled out or elsewhere
        document.getElementById("remote-title").textContent = s.title;
        document.getElementById("remote-url").textContent = s.url;
      })
      .catch(function () {});
  }

  // One at a time, in order: a click that puts the cursor in a field lands before the text.
  var queue = Promise.resolve();

  function post(action, data) {
    queue = queue.then(function () { return send(action, data); });
  }

  function send(action, data) {
    return fetch(action, {
      method: "POST",
      body: new URLSearchParams(data),
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    })
      .then(function (r) { return r.json(); })
      .then(function (answer) { said.textContent = answer.said || ""; refresh(); state(); })
      .catch(function () { said.textContent = "Could not reach the dashboard."; });
  }

  img.addEventListener("click", function (event) {
    event.preventDefault();
    var form = img.form;
    var data = new FormData(form);
    var scale = img.naturalWidth && img.clientWidth ? img.naturalWidth / img.clientWidth : 1;
    data.append("at.x", String(Math.round(event.offsetX * scale)));
    data.append("at.y", String(Math.round(event.offsetY * scale)));
    post(form.action, data);
  });

  document.querySelectorAll("form[data-remote]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var data = new FormData(form);
      var text = form.querySelector("input[name=text]");
      if (text) text.value = "";  // sent; not left in the page
      post(form.action, data);
    });
  });

  setInterval(function () { if (document.visibilityState === "visible") refresh(); }, 1000);
  setInterval(function () { if (document.visibilityState === "visible") state(); }, 3000);
})();

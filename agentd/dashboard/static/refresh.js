// Optional live refresh: a page with data-refresh="N" reloads every N seconds while it is
// visible. Without JavaScript the page works the same; it just does not update by itself.
(function () {
  var el = document.querySelector("[data-refresh]");
  if (!el) return;
  var seconds = Math.max(5, parseInt(el.getAttribute("data-refresh"), 10) || 15);
  setInterval(function () {
    if (document.visibilityState === "visible" && !document.querySelector("input:focus")) {
      location.reload();
    }
  }, seconds * 1000);
})();

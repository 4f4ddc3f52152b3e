// echomq dashboard: live counts, throughput charts, and following a job.
// Reads the page's own event stream (body[data-live], a relative URL);
// touches the DOM only through textContent and attributes, never HTML.
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-live");
  var badge = document.getElementById("live");
  // A notice (`?done=`) is shown once: a reload must not repeat it.
  if (window.URLSearchParams && window.history.replaceState) {
    var params = new URLSearchParams(window.location.search);
    if (params.has("done")) {
      params.delete("done");
      var rest = params.toString();
      window.history.replaceState(null, "", window.location.pathname + (rest ? "?" + rest : ""));
    }
  }
  if (!url || !window.EventSource) { return; }
  var SAMPLES = 60;
  var rates = {};
  var reloading = false;

  function rowFor(name) {
    var rows = document.querySelectorAll("tr[data-queue]");
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-queue") === name) { return rows[i]; }
    }
    return null;
  }

  function draw(svg, values) {
    var line = svg.querySelector("polyline");
    if (!line) { return; }
    var max = 1;
    values.forEach(function (v) { if (v > max) { max = v; } });
    var step = 120 / (SAMPLES - 1);
    var start = SAMPLES - values.length;
    var pts = values.map(function (v, i) {
      return ((start + i) * step).toFixed(1) + "," + (23 - (v / max) * 22).toFixed(1);
    });
    line.setAttribute("points", pts.join(" "));
    svg.setAttribute("data-max", String(max));
  }

  function update(q) {
    var scope = document.getElementById("queues") ? rowFor(q.name) : document;
    if (!scope) { return; }
    Object.keys(q.counts).forEach(function (state) {
      var cells = scope.querySelectorAll('[data-count="' + state + '"]');
      for (var i = 0; i < cells.length; i++) { cells[i].textContent = String(q.counts[state]); }
    });
    var paused = scope.querySelectorAll(".paused");
    for (var i = 0; i < paused.length; i++) { paused[i].hidden = !q.paused; }
    if (q.rate === null || q.rate === undefined) { return; }
    var list = rates[q.name] || (rates[q.name] = []);
    list.push(q.rate);
    if (list.length > SAMPLES) { list.shift(); }
    var cell = scope.querySelector("[data-rate]");
    if (cell) { cell.textContent = q.rate.toFixed(1); }
    var svg = scope.querySelector("svg.spark");
    if (svg) { draw(svg, list); }
  }

  function follow(job) {
    var el = document.getElementById("job-state");
    if (!el || reloading) { return; }
    if (job.state === "gone") { el.textContent = "removed"; return; }
    var attempts = document.getElementById("job-attempts");
    var moved = attempts && String(job.attempts) !== attempts.getAttribute("data-attempts");
    if (job.state !== el.getAttribute("data-state") || moved) {
      // The record changed (attempts, errors, result, timeline): show it whole.
      reloading = true;
      window.location.reload();
    }
  }

  var source = new EventSource(url);
  source.onopen = function () { badge.textContent = "live"; badge.className = "live on"; };
  source.onerror = function () { badge.textContent = "offline"; badge.className = "live"; };
  source.addEventListener("counts", function (ev) {
    var data = JSON.parse(ev.data);
    data.queues.forEach(update);
    if (data.job) { follow(data.job); }
  });
  source.addEventListener("error", function (ev) {
    if (ev.data) { badge.textContent = "error"; badge.title = ev.data; }
  });
})();

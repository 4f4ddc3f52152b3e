// echomq dashboard: live counts, throughput charts, the latest events of a
// queue, and following a job.
// Reads the page's own event stream (body[data-live], a relative URL);
// touches the DOM only through textContent and attributes, never HTML
// strings (the history charts are refreshed as parsed nodes of this same
// page, fetched again: markup the server escaped).
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
  // The history charts are drawn by the server (chart.rs): once a minute
  // fetch this page again and put its fresh #history in place.
  if (document.getElementById("history") && window.fetch && window.DOMParser) {
    window.setInterval(function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (text) {
          if (!text) { return; }
          var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("history");
          var old = document.getElementById("history");
          if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); }
        })
        .catch(function () {});
    }, 60000);
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

  function line(values, max) {
    var step = 120 / (SAMPLES - 1);
    var start = SAMPLES - values.length;
    return values.map(function (v, i) {
      return ((start + i) * step).toFixed(1) + "," + (23 - (v / max) * 22).toFixed(1);
    }).join(" ");
  }

  // `failed` may be null (the estimate from counts has no failed line).
  function draw(svg, values, failed) {
    var done = svg.querySelector("polyline.completed");
    var bad = svg.querySelector("polyline.failed");
    if (!done) { return; }
    var max = 1;
    values.concat(failed || []).forEach(function (v) { if (v > max) { max = v; } });
    done.setAttribute("points", line(values, max));
    if (bad) { bad.setAttribute("points", failed ? line(failed, max) : ""); }
    svg.setAttribute("data-max", String(max));
  }

  function show(scope, selector, on) {
    var el = scope.querySelector(selector);
    if (el) { el.hidden = !on; }
  }

  function text(scope, selector, value) {
    var el = scope.querySelector(selector);
    if (el) { el.textContent = value; }
  }

  function throughput(scope, name, t) {
    if (!t) { return; }
    show(scope, "[data-estimated]", !!t.estimated);
    show(scope, "[data-partial]", !!t.partial);
    var svg = scope.querySelector("svg.spark");
    if (t.series) {
      // From the queue's events: the server holds the whole window.
      text(scope, "[data-rate]", t.rate.toFixed(1));
      text(scope, "[data-failed-rate]", t.failed_rate.toFixed(1));
      if (svg) {
        draw(svg, t.series, t.failed_series);
        var sum = function (a) { return a.reduce(function (x, y) { return x + y; }, 0); };
        var done = sum(t.series), bad = sum(t.failed_series);
        svg.setAttribute("data-completed", String(done));
        svg.setAttribute("data-failed", String(bad));
        var label = done + " completed, " + bad + " failed in the chart's window, from the queue's events";
        if (svg.getAttribute("data-since")) { label += " (counted since " + svg.getAttribute("data-since") + ")"; }
        svg.setAttribute("aria-label", label);
        var title = svg.querySelector("title");
        if (title) { title.textContent = label; }
      }
      return;
    }
    // Events off: the growth of the completed count, sampled here.
    text(scope, "[data-failed-rate]", "–");
    if (t.rate === null || t.rate === undefined) { return; }
    var list = rates[name] || (rates[name] = []);
    list.push(t.rate);
    if (list.length > SAMPLES) { list.shift(); }
    text(scope, "[data-rate]", t.rate.toFixed(1));
    if (svg) { draw(svg, list, null); }
  }

  // A job id as one URL path segment (a "." or "/" must not climb).
  function segment(s) {
    return encodeURIComponent(s).replace(/[.!'()*]/g, function (c) {
      return "%" + c.charCodeAt(0).toString(16).toUpperCase();
    });
  }

  function cell(row, value, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    if (value !== null && value !== undefined) { td.textContent = String(value); }
    row.appendChild(td);
    return td;
  }

  // Events in plain words (as html.rs event_words).
  var WORDS = { promoted: "due", rate_limited: "rate limited", cancel_requested: "cancel requested" };

  function feed(events) {
    var table = document.getElementById("feed");
    if (!table || !events.length) { return; }
    var jobs = table.getAttribute("data-jobs");
    var tbody = document.createElement("tbody");
    events.forEach(function (ev) {
      var row = document.createElement("tr");
      row.setAttribute("data-event", ev.id);
      var time = document.createElement("time");
      time.textContent = ev.at;
      cell(row, null).appendChild(time);
      cell(row, WORDS[ev.event] || ev.event, "event").setAttribute("data-kind", ev.event);
      var job = cell(row, null);
      if (ev.job !== null) {
        var a = document.createElement("a");
        a.setAttribute("href", jobs + segment(ev.job));
        a.textContent = ev.job;
        job.appendChild(a);
      }
      cell(row, ev.attempt, "num");
      cell(row, ev.error, "err");
      tbody.appendChild(row);
    });
    table.replaceChild(tbody, table.querySelector("tbody"));
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
    throughput(scope, q.name, q.throughput);
    if (q.feed) { feed(q.feed); }
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
  // Close the stream as the page goes: a browser keeps at most six
  // connections to a host over HTTP/1.1, and a stream it has not closed yet
  // when the next page loads holds one of them (seen: a form post waiting
  // a minute for a free connection after a few pages).
  window.addEventListener("pagehide", function () { source.close(); });
  window.addEventListener("beforeunload", function () { source.close(); });
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

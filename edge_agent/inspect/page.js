// edge-agent inspect: click anything on the timeline or in the table for its details.
// The page is drawn on the server; this only reads the embedded session data. Every text
// from the session goes into the page through textContent, never as markup.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("session-data").textContent);
  var units = {}, rows = {}, markers = {}, rowOfUnit = {};
  data.runs.forEach(function (run) {
    run.units.forEach(function (u) { units[run.number + ":" + u.unit_id] = u; });
    Object.keys(run.rows).forEach(function (key) {
      var row = run.rows[key];
      row.run = run;
      rows[key] = row;
      row.unit_ids.forEach(function (id) { rowOfUnit[run.number + ":" + id] = key; });
    });
    Object.keys(run.markers).forEach(function (key) { markers[key] = run.markers[key]; });
  });
  var panel = document.getElementById("detail");
  var body = panel.querySelector(".body");

  function seconds(t) { return t === null ? "never played" : t.toFixed(3) + " s"; }

  function show(title, fields) {
    body.textContent = "";
    var h = document.createElement("h3");
    h.textContent = title;
    body.appendChild(h);
    var dl = document.createElement("dl");
    fields.forEach(function (pair) {
      if (pair[1] === undefined || pair[1] === "") { return; }
      var dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = pair[0];
      dd.textContent = typeof pair[1] === "object" ? JSON.stringify(pair[1]) : String(pair[1]);
      dl.appendChild(dt);
      dl.appendChild(dd);
    });
    body.appendChild(dl);
    panel.hidden = false;
  }

  function focus(key, scrollTo) {
    document.querySelectorAll(".focus").forEach(function (el) { el.classList.remove("focus"); });
    if (!key) { return; }
    var found = document.querySelectorAll('[data-row="' + key + '"], tr[data-key="' + key + '"]');
    found.forEach(function (el) { el.classList.add("focus"); });
    var target = scrollTo === "table" ? document.querySelector('tr[data-key="' + key + '"]')
      : document.querySelector('.strips [data-row="' + key + '"]');
    if (target) { target.scrollIntoView({block: "center"}); }
  }

  function showRow(key) {
    var row = rows[key];
    if (!row) { return; }
    var speech = row.caller ? row.run.caller[row.caller - 1] : null;
    var fields = [["decision", row.decision]];
    if (speech) {
      fields.push(["caller said", speech.text], ["speech", seconds(speech.start) + " – " +
        seconds(speech.end)], ["end detected", seconds(speech.detected)]);
      if (speech.turn) { fields.push(["turn", speech.turn]); }
      if (speech.why && speech.why.type) { fields.push([speech.why.type, speech.why]); }
    }
    row.unit_ids.forEach(function (id) {
      var u = units[row.run.number + ":" + id];
      if (u) { fields.push([id + " heard", u.heard], [id + " generated", u.generated]); }
    });
    row.happenings.forEach(function (m) { fields.push([m.kind, m.label]); });
    row.stages.forEach(function (s) {
      fields.push([s.name.replace("_", " "), s.after_ms + " ms" + (s.speculative ? " (speculative)" : "")]);
    });
    show(row.caller ? "Caller speech " + row.caller : "Agent", fields);
  }

  document.addEventListener("click", function (event) {
    var el = event.target;
    if (!(el instanceof Element)) { return; }
    if (el.closest("#detail .close")) { panel.hidden = true; focus(null); return; }
    var word = el.closest(".word");
    if (word) {
      var key = word.getAttribute("data-run") + ":" + word.getAttribute("data-unit");
      var unit = units[key], w = unit && unit.words[+word.getAttribute("data-index")];
      if (!w) { return; }
      show("Word " + (w.index + 1) + " of " + unit.unit_id, [
        ["word", w.text], ["state", w.heard ? "heard" : "never heard"],
        [w.heard ? "played" : "would have played", seconds(w.start) + " – " + seconds(w.end)],
        ["timing", w.exact ? "phoneme alignment" : "safe bounds (not exact)"],
        ["unit played", unit.played_ms + " ms from " + seconds(unit.start)],
        ["pauses", unit.pauses.length ? unit.pauses : ""],
        ["heard", unit.heard], ["generated", unit.generated]]);
      focus(rowOfUnit[key], "table");
      return;
    }
    var marker = el.closest("[data-marker]");
    if (marker) {
      var m = markers[marker.getAttribute("data-marker")];
      if (m) {
        var fields = [["at", seconds(m.at)]];
        Object.keys(m.event).forEach(function (k) {
          if (k !== "at" && k !== "type") { fields.push([k, m.event[k]]); }
        });
        show(m.event.type, fields);
      }
      return;
    }
    var tr = el.closest("tr.turn-row");
    if (tr) { showRow(tr.getAttribute("data-key")); focus(tr.getAttribute("data-key"), "axis"); return; }
    var spanned = el.closest("[data-row]");
    if (spanned && spanned.getAttribute("data-row")) {
      showRow(spanned.getAttribute("data-row"));
      focus(spanned.getAttribute("data-row"), "table");
    }
  });
})();

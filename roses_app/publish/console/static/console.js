// The ROSES console's one script: the editor's live preview.  It sends the editor's
// text to POST /console/preview (JSON, with the session's CSRF token in a header)
// 300 ms after the last change, and shows the problems (line, column: a click selects
// the place) or the matching items.  Everything it shows is set as text, never HTML.
(function () {
  "use strict";
  var form = document.getElementById("editor-form");
  var meta = document.querySelector('meta[name="csrf-token"]');
  if (!form || !meta) { return; }
  var token = meta.getAttribute("content");
  var $ = function (id) { return document.getElementById(id); };
  var text = $("editor-text"), kind = $("editor-kind"), source = $("editor-source");
  var limit = $("editor-limit"), name = $("editor-name");
  var status = $("preview-status"), problems = $("problems"), marked = $("preview-text");
  var counts = $("preview-counts"), items = $("preview-items");
  var timer = null, controller = null, asked = 0;

  function el(tag, content, cls) {
    var node = document.createElement(tag);
    if (content !== undefined && content !== null) { node.textContent = String(content); }
    if (cls) { node.className = cls; }
    return node;
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(run, 300);
  }

  function run() {
    if (controller) { controller.abort(); }
    controller = new AbortController();
    var n = ++asked;
    status.textContent = "Previewing…";
    fetch("/console/preview", {
      method: "POST", credentials: "same-origin", signal: controller.signal,
      headers: {"Content-Type": "application/json", "Accept": "application/json",
                "X-CSRF-Token": token},
      body: JSON.stringify({text: text.value, kind: kind.value, source: source.value || null,
                            name: name.value || "preview", limit: Number(limit.value) || 10000})
    }).then(function (r) {
      return r.json().then(function (data) { return {status: r.status, data: data}; });
    }).then(function (answer) {
      if (n === asked) { show(answer.status, answer.data); }
    }).catch(function (err) {
      if (err.name !== "AbortError" && n === asked) {
        status.textContent = "The preview failed: " + err.message;
      }
    });
  }

  function offset(line, column) {
    var lines = text.value.split("\n"), at = 0;
    for (var i = 0; i < line - 1 && i < lines.length; i++) { at += lines[i].length + 1; }
    return at + Math.max(0, (column || 1) - 1);
  }

  function select(line, column) {
    var start = offset(line, column);
    var end = text.value.indexOf("\n", start);
    text.focus();
    text.setSelectionRange(start, end < 0 ? text.value.length : end);
  }

  function showMarked(list) {
    var wrong = {};
    list.forEach(function (p) { if (p.line) { wrong[p.line] = p.column || 0; } });
    marked.replaceChildren();
    text.value.split("\n").forEach(function (line, i) {
      var column = wrong[i + 1];
      if (column === undefined) { marked.appendChild(document.createTextNode(line + "\n")); return; }
      var mark = el("mark");
      var at = Math.max(0, column - 1);
      mark.appendChild(document.createTextNode(line.slice(0, at)));
      mark.appendChild(el("span", line.slice(at, at + 1) || " ", "caret"));
      mark.appendChild(document.createTextNode(line.slice(at + 1)));
      marked.appendChild(mark);
      marked.appendChild(document.createTextNode("\n"));
    });
    marked.hidden = !Object.keys(wrong).length;
  }

  function countTable(title, mapping) {
    var keys = Object.keys(mapping || {});
    if (!keys.length) { return null; }
    var table = el("table"), head = el("tr");
    head.appendChild(el("th", title));
    head.appendChild(el("th", "items"));
    table.appendChild(head);
    keys.sort(function (a, b) { return mapping[b] - mapping[a]; }).slice(0, 50).forEach(function (k) {
      var row = el("tr");
      row.appendChild(el("td", k));
      row.appendChild(el("td", mapping[k]));
      table.appendChild(row);
    });
    return table;
  }

  function showItem(item) {
    var li = el("li"), title = item.title || "(no title)";
    if (item.link && /^https?:\/\//i.test(item.link)) {
      var a = el("a", title);
      a.href = item.link;
      a.rel = "noreferrer";
      li.appendChild(a);
    } else {
      li.appendChild(el("span", title));
    }
    var meta = [item.source, item.published, item.part].filter(function (x) { return x; });
    if (meta.length) { li.appendChild(el("span", " " + meta.join(" · "), "meta")); }
    items.appendChild(li);
  }

  function show(code, data) {
    problems.replaceChildren();
    counts.replaceChildren();
    items.replaceChildren();
    var list = data.problems || [];
    if (data.error) { list = [{message: data.error}]; }
    list.forEach(function (p) {
      var where = p.line ? "line " + p.line + (p.column ? ", column " + p.column : "") + ": " : "";
      var li = el("li", where + p.message);
      if (p.line) { li.addEventListener("click", function () { select(p.line, p.column); }); }
      problems.appendChild(li);
    });
    showMarked(list);
    if (list.length) {
      status.textContent = list.length + " problem(s)" + (code >= 500 ? " (the server)" : "");
      return;
    }
    var said = (data.matched || 0).toLocaleString() + " of " +
      (data.scanned || 0).toLocaleString() + " items match (" +
      (data.seconds || 0).toFixed(2) + " s)";
    if (data.complete) { said += ", every item of the spool read"; }
    if (data.failed) { said += "; " + data.failed + " dropped, the expression failed: " + data.failure; }
    status.textContent = said;
    [countTable("source", data.per_source), countTable("split value", data.split_values)]
      .forEach(function (t) { if (t) { counts.appendChild(t); } });
    (data.items || []).slice(0, 200).forEach(showItem);
  }

  [text, kind, source, limit, name].forEach(function (input) {
    input.addEventListener("input", schedule);
    input.addEventListener("change", schedule);
  });
  if (text.value.trim()) { schedule(); }
})();
